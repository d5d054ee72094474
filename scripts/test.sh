#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The browser test drives Debian's Chromium (never a downloaded browser build).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test: installing chromium for the browser test"
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  else
    echo "test: /usr/bin/chromium is missing; the browser test will fail (sudo apt-get install chromium)" >&2
  fi
fi
.venv/bin/python -m pytest -q "$@"
if [ "$#" -eq 0 ]; then
  # The gateway and client suites again with the deadline policy on inline lanes (the lane bookkeeping
  # without a GPU): `voxrt serve --scheduler-type deadline` must pass everything the gateway passes.
  echo "== gateway and client suites with --scheduler-type deadline --lanes inline"
  VOXRT_TEST_SCHEDULER=deadline VOXRT_TEST_LANES=inline .venv/bin/python -m pytest -q tests/gateway tests/client
fi
