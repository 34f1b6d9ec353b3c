#!/usr/bin/env bash
# Runs the whole test suite. Makes .venv (Python 3.11+) and installs the project with its
# test and docs extras when needed (docs: mkdocs, for `mkdocs build` and `mkdocs serve`);
# the tests start their own MongoDB-wire servers (nx-27017, and mongoeco from its own
# Python 3.13 venv) unless MONGODB_URI names a server to use.
# Extra arguments go to pytest.
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
