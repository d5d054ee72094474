"""bench/gpu_codec_memory.py, the GPU call that measures the codec batch's start-up memory: its plumbing (one engine
a process, a row each, the JSON), run on the CPU, so that a GPU call is not spent on a typo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_codec_memory.py"


def test_each_codec_batch_starts_an_engine_of_its_own_and_is_reported(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny-lite", "--device", "cpu",
                           "--codec-batches", "2,4", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "codec_memory.json").read_text())
    assert [row["max_codec_batch"] for row in rows] == [2, 4]
    assert all(row["started"] and row["kv_pages"] > 0 and row["max_batch_size"] == 64 for row in rows)
    assert "codec batch started" in done.stdout  # the table, last


def test_a_bad_codec_batch_list_is_a_clear_error():
    for bad in ("16,x", "0,16"):
        done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--codec-batches", bad],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "--codec-batches must be" in done.stderr


def test_an_engine_that_does_not_start_is_a_row_with_its_error(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model", "nope", "--device", "cpu", "--codec-batches", "8",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [row] = json.loads((tmp_path / "codec_memory.json").read_text())
    assert row["started"] is False and "UnknownModelError" in row["error"] and "available" in row["error"]
