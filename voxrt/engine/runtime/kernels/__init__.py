"""Fused kernels for the LM frame (the fast path of `--frame-path fused`).

Each op has two implementations of the same math: `torch` (plain torch ops: the CPU path, the reference the
tests compare against) and `triton` (one Triton kernel on CUDA). They are the kernels no library has in this
form: residual add fused into RMSNorm, per-head q/k RMSNorm + rotary + the KV write in one pass (paged for
the talker, a small dense cache for the code predictor, whose attention runs in the same kernel), SiLU-gated
MLP activation, and Gumbel-max sampling with per-row temperature / top-k / top-p that also writes the next
step's input row. Triton's interpreter (`TRITON_INTERPRET=1`) runs the Triton kernels on the CPU, which is
how CI tests them against the torch implementations.
"""

from __future__ import annotations

import functools
import os

import torch

IMPLS = ("torch", "triton")


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401, PLC0415
        import triton.language  # noqa: F401, PLC0415
    except Exception:  # noqa: BLE001 (any import failure means: not usable)
        return False
    return True


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def default_impl(device: torch.device) -> str:
    """`triton` on CUDA when Triton is installed, else `torch` (the interpreter is for tests, which ask for
    `triton` explicitly: it is far too slow to serve)."""
    return "triton" if device.type == "cuda" and triton_available() else "torch"


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown kernel implementation {impl!r}; expected one of {', '.join(IMPLS)}")
    if impl == "triton" and not triton_available():
        raise RuntimeError("kernel implementation 'triton' needs the triton package (pip install triton)")


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
