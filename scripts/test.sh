#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
