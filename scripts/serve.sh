#!/usr/bin/env bash
# Sets up the runtime (scripts/setup.sh serve: torch and voxrt's own dependencies, nothing for tests; a second
# start with nothing changed installs nothing) and starts the server on the embedded default model (tiny) on
# 127.0.0.1:8000. Extra arguments go to `voxrt serve` (e.g. --port 9000, --api-key KEY, --model M).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh serve
exec .venv/bin/voxrt serve "$@"
