#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and starts the server on the embedded default model (tiny) on 127.0.0.1:8000.
# Extra arguments go to `voxrt serve` (e.g. --port 9000, --api-key KEY, --model M).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/voxrt serve "$@"
