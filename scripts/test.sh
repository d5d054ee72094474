#!/usr/bin/env bash
# Sets up (scripts/setup.sh test) and runs the whole test suite on the CPU. Arguments go to pytest instead
# (one file, -k, ...), run once. VOXRT_TEST_WORKERS (default 2, the CI machine's cores): pytest-xdist workers;
# 1 runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
# The browser test drives Debian's Chromium (never a downloaded browser build).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test: installing chromium for the browser test"
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  else
    echo "test: /usr/bin/chromium is missing; the browser test will fail (sudo apt-get install chromium)" >&2
  fi
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
WORKERS=${VOXRT_TEST_WORKERS:-2}
PARALLEL=()
if [ "$WORKERS" -gt 1 ]; then
  # loadgroup: a module's tests that share a module-scoped server or engine stay on one worker (tests/conftest.py)
  PARALLEL=(-n "$WORKERS" --dist loadgroup)
fi
start=$(date +%s)
.venv/bin/python -m pytest -q "${PARALLEL[@]}" --durations=15
# The suites that push audio through a live server's engine again, with the deadline policy on inline lanes
# (the lane bookkeeping without a GPU): `voxrt serve --scheduler-type deadline` must pass what the gateway
# passes. VOXRT_TEST_SCHEDULER / VOXRT_TEST_LANES reach only live servers (tests/support/voxrt_live.py), so
# the modules without one (pure parsing, fakes, the stand-in engine of test_workers) would rerun unchanged.
# Left out as well, since what they check happens before or around the engine, whichever policy it runs:
# test_auth.py / test_drain.py (refusals, the drain), test_bad_input.py (the protocol's errors and limits;
# its background speaker is one plain session), test_client_errors.py (the client's error mapping: unknown
# voice, gateway limits, auth, refused connections, close codes) and test_client_examples.py (the example
# scripts' files and output). Kept: test_realtime.py, test_word_forwarding.py, test_http.py and
# test_client_session.py, which schedule audio through the engine (pacing, cancel, many sessions and contexts
# at once, flush order, first audio while text streams in, whole-text requests).
SECOND=$(grep -lE "live_server\(|^def test_[a-z0-9_]+\([^)]*\blive\b" tests/gateway/test_*.py tests/client/test_*.py \
         | grep -vE "test_(auth|drain|bad_input|client_errors|client_examples)\.py")
echo "== $(echo "$SECOND" | wc -w) gateway and client modules again with --scheduler-type deadline --lanes inline"
VOXRT_TEST_SCHEDULER=deadline VOXRT_TEST_LANES=inline .venv/bin/python -m pytest -q "${PARALLEL[@]}" $SECOND
# The third pass: a second model family behind the same gateway and client suites. Orpheus (seven LM tokens a
# frame, no depth stage, the prompt read at once: a request per segment) on a tiny random checkpoint written
# here. Left out besides the second pass's: test_word_forwarding.py's first test, which checks that a program
# reading text incrementally speaks before its first sentence ends (Orpheus reads whole segments).
ORPHEUS_CKPT=$(mktemp -d)
trap 'rm -rf "$ORPHEUS_CKPT"' EXIT
.venv/bin/python -m voxrt.cli make-checkpoint --arch orpheus-tiny "$ORPHEUS_CKPT" --device cpu >/dev/null
THIRD="tests/gateway/test_realtime.py tests/gateway/test_http.py tests/gateway/test_word_forwarding.py tests/client/test_client_session.py"
echo "== $(echo "$THIRD" | wc -w) gateway and client modules again on Orpheus (make-checkpoint --arch orpheus-tiny)"
VOXRT_TEST_MODEL=orpheus VOXRT_TEST_CHECKPOINT="$ORPHEUS_CKPT" VOXRT_TEST_VOICES=tara,leo VOXRT_TEST_MAX_SEQ_LEN=4096 \
  .venv/bin/python -m pytest -q "${PARALLEL[@]}" $THIRD -k "not first_audio_arrives_while_the_first_sentence"
echo "test: all passes done in $(( $(date +%s) - start )) s"
