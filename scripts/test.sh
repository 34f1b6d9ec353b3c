#!/usr/bin/env bash
# Runs the whole test suite. Makes .venv (Python 3.11+) and installs the project with its
# test and docs extras when needed (docs: mkdocs, for `mkdocs build` and `mkdocs serve`);
# the tests start their own MongoDB-wire servers (nx-27017, and mongoeco from its own
# Python 3.13 venv) unless MONGODB_URI names a server to use. pytest runs the tests in
# three worker processes (pytest-xdist; addopts in pyproject.toml), each with servers of
# its own. Extra arguments go to pytest: -n 0 for one process (--pdb, say), -n auto for a
# worker per core.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test,docs]'
  touch "$stamp"
fi
exec .venv/bin/python -m pytest "$@"
