#!/usr/bin/python3
"""check_compose.py — docker/compose.yaml's `cluster` profile holds what the
README promises, read with a YAML parser (merge keys resolved as Compose
does): a PostgreSQL service with a health check and its password from a
secret; two Tessel nodes that wait for it to be healthy, take the store URL
from a secret file (TESSEL_STORE_FILE, never TESSEL_STORE: a password in the
environment shows in `docker inspect`), have distinct node names and host
ports, share one data volume, check /readyz, and stop after more than the
30 s shutdown deadline; every volume and secret they name is declared.

  python3 tests/cluster/check_compose.py docker/compose.yaml
"""
import re
import sys

import yaml

bad = []


def need(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(what)


def seconds(v):
    m = re.fullmatch(r"(\d+)s", str(v or ""))
    return int(m.group(1)) if m else 0


def main():
    d = yaml.safe_load(open(sys.argv[1]))
    sv = d.get("services", {})
    cl = {k: v for k, v in sv.items() if "cluster" in (v.get("profiles") or [])}
    pgs = [k for k, v in cl.items() if "postgres" in k]
    nodes = [k for k, v in cl.items()
             if "TESSEL_STORE_FILE" in (v.get("environment") or {})]
    need(len(pgs) == 1, "one PostgreSQL service in the cluster profile")
    need(len(nodes) >= 2, "at least two Tessel nodes (%s)" % nodes)
    if pgs:
        p = cl[pgs[0]]
        need("healthcheck" in p or "HEALTHCHECK" in open(
            sys.argv[1].replace("compose.yaml", "postgres.Dockerfile")).read(),
            "PostgreSQL has a health check")
        need("POSTGRES_PASSWORD_FILE" in (p.get("environment") or {}) and
             p.get("secrets"), "PostgreSQL's password comes from a secret")
    vols, names, ports = set(), set(), set()
    for n in nodes:
        v = cl[n]
        env = v.get("environment") or {}
        need("TESSEL_STORE" not in env, "%s: no store URL in its environment" % n)
        need(env["TESSEL_STORE_FILE"].startswith("/run/secrets/") and
             env["TESSEL_STORE_FILE"].rsplit("/", 1)[1] in (v.get("secrets") or []),
             "%s: the store URL file is a secret it mounts" % n)
        dep = (v.get("depends_on") or {}).get(pgs[0] if pgs else "", {})
        need(dep.get("condition") == "service_healthy",
             "%s: starts once PostgreSQL is healthy" % n)
        need("readyz" in " ".join(v.get("healthcheck", {}).get("test", [])),
             "%s: its health check is /readyz" % n)
        need(seconds(v.get("stop_grace_period")) > 30,
             "%s: stop grace period > the 30 s shutdown deadline" % n)
        data = [m.split(":")[0] for m in v.get("volumes", []) if m.split(":")[1] == "/data"]
        vols.update(data)
        names.add(env.get("TESSEL_NODE_NAME"))
        ports.update(p.split(":")[0] for p in v.get("ports", []))
    need(len(vols) == 1, "the nodes share one data volume (%s)" % sorted(vols))
    need(len(names) == len(nodes) and None not in names, "distinct node names")
    need(len(ports) == len(nodes), "distinct host ports (%s)" % sorted(ports))
    for vname in vols:
        need(vname in (d.get("volumes") or {}), "volume %s is declared" % vname)
    for n in nodes + pgs:
        for s in cl[n].get("secrets") or []:
            need(s in (d.get("secrets") or {}), "secret %s is declared" % s)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
