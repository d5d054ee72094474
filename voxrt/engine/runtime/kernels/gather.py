"""Rows of several 1-D tensors gathered at one index, in one kernel.

A decode or depth step reads its rows' sampling parameters from per-slot tensors (runtime/sampling.py,
`SlotSampling`): six fields, which `index_select` gathers in six launches, twice a frame on the Qwen3-TTS
path. Here one program gathers BLOCK rows of every field, so the six become one launch
(`VOXRT_GLUE_KERNELS=on`). The same values as `index_select` (a copy; tests/engine/runtime/test_kernels.py).
"""

from __future__ import annotations

from typing import Sequence

import torch

from voxrt.engine.runtime.kernels import check_impl, triton_available

MAX_SOURCES = 6
BLOCK = 128

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _copy_rows(src_ptr, dst_ptr, idx, rows, mask):
        tl.store(dst_ptr + rows, tl.load(src_ptr + idx, mask=mask), mask=mask)

    @triton.jit
    def _gather_rows_kernel(index_ptr, n, s0, d0, s1, d1, s2, d2, s3, d3, s4, d4, s5, d5,
                            N_SRC: tl.constexpr, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = rows < n
        idx = tl.load(index_ptr + rows, mask=mask, other=0).to(tl.int64)
        _copy_rows(s0, d0, idx, rows, mask)
        if N_SRC > 1:
            _copy_rows(s1, d1, idx, rows, mask)
        if N_SRC > 2:
            _copy_rows(s2, d2, idx, rows, mask)
        if N_SRC > 3:
            _copy_rows(s3, d3, idx, rows, mask)
        if N_SRC > 4:
            _copy_rows(s4, d4, idx, rows, mask)
        if N_SRC > 5:
            _copy_rows(s5, d5, idx, rows, mask)


def gather_rows(sources: Sequence[torch.Tensor], index: torch.Tensor, impl: str = "torch") -> list[torch.Tensor]:
    """[s.index_select(0, index) for s in sources]: 1 to MAX_SOURCES contiguous 1-D tensors, `index` [B] int
    (every entry a valid row), in one launch with `impl="triton"`."""
    check_impl(impl)
    if impl == "torch":
        return [s.index_select(0, index) for s in sources]
    if not 1 <= len(sources) <= MAX_SOURCES or any(s.dim() != 1 or not s.is_contiguous() for s in sources):
        raise ValueError(f"gather_rows takes 1 to {MAX_SOURCES} contiguous 1-D tensors")
    n = index.shape[0]
    outs = [torch.empty(n, dtype=s.dtype, device=s.device) for s in sources]
    pairs = [t for s, o in zip(sources, outs) for t in (s, o)]
    pairs += pairs[:2] * (MAX_SOURCES - len(sources))  # unused slots (N_SRC leaves them out)
    if n:
        _gather_rows_kernel[(triton.cdiv(n, BLOCK),)](index, n, *pairs, N_SRC=len(sources), BLOCK=BLOCK)
    return outs
