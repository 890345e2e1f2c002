#!/bin/sh
# tests/cluster/pack_pg.sh — Debian's PostgreSQL 15 server, packed to run
# where it is not installed: the GPU machine (Ubuntu 24.04, no PostgreSQL,
# no network), so that test_cluster.py can run a cluster there whose one
# node has a GPU (a cuda job through a node without one: phase 4).
#   sh tests/cluster/pack_pg.sh DIR      -> DIR/pg.tar.xz
# On that machine (as root; the server runs as the user `postgres`, made
# when missing):
#   sh tests/cluster/pack_pg.sh --unpack DIR   -> prints PG_BIN
# The layout is Debian's own under DIR/pg (usr/lib/postgresql/15/{bin,lib},
# usr/share/postgresql/15): PostgreSQL finds its share and library folders
# relative to its binaries, so the tree can live anywhere. Only what a
# test server needs: the server, initdb, pg_ctl, createdb, psql, pg_dump;
# the libraries the server loads (plpgsql, snowball, the encoding
# conversions; not PostGIS nor the JIT's bitcode); the share files minus
# every extension but plpgsql; and the libraries Ubuntu 24.04 lacks (ICU 72,
# OpenLDAP 2.5, SASL) or may lack (libxml2), under DIR/pg/lib.
set -eu
if [ "${1:-}" = --unpack ]; then
  dir=$(cd "${2:?usage: pack_pg.sh --unpack DIR}" && pwd)
  [ -d "$dir/pg" ] || tar xJf "$dir/pg.tar.xz" -C "$dir"
  id postgres >/dev/null 2>&1 || useradd -r -M -d /nonexistent postgres
  # the server user must reach its binaries and libraries
  chmod -R a+rX "$dir/pg"
  d=$dir
  while [ "$d" != / ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
  echo "$dir/pg/usr/lib/postgresql/15/bin"
  exit 0
fi
dir=${1:?usage: pack_pg.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
src=/usr/lib/postgresql/15
share=/usr/share/postgresql/15
[ -x "$src/bin/postgres" ] || { echo "pack_pg.sh: no $src/bin/postgres" >&2; exit 1; }
pg=$dir/pg
rm -rf "$pg"
mkdir -p "$pg/usr/lib/postgresql/15/bin" "$pg/usr/lib/postgresql/15/lib" \
         "$pg/usr/share/postgresql/15/extension" "$pg/lib"
for b in postgres initdb pg_ctl createdb psql pg_dump; do
  cp -L "$src/bin/$b" "$pg/usr/lib/postgresql/15/bin/"
done
for f in "$src"/lib/*.so; do
  case "$(basename "$f")" in postgis*|llvmjit*|address_standardizer*) continue ;; esac
  cp -L "$f" "$pg/usr/lib/postgresql/15/lib/"
done
for f in "$share"/*; do
  case "$(basename "$f")" in extension|contrib|man) continue ;; esac
  cp -rL "$f" "$pg/usr/share/postgresql/15/"
done
cp -L "$share"/extension/plpgsql* "$pg/usr/share/postgresql/15/extension/"
for l in libicui18n.so.72 libicuuc.so.72 libicudata.so.72 libxml2.so.2 \
         libldap-2.5.so.0 liblber-2.5.so.0 libsasl2.so.2 libpq.so.5; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$pg/lib/"
done
strip "$pg"/usr/lib/postgresql/15/bin/* 2>/dev/null || true
tar cJf "$dir/pg.tar.xz" -C "$dir" pg
rm -rf "$pg"
du -sh "$dir/pg.tar.xz"
