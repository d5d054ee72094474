"""bench/gpu_tuning_cache.py, the GPU call that checks the tuning cache (a cold start, a warm one, one with the cache
off): its plumbing run on the CPU, where nothing is timed, so that a GPU call is not spent on a typo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_tuning_cache.py"


def test_three_starts_are_reported_with_the_same_audio(tmp_path):
    env = dict(os.environ, VOXRT_TUNING_CACHE=str(tmp_path / "kept"))  # the script's own folder replaces it
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny-lite", "--frames", "6", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "tuning_cache.json").read_text())
    assert [r["run"] for r in rows] == ["cold", "warm", "off"]
    assert all(r["requests"] == 16 and r["restored"] == 0 and r["files"] == [] for r in rows)  # the CPU times nothing
    assert all(r["same_lengths"] and r["max_abs_audio_diff"] == 0.0 for r in rows[1:])
    assert "run   setup_s  restored" in done.stdout
    assert not (tmp_path / "kept").exists()  # the caller's folder is neither used nor made
