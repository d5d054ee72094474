#!/usr/bin/env bash
# Sets up .venv with voxrt and its test tools. On a machine without an NVIDIA GPU it installs the CPU build
# of torch first (torch==2.13.0, a small wheel) so that pip does not pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
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
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: GPU found, installing torch (CUDA build)"
    python -m pip install -q "torch>=2.9"
  else
    echo "setup: no GPU, installing the CPU build of torch"
    python -m pip install -q torch==2.13.0 || python -m pip install -q "torch>=2.9"
  fi
fi
echo "setup: installing voxrt (editable) with dev extras"
python -m pip install -q -e ".[dev]"
echo "setup: installing the Qwen3-TTS reference implementation for the parity tests"
python -m pip install -q -r requirements/parity.txt
python -m pip install -q --no-deps qwen-tts==0.1.1
echo "setup: installing the agent frameworks the integrations plug into (Pipecat, LiveKit Agents)"
python -m pip install -q -r requirements/integrations.txt
echo "setup: done ($(python -c 'import torch; print("torch", torch.__version__)'))"
