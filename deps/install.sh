#!/bin/sh
# Install the packages of the named sections of deps/packages.txt that are
# missing (build, runtime and test when none is named; [bench], the
# benchmark peers, only when named). Needs root (apt-get); prints
# what it installs and does nothing when everything is there.
#   deps/install.sh build runtime
set -eu
here=$(dirname "$0")
list="$here/packages.txt"
sections="${*:-build runtime test}"
ubuntu=0
if [ -r /etc/os-release ] && grep -qi '^ID=ubuntu' /etc/os-release; then ubuntu=1; fi

wanted=$(awk -v secs=" $sections " '
  /^[[:space:]]*#/ || /^[[:space:]]*$/ { next }
  /^\[/ { gsub(/[\[\]]/, ""); cur = $1; next }
  index(secs, " " cur " ") { print $1 }' "$list")

missing=""
for spec in $wanted; do
  # "pkg@cmd": satisfied when the command is already on PATH (e.g. npm
  # bundled with a nodejs from elsewhere, which Debian's npm would fight).
  case "$spec" in
    *@*)
      if command -v "${spec#*@}" >/dev/null 2>&1; then continue; fi
      spec=${spec%@*} ;;
  esac
  deb=${spec%%|*}
  ubu=${spec#*|}
  pkg=$deb
  [ "$ubuntu" = 1 ] && pkg=$ubu
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $pkg"
  fi
done

if [ -z "$missing" ]; then
  exit 0
fi
echo "deps: installing:$missing"
if [ "$(id -u)" != 0 ]; then
  echo "deps: not root; install these by hand:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
