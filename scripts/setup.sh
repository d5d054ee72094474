#!/usr/bin/env bash
# Sets up .venv for one need:
#   scripts/setup.sh serve   the runtime only: torch and voxrt's own dependencies (scripts/serve.sh)
#   scripts/setup.sh test    that, plus the test stack: pytest, the Qwen3-TTS reference for the parity tests, the
#                            agent frameworks the integrations plug into (scripts/test.sh; the default)
# A second run with nothing changed installs nothing: a stamp in .venv records a hash of what the install
# depends on (this script, pyproject.toml, requirements/, the Python version, GPU or not) and a later run with
# the same hash returns at once. On a machine without an NVIDIA GPU it installs the CPU build of torch first
# (torch==2.13.0, a small wheel) so that pip does not pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-test}
case "$MODE" in
  serve|test) ;;
  *) echo "usage: scripts/setup.sh [serve|test]" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
PIP=(python -m pip install -q --disable-pip-version-check)

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# Opus comes from the system's libopus (opuslib binds it).
if ! ldconfig -p 2>/dev/null | grep -q "libopus\.so\.0"; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing libopus0"
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopus0 >/dev/null
  else
    echo "setup: libopus is missing; install it first (Debian/Ubuntu: sudo apt-get install libopus0)" >&2
    exit 1
  fi
fi

inputs_hash() {
  { cat scripts/setup.sh pyproject.toml requirements/*.txt
    "$PYTHON" --version 2>&1
    if has_gpu; then echo gpu; else echo cpu; fi; } | sha256sum | cut -d' ' -f1
}
HASH=$(inputs_hash)
stamp_ok() { [ -f ".venv/.setup-$1" ] && [ "$(cat ".venv/.setup-$1")" = "$HASH" ]; }
# The test stack holds the runtime, so a test setup also satisfies serve.
if [ -x .venv/bin/python ] && { stamp_ok "$MODE" || { [ "$MODE" = serve ] && stamp_ok test; }; } \
   && .venv/bin/python -c "import voxrt" 2>/dev/null; then
  echo "setup: up to date ($MODE)"
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
rm -f .venv/.setup-serve .venv/.setup-test
if ! python -c "import torch" 2>/dev/null; then
  if has_gpu; then
    echo "setup: GPU found, installing torch (CUDA build)"
    "${PIP[@]}" "torch>=2.9"
  else
    echo "setup: no GPU, installing the CPU build of torch"
    "${PIP[@]}" torch==2.13.0 || "${PIP[@]}" "torch>=2.9"
  fi
fi
if [ "$MODE" = serve ]; then
  echo "setup: installing voxrt-gateway (editable, runtime only)"
  "${PIP[@]}" -e .
else
  echo "setup: installing voxrt-gateway (editable) with the test stack"
  "${PIP[@]}" -e ".[test]"
  echo "setup: installing the agent frameworks the integrations plug into (Pipecat, LiveKit Agents)"
  "${PIP[@]}" -r requirements/integrations.txt
  echo "setup: installing the Qwen3-TTS reference implementation for the parity tests"
  "${PIP[@]}" -r requirements/parity.txt
  # Last, and without its dependencies (requirements/parity.txt says why): a pip run after it would report
  # gradio, sox and torchaudio as missing, on purpose.
  "${PIP[@]}" --no-deps qwen-tts==0.1.1
fi
echo "$HASH" > ".venv/.setup-$MODE"
echo "setup: done ($MODE, $(python -c 'import torch; print("torch", torch.__version__)'))"
