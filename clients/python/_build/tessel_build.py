"""tessel_build — the Python client's own PEP 517 build backend (in-tree,
standard library only), so that `pip install ./clients/python` works on any
Python 3.8+ with pip, offline, with or without build isolation.

Why not setuptools: with --no-build-isolation, setuptools older than 70.1
needs the separate `wheel` package for bdist_wheel ("invalid command
'bdist_wheel'" on a Python 3.11 that has setuptools 65 and no wheel), and
pyenv's 3.12 / 3.13 have no setuptools at all; with isolation, pip must
fetch both from an index. This backend requires nothing: it reads the
[project] table of pyproject.toml (tomllib where there is one, else a
reader of the plain `key = "text"` / `key = ["a", "b"]` lines this file
uses), and writes the wheel (a zip: the tessel/ package with py.typed,
METADATA, WHEEL, entry_points.txt, RECORD with sha256 hashes) or the sdist
(a tar.gz of the package, README and pyproject) with zipfile and tarfile.
Editable installs (pip install -e) are not offered: use PYTHONPATH.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _parse_toml_subset(text):
    """{table: {key: value}} for tables of `key = "text"` and
    `key = ["a", ...]` (a list may span lines); comments dropped."""
    tables, cur, pending = {}, None, None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip() if '"' not in raw.split("#", 1)[0] or \
            raw.count('"') % 2 == 0 else raw.strip()
        if pending is not None:
            pending[1].append(line)
            if "]" in line:
                k, parts = pending
                tables[cur][k] = re.findall(r'"([^"]*)"', " ".join(parts))
                pending = None
            continue
        if not line:
            continue
        m = re.match(r"^\[([^\]]+)\]$", line)
        if m:
            cur = m.group(1).strip()
            tables.setdefault(cur, {})
            continue
        k, _, v = (x.strip() for x in line.partition("="))
        k = k.strip('"')
        if v.startswith("[") and "]" not in v:
            pending = (k, [v])
        elif v.startswith("["):
            tables[cur][k] = re.findall(r'"([^"]*)"', v)
        else:
            tables[cur][k] = v.strip('"')
    return tables


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib
        t = tomllib.loads(data.decode())
        return t["project"]
    except ImportError:
        flat = _parse_toml_subset(data.decode())
        p = dict(flat["project"])
        p["optional-dependencies"] = flat.get("project.optional-dependencies", {})
        p["scripts"] = flat.get("project.scripts", {})
        return p


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}",
             f"Requires-Python: {p.get('requires-python', '>=3.8')}"]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    for extra, deps in sorted(p.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(HERE, p.get("readme", "README.md")), encoding="utf-8") as f:
        return "\n".join(lines) + "\n\n" + f.read()


def _package_files():
    """(path in the wheel, path here) of tessel/*.py and py.typed."""
    out = []
    for name in sorted(os.listdir(os.path.join(HERE, "tessel"))):
        if name.endswith(".py") or name == "py.typed":
            out.append((f"tessel/{name}", os.path.join(HERE, "tessel", name)))
    return out


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    name, ver = p["name"], p["version"]
    dist = f"{name}-{ver}.dist-info"
    files = [(arc, open(src, "rb").read()) for arc, src in _package_files()]
    files.append((f"{dist}/METADATA", _metadata(p).encode("utf-8")))
    files.append((f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: tessel_build\n"
                                   b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    scripts = p.get("scripts", {})
    if scripts:
        ep = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
        files.append((f"{dist}/entry_points.txt", ep.encode()))
    record = []
    for arc, data in files:
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={h},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode()))
    fname = f"{name}-{ver}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, fname), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data,
                       zipfile.ZIP_DEFLATED)
    return fname


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    fname = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "_build/tessel_build.py"] + \
                [arc for arc, _ in _package_files()]:
            tar.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        meta = _metadata(p).encode("utf-8")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    return fname
