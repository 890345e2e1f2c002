#!/bin/sh
# The Python client's tests (pytest) against a tesseld: run by CTest
# (tests/tests.cmake) as "python/client". Debian's /usr/bin/python3 is used
# when present (it has python3-numpy and python3-pytest from deps/); a
# Python without NumPy or pytest makes the test skip (exit 77) with a message.
#   clients/python/tests/run.sh path/to/tesseld
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${TESSEL_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3) || { echo "skipped: no python3"; exit 77; }
for mod in numpy pytest; do
  if ! "$py" -c "import $mod" 2>/dev/null; then
    echo "skipped: $py has no $mod (apt-get install python3-numpy python3-pytest)"
    exit 77
  fi
done
TESSEL_BIN=$1 exec "$py" -m pytest -q -rs -p no:cacheprovider "$here"
