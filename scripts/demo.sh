#!/usr/bin/env bash
# Runs the demo end to end: makes .venv and installs the project when needed, then runs
# examples/order_demo.py (on MONGODB_URI if set, else on an nx-27017 server it starts).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test.sh --version >/dev/null
exec .venv/bin/python -m examples.order_demo "$@"
