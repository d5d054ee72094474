"""bench/gpu_codec_batch_check.py, the GPU check that launches of many codec chunks decode what one chunk a launch
does: its plumbing, run on the CPU (no graphs there, so the audio is equal), so that a GPU call is not spent on a
typo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_codec_batch_check.py"


def test_big_launches_match_one_chunk_a_launch_on_the_cpu(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny-lite", "--device", "cpu", "--codec-batch", "8",
                           "--requests", "12", "--frames", "12", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "codec_batch_check.json").read_text())
    assert report["frames_equal"] == 12 and report["failures"] == []
    assert report["biggest_launch"] == 8 and report["biggest_launch_one"] == 1
    assert report["max_abs_diff"] == 0.0
    assert "EQUAL one chunk a launch" in done.stdout


def test_a_codec_batch_below_two_is_refused(tmp_path):
    # one chunk a launch against one chunk a launch checks nothing
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny-lite", "--device", "cpu", "--codec-batch", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--codec-batch must be >= 2" in done.stderr
