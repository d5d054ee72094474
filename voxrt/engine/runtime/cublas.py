"""cuBLAS without a workspace, so without split-K, for the engine's process (a process-wide setting).

Above 4 rows the frame's products are cuBLAS's. With its workspace cuBLAS splits the K dimension of the narrow
ones (o_proj and down of the talker and the code predictor: 103 of them a frame at batch 64) and adds a
`splitKreduce` kernel after each. Measured on the H100 with the full-size random 1.7B (bench/results/
2026-12-05-frame-inflight): with no workspace (`CUBLAS_WORKSPACE_CONFIG=:0:0`) the frame has 730 kernels instead
of 800-833 and is 3.6% shorter at batch 8 (4.689 -> 4.520 ms), 3.1% at 64 (5.243 -> 5.079), 1% at 128; the
engine at the H100's knee (engine-direct, LibriTTS, deadline with lanes, 30 s points, same arrivals) held 100.0%
at 112 req/s either way with TTFA p99 88.2 -> 63.6 ms, and 59.4 -> 65.1% at 120.

PyTorch reads the variable once, when it first gives cuBLAS a workspace, so it is set when this package is
imported (before the engine does any GPU work), and only where the user has not set it: any value of
`CUBLAS_WORKSPACE_CONFIG` in the environment wins (`:4096:8` restores PyTorch's default size on Hopper).
"""

from __future__ import annotations

import os

ENV = "CUBLAS_WORKSPACE_CONFIG"
NO_WORKSPACE = ":0:0"


def configure_workspace(environ: dict | None = None) -> str:
    """Set CUBLAS_WORKSPACE_CONFIG to NO_WORKSPACE unless it is set already; returns the value in force."""
    environ = os.environ if environ is None else environ
    return environ.setdefault(ENV, NO_WORKSPACE)


def describe(environ: dict | None = None) -> str:
    """The setting in force, for the engine's start-up log."""
    value = (os.environ if environ is None else environ).get(ENV)
    if value is None:
        return "cuBLAS workspace: PyTorch's default"
    return f"cuBLAS workspace: {ENV}={value}" + (" (none: no split-K)" if value == NO_WORKSPACE else "")
