"""Fused kernels for the LM frame (the fast path of `--frame-path fused`).

Each op has two implementations of the same math: `torch` (plain torch ops: the CPU path, the reference the
tests compare against) and `triton` (one Triton kernel on CUDA). They are the kernels no library has in this
form: residual add fused into RMSNorm, per-head q/k RMSNorm + rotary + the KV write in one pass (paged for
the talker, a small dense cache for the code predictor, whose attention runs in the same kernel), SiLU-gated
MLP activation, and Gumbel-max sampling with per-row temperature / top-k / top-p that also writes the next
step's input row. Triton's interpreter (`TRITON_INTERPRET=1`) runs the Triton kernels on the CPU, which is
how CI tests them against the torch implementations.

Programmatic dependent launch (PDL, sm90+): the frame's kernels are chains of microsecond launches, and with
PDL kernel N+1 starts while kernel N still runs. Each Triton kernel here takes a `PDL` constexpr; when it is
on, the kernel reads only what no kernel of the frame writes (weights, norm weights, rotary tables) before
`gdc_wait()`, everything else after it, and calls `gdc_launch_dependents()` (the next kernel may launch)
right after the wait: so the next kernel streams its weights while this one computes, and at most one kernel
runs ahead. (Triggering at the kernel's start instead let whole chains of kernels launch early and sit on the
SMs: the batch-1 frame took 13.1 ms against 4.5 without PDL on the H200, bench/results/2026-12-02-frame.)
With the trigger after the wait the frame was still 2.4-5x slower (bench/results/2026-12-05-frame-pdl), which
turned out to be the products' wide first tile folded into the loop's by a reshape (5x slower without PDL
too). With that tile reduced on its own, PDL and a 16K-element first tile ran the code predictor's product
chain 18% faster and the batch-1 frame 4.13 -> 3.49 ms on the H100's whole GPU, while batch 64 (cuBLAS's
products between our kernels) was no faster and on the LM's 60-SM partition it changed nothing
(bench/results/2026-12-05-frame-inflight). Hence `VOXRT_PDL=auto`, the default: PDL for launches of at most
PDL_AUTO_MAX_ROWS rows (every launcher passes its rows to `pdl_args`); `on` / `off` force it.
`gdc_wait()` returns once every earlier kernel has COMPLETED and its writes are visible (PTX
`griddepcontrol.wait`), so after it the kernel sees memory as a plainly launched kernel would; before it, it
writes nothing (no write-after-read race with a kernel still reading) and reads nothing written in the
frame. Every program of a PDL kernel reaches the wait, so a kernel completes only after its predecessor did:
the ordering stays transitive along the chain. A kernel of a library between two of ours (cuBLAS, FlashInfer,
torch) is launched plainly and waits for ours to finish as always; ours after it waits for it in `gdc_wait()`.
Measured on the H200 (bench/gpu_pdl.py, bench/results/2026-12-02-codec): a dependent gemv in a CUDA graph
took 3.05 us plainly, 1.60 us with PDL and its weight tile loaded before the wait.
"""

from __future__ import annotations

import functools
import os

import torch

from voxrt.engine.runtime.knobs import pdl_mode

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


_pdl_override: bool | None = None
PDL_AUTO_MAX_ROWS = 4  # `auto`: PDL for launches of at most this many rows (kernels/gemv.py's MAX_ROWS: where the
# frame is a chain of our kernels; above it cuBLAS's products sit between them and PDL measured slower)


def set_pdl(enabled: bool | None) -> None:
    """Turn PDL on or off for launches from now on (graphs captured afterwards), over `VOXRT_PDL`; None: back
    to `VOXRT_PDL` (default `auto`). Benchmarks compare both in one process (bench/gpu_frame.py)."""
    global _pdl_override
    _pdl_override = enabled


@functools.cache
def _device_has_pdl(index: int) -> bool:
    import triton.language as tl  # noqa: PLC0415

    cuda = getattr(tl.extra, "cuda", None)
    has_ops = hasattr(cuda, "gdc_wait") and hasattr(cuda, "gdc_launch_dependents")
    return has_ops and torch.cuda.get_device_capability(index)[0] >= 9


