"""Rows gathered in one kernel where torch takes several: the step's sampling parameters, the depth stage's
first inputs, the talker's decode input.

A decode or depth step reads its rows' sampling parameters from per-slot tensors (runtime/sampling.py,
`SlotSampling`): six fields, which `index_select` gathers in six launches, twice a frame on the Qwen3-TTS
path. Here one program gathers BLOCK rows of every field, so the six become one launch
(`VOXRT_GLUE_KERNELS=on`). The same values as `index_select` (a copy; tests/engine/runtime/test_kernels.py).

`depth_inputs`: the code predictor's first step reads two tokens a row, the talker's projected hidden state and
code 0's embedding; torch untags code 0 (three kernels), writes it into the frame's codes, gathers its
embedding and stacks the two: one launch here (`VOXRT_GLUE_KERNELS=on`). `embed_step`: a talker decode step's
input, sixteen frame embeddings summed plus the text embedding, five torch launches, one here.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import check_impl, next_pow2, triton_available

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

    @triton.jit
    def _depth_inputs_kernel(code0_ptr, tag, first_ptr, f_stride, table_ptr, t_stride, x_ptr, x_stride, codes_ptr,
                             c_stride, n_hidden, BLOCK_H: tl.constexpr):
        b = tl.program_id(0)
        code = tl.load(code0_ptr + b)
        code = tl.where(code >= tag, code - tag, code)
        tl.store(codes_ptr + b * c_stride, code)
        for h0 in range(0, n_hidden, BLOCK_H):
            cols = h0 + tl.arange(0, BLOCK_H)
            mask = cols < n_hidden
            tl.store(x_ptr + (2 * b) * x_stride + cols, tl.load(first_ptr + b * f_stride + cols, mask=mask), mask=mask)
            row = tl.load(table_ptr + code * t_stride + cols, mask=mask)
            tl.store(x_ptr + (2 * b + 1) * x_stride + cols, row, mask=mask)

    @triton.jit
    def _embed_step_kernel(codes_ptr, c_stride, offsets_ptr, n_codes, table_ptr, t_stride, text_ptr, text_table_ptr,
                           tt_stride, out_ptr, o_stride, n_hidden, BLOCK_H: tl.constexpr):
        b = tl.program_id(0)
        text = tl.load(text_ptr + b).to(tl.int64)
        for h0 in range(0, n_hidden, BLOCK_H):
            cols = h0 + tl.arange(0, BLOCK_H)
            mask = cols < n_hidden
            acc = tl.zeros((BLOCK_H,), tl.float32)
            for k in range(n_codes):
                row = tl.load(codes_ptr + b * c_stride + k) + tl.load(offsets_ptr + k)
                acc += tl.load(table_ptr + row.to(tl.int64) * t_stride + cols, mask=mask, other=0.0).to(tl.float32)
            frame = acc.to(out_ptr.dtype.element_ty).to(tl.float32)  # rounded once, as torch's sum
            t = tl.load(text_table_ptr + text * tt_stride + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + b * o_stride + cols, (frame + t).to(out_ptr.dtype.element_ty), mask=mask)


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



def depth_inputs(first: torch.Tensor, code0: torch.Tensor, tag: int, table: torch.Tensor, codes: torch.Tensor,
                 impl: str = "torch") -> torch.Tensor:
    """The first step's input of a depth transformer that reads two tokens a row: first [B, H] (the LM's
    projected hidden state) and the embedding of code 0, table[code0] [V, H], interleaved into [2B, H]
    (rows 2b, 2b + 1); code 0 arrives tagged (frame 1's shifted by `tag`: Qwen3-TTS's sample_first_code) and is
    written untagged into codes [B] (a strided column is fine). One launch with `impl="triton"` instead of six."""
    check_impl(impl)
    if impl == "torch":
        code = torch.where(code0 >= tag, code0 - tag, code0)
        codes.copy_(code)
        return torch.stack([first, F.embedding(code, table)], dim=1).view(-1, first.shape[1])
    bsz, hidden = first.shape
    assert first.stride(-1) == 1 and table.stride(-1) == 1 and table.shape[1] == hidden
    x = torch.empty(2 * bsz, hidden, dtype=first.dtype, device=first.device)
    if bsz:
        _depth_inputs_kernel[(bsz,)](code0, tag, first, first.stride(0), table, table.stride(0), x, x.stride(0), codes,
                                     codes.stride(0), hidden, BLOCK_H=min(1024, next_pow2(hidden)))
    return x


def embed_step(codes: torch.Tensor, offsets: torch.Tensor, table: torch.Tensor, text_ids: torch.Tensor,
               text_table: torch.Tensor, impl: str = "torch") -> torch.Tensor:
    """A decode step's input: the sum of each row's frame embeddings, table[codes + offsets] summed over the
    codes (codes [B, K], offsets [K]: where each code group's rows start in `table`), plus the row's text
    embedding text_table[text_ids] -> [B, H]. The sum in float32, rounded once, then the add: the two roundings
    of the torch ops, whose five launches become one with `impl="triton"` (the float32 sum's order may differ
    in its last bit)."""
    check_impl(impl)
    if impl == "torch":
        return F.embedding(codes + offsets, table).sum(1) + F.embedding(text_ids, text_table)
    bsz, hidden = codes.shape[0], table.shape[1]
    assert table.stride(-1) == 1 and text_table.stride(-1) == 1 and text_table.shape[1] == hidden
    out = torch.empty(bsz, hidden, dtype=table.dtype, device=table.device)
    if bsz:
        _embed_step_kernel[(bsz,)](codes, codes.stride(0), offsets, codes.shape[1], table, table.stride(0), text_ids,
                                   text_table, text_table.stride(0), out, out.stride(0), hidden,
                                   BLOCK_H=min(1024, next_pow2(hidden)))
    return out
