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
`CUBLAS_WORKSPACE_CONFIG` in the environment wins (`:4096:8` restores PyTorch's default size on Hopper). Nor where
the user has asked PyTorch for cuBLASLt (`TORCH_BLAS_PREFER_CUBLASLT=1`): PyTorch caps cuBLASLt's workspace at
cuBLAS's, and with none the engine's graph capture fails ("OOM trying to allocate workspace for cublaslt", H100,
bench/results/2026-12-07-h100-kernel-defaults/), so that choice keeps PyTorch's default workspace. It was no faster
there: 5.050 against 4.935-4.967 ms a frame at 64 rows, 5.762 against 5.782-5.815 at 128.

cuBLAS picks a product's kernel (tile shape, grid) by heuristics over the problem and the SMs it assumes it has;
whether it sees a green-context partition as fewer SMs is not documented, and a grid sized for 132 SMs would run in
two waves on the LM's 68. `sm_count_target`
sets cuBLAS's SM-count target (`cublasSetSmCountTarget`, on the handle PyTorch gives this thread) for the products
inside it; with `VOXRT_BLAS_SM_TARGET=lanes` the runner captures each green lane's graphs inside one for that
lane's SM count (the kernel chosen at capture is the one the graph replays). Off by default: not yet measured.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

ENV = "CUBLAS_WORKSPACE_CONFIG"
NO_WORKSPACE = ":0:0"
PREFER_LT_ENV = "TORCH_BLAS_PREFER_CUBLASLT"  # PyTorch's switch to cuBLASLt for its products ("1": on)


def prefers_cublaslt(environ: dict | None = None) -> bool:
    """Whether the user has asked PyTorch for cuBLASLt (PyTorch takes "1" as on, "0" or nothing as off)."""
    return (os.environ if environ is None else environ).get(PREFER_LT_ENV, "").strip() == "1"


def configure_workspace(environ: dict | None = None) -> str | None:
    """Set CUBLAS_WORKSPACE_CONFIG to NO_WORKSPACE unless it is set already or cuBLASLt is asked for (it needs a
    workspace under CUDA graphs); returns the value in force (None: PyTorch's default)."""
    environ = os.environ if environ is None else environ
    if ENV not in environ and prefers_cublaslt(environ):
        return None
    return environ.setdefault(ENV, NO_WORKSPACE)


def describe(environ: dict | None = None) -> str:
    """The setting in force, for the engine's start-up log."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV)
    if value is None:
        if prefers_cublaslt(environ):
            return f"cuBLAS workspace: PyTorch's default ({PREFER_LT_ENV}=1: cuBLASLt needs one under CUDA graphs)"
        return "cuBLAS workspace: PyTorch's default"
    return f"cuBLAS workspace: {ENV}={value}" + (" (none: no split-K)" if value == NO_WORKSPACE else "")


def find_libcublas(maps: str | None = None) -> str | None:
    """The path of the libcublas that this process has loaded (PyTorch's), from /proc/self/maps (or `maps`, its
    text); None when none is loaded or the file cannot be read (not Linux)."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)  # address perms offset dev inode [path]
        path = parts[5].strip() if len(parts) == 6 else ""
        name = os.path.basename(path)
        if name.startswith("libcublas.so"):  # not libcublasLt.so
            return path
    return None


_lib: ctypes.CDLL | None = None


def _libcublas() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        path = find_libcublas()
        if path is None:
            raise RuntimeError("cuBLAS SM-count target: no libcublas is loaded in this process")
        lib = ctypes.CDLL(path)  # the loaded library itself: dlopen of a loaded path returns it
        lib.cublasSetSmCountTarget.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.cublasSetSmCountTarget.restype = ctypes.c_int
        lib.cublasGetSmCountTarget.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.cublasGetSmCountTarget.restype = ctypes.c_int
        _lib = lib
    return _lib


@contextlib.contextmanager
def sm_count_target(count: int | None):
    """cuBLAS's kernels chosen for `count` SMs inside (None: nothing changes), then the previous target back. On
    the thread's current CUDA device; call it on the thread that runs (or captures) the products."""
    if count is None:
        yield
        return
    import torch  # noqa: PLC0415 (GPU only: the gateway's process never imports torch)

    if count < 1:
        raise ValueError(f"cuBLAS SM-count target must be >= 1, got {count}")
    lib = _libcublas()
    handle = ctypes.c_void_p(torch.cuda.current_blas_handle())
    old = ctypes.c_int(0)
    status = lib.cublasGetSmCountTarget(handle, ctypes.byref(old))
    if status == 0:
        status = lib.cublasSetSmCountTarget(handle, int(count))
    if status != 0:
        raise RuntimeError(f"cublasSetSmCountTarget({count}) failed: cuBLAS status {status}")
    try:
        yield
    finally:
        lib.cublasSetSmCountTarget(handle, old.value)
