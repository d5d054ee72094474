"""bench/gpu_cudnn_calls.py on the CPU: its shape arguments are checked with a clear error, and without a GPU it
says so instead of failing inside cuDNN (the timing itself runs on a GPU: bench/results/2026-12-07-h100-codecfix/)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("gpu_cudnn_calls", ROOT / "bench" / "gpu_cudnn_calls.py")
gpu_cudnn_calls = importlib.util.module_from_spec(spec)
sys.path.insert(0, str(ROOT / "bench"))  # as when it runs as a script: its graph_timing import
try:
    spec.loader.exec_module(gpu_cudnn_calls)
finally:
    sys.path.remove(str(ROOT / "bench"))


def test_a_shape_is_four_integers_with_room_for_the_kernel():
    assert gpu_cudnn_calls.parse_shape("2,192,16018,3") == (2, 192, 16018, 3)
    for bad in ("1,2,3", "a,b,c,d", "0,192,658,3", "2,192,18,3"):
        with pytest.raises(argparse.ArgumentTypeError):
            gpu_cudnn_calls.parse_shape(bad)
    assert all(gpu_cudnn_calls.parse_shape(s) for s in gpu_cudnn_calls.DEFAULT_SHAPES)


def test_without_a_gpu_it_exits_with_a_clear_error(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        gpu_cudnn_calls.main(["--shapes", "2,192,658,3"])
    assert exc.value.code == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