def pdl_enabled(device: torch.device, rows: int | None = None) -> bool:
    """Whether a launch of `rows` rows on `device` uses PDL: on CUDA with compute capability >= 9 (griddepcontrol
    is sm90+), compiled Triton (never the interpreter: the CI path runs the kernels with PDL off), and as asked:
    `set_pdl(True/False)` for every launch, else `VOXRT_PDL` (pdl_mode): `auto` turns it on for launches of at
    most PDL_AUTO_MAX_ROWS rows (a launch that does not say its rows: off). Measured on the H100
    (bench/results/2026-12-05-frame-inflight): the batch-1 frame 15% shorter with it (4.13 -> 3.49 ms), batch 64
    3% longer with PDL on every launch."""
    if device.type != "cuda" or interpreting() or not triton_available():
        return False
    if _pdl_override is not None:
        wanted = _pdl_override
    else:
        mode = pdl_mode()
        wanted = mode == "on" or (mode == "auto" and rows is not None and rows <= PDL_AUTO_MAX_ROWS)
    return wanted and _device_has_pdl(device.index if device.index is not None else torch.cuda.current_device())


_l2_prefetch_override: bool | None = None
_skinny_override: bool | None = None
L2_PREFETCH_CAP_MB = 16.0  # at most this much of the next projection's weight is prefetched (the L2 is 50 MB)


def _env_on(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).strip().lower() not in ("0", "", "off", "false", "no")


def set_l2_prefetch(enabled: bool | None, cap_mb: float | None = None) -> None:
    """Turn the products' L2 prefetch of the next projection's weight on or off for launches from now on
    (graphs captured afterwards), over `VOXRT_L2_PREFETCH`; None: back to the environment. `cap_mb`: how much
    of the next weight is prefetched at most (default L2_PREFETCH_CAP_MB, or `VOXRT_L2_PREFETCH_MB`)."""
    global _l2_prefetch_override, L2_PREFETCH_CAP_MB
    _l2_prefetch_override = enabled
    if cap_mb is not None:
        L2_PREFETCH_CAP_MB = float(cap_mb)


def l2_prefetch_enabled(device: torch.device) -> bool:
    """Whether kernels/gemv.py's products, while they stream their own weight, ask the L2 for the next
    projection's (`prefetch.global.L2`, inline PTX: compiled Triton on CUDA only, never the interpreter)."""
    if device.type != "cuda" or interpreting() or not triton_available():
        return False
    return _l2_prefetch_override if _l2_prefetch_override is not None else _env_on("VOXRT_L2_PREFETCH")


def l2_prefetch_cap_bytes() -> int:
    return int(float(os.environ.get("VOXRT_L2_PREFETCH_MB", L2_PREFETCH_CAP_MB)) * (1 << 20))


def set_skinny(enabled: bool | None) -> None:
    """Turn kernels/gemv.py's tensor-core product for 5..128 rows (instead of cuBLAS) on or off for launches
    from now on, over `VOXRT_SKINNY`; None: back to the environment."""
    global _skinny_override
    _skinny_override = enabled


def skinny_enabled(device: torch.device) -> bool:
    """Whether products of a few dozen rows take kernels/gemv.py's tensor-core kernel (Triton on CUDA, or the
    interpreter when a test forces it) rather than cuBLAS."""
    if not triton_available():
        return False
    if device.type != "cuda":  # the CPU runs it only in Triton's interpreter, when a test turns it on
        return bool(_skinny_override) and interpreting()
    return _skinny_override if _skinny_override is not None else _env_on("VOXRT_SKINNY")


def pdl_args(device: torch.device, rows: int | None = None) -> dict:
    """Keyword arguments for a launch of `rows` rows (pdl_enabled): the kernel's `PDL` constexpr, and
    `launch_pdl=True` with it (the two always together: a kernel launched with PDL must wait before it reads its
    inputs)."""
    return dict(PDL=True, launch_pdl=True) if pdl_enabled(device, rows) else dict(PDL=False)


def default_impl(device: torch.device) -> str:
    """`triton` on CUDA when Triton is installed, else `torch` (the interpreter is for tests, which ask for
    `triton` explicitly: it is far too slow to serve)."""
    return "triton" if device.type == "cuda" and triton_available() else "torch"


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"unknown kernel implementation {impl!r}; expected one of {', '.join(IMPLS)}")
    if impl == "triton" and not triton_available():
        raise RuntimeError("kernel implementation 'triton' needs the triton package (pip install triton)")


def channels_last(x: torch.Tensor) -> bool:
    """Whether [B, C, T] `x` is a view of channels-last memory (channel stride 1, time not contiguous): the
    codec's channels-last decoder, which the SnakeBeta, tap-conv and codec layers read and write in place."""
    return x.dim() == 3 and x.shape[1] > 1 and x.stride(1) == 1 and x.stride(2) != 1


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
