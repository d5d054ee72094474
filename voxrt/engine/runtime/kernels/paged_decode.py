"""Decode attention over the paged KV cache (one new token per sequence), in one Triton kernel.

FlashInfer's CUDA-core decode kernel, in a CUDA graph, always splits each sequence's KV across programs and
merges the parts in a second kernel; at 64 rows and KV context 128 the pair took ~25 us a layer on the H200
(bench/results/2026-12-03-frame-attn/, 28 layers a talker step). Here one program per (sequence, KV head)
walks the sequence's pages in blocks of BLOCK_T tokens with an online softmax: the group's query heads (2 for
Qwen3-TTS) padded to 16 rows so both products run on tensor cores, no split and no second kernel. With many
rows the grid (rows x KV heads) fills the GPU; with few it does not, which is where `auto` takes FA3
(runtime/attention.py).

`VOXRT_PAGED_DECODE_CONFIG=BLOCK_T,WARPS,STAGES` (read at each launch, so a graph takes the value of its
capture; default 64,2,3) sets the tokens a round, the warps and the software pipeline's stages. The default is
the sweep's (bench/gpu_kernels.py `--only paged` on an H100, bench/results/2026-12-05-h100/tune/kernels.json, KV
context 128) one config faster than the earlier 64 tokens / 4 warps / Triton's stages at both row counts the
engine runs this kernel at: 11.27 against 12.25 us at 64 rows (the fastest there), 31.79 against 33.45 at 128
(32,2,2 took 29.81 at 128 but 12.94 at 64). Not yet measured in the H200's frame (VOXRT_PAGED_DECODE_CONFIG=64,4
gives the earlier config back).

The cache is FlashInfer's NHD layout, `[pages + 1, 2, page_size, kv_heads, head_dim]`; a sequence is its page
indices `indices[indptr[b]:indptr[b + 1]]` and the fill of its last page `last_len[b]` (FlashInfer's CSR
form), so the attention context uploads the same arrays it would plan FlashInfer with.
"""

from __future__ import annotations

import math

import torch

from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.kernels import check_impl, interpreting, triton_available

BLOCK_T = 64  # tokens a round: 4 pages of 16
DEFAULT_CONFIG = (BLOCK_T, 2, 3)  # tokens a round, warps, stages: the H100 sweep's (module docstring)
GROUP_ROWS = 16  # the query heads of a KV group, padded for tl.dot


def kernel_config(block_t: int | None = None, num_warps: int | None = None,
                  num_stages: int | None = None) -> tuple[int, int, int | None]:
    """(tokens a round, warps, pipeline stages or None for Triton's default): the arguments, else
    `VOXRT_PAGED_DECODE_CONFIG` (module docstring; values it leaves out: 4 warps, Triton's stages), else 64, 2, 3."""
    values = knobs.paged_decode_config() or list(DEFAULT_CONFIG)  # a bad value: ValueError naming the form
    defaults: list[int | None] = [BLOCK_T, 4, None]  # what an environment value leaves out
    defaults[: len(values)] = values
    bt = block_t or defaults[0]
    warps = num_warps or defaults[1]
    stages = num_stages or defaults[2]
    return bt, warps, stages

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _paged_decode_kernel(q_ptr, out_ptr, cache_ptr, indptr_ptr, indices_ptr, last_ptr, scale,
                             s_page, s_kv, s_slot, s_head, PS: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr,
                             D: tl.constexpr, GR: tl.constexpr, BT: tl.constexpr, DOT_F32: tl.constexpr):
        b = tl.program_id(0)
        kh = tl.program_id(1)
        G: tl.constexpr = HQ // HKV
        rows = tl.arange(0, GR)
        dcols = tl.arange(0, D)
        tcols = tl.arange(0, BT)
        qmask = rows < G
        q = tl.load(q_ptr + (b * HQ + kh * G + rows)[:, None] * D + dcols[None, :], mask=qmask[:, None], other=0.0)
        if DOT_F32:
            q = q.to(tl.float32)
        start = tl.load(indptr_ptr + b)
        num_pages = tl.load(indptr_ptr + b + 1) - start
        seq_len = (num_pages - 1) * PS + tl.load(last_ptr + b)
        m = tl.full((GR,), float("-inf"), tl.float32)
        l = tl.zeros((GR,), tl.float32)
        acc = tl.zeros((GR, D), tl.float32)
        for t0 in range(0, seq_len, BT):
            t = t0 + tcols
            valid = t < seq_len
            page = tl.load(indices_ptr + start + t // PS, mask=valid, other=0).to(tl.int64)
            base = cache_ptr + page * s_page + (t % PS) * s_slot + kh * s_head  # [BT]
            k = tl.load(base[:, None] + dcols[None, :], mask=valid[:, None], other=0.0)  # [BT, D]
            v = tl.load(base[:, None] + s_kv + dcols[None, :], mask=valid[:, None], other=0.0)
            if DOT_F32:  # float32 caches, and Triton's interpreter (its bf16 products are not usable)
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k)) * scale  # [GR, BT] float32
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / l[:, None]
        tl.store(out_ptr + (b * HQ + kh * G + rows)[:, None] * D + dcols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=qmask[:, None])


def paged_decode_attention(q: torch.Tensor, cache: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
                           last_len: torch.Tensor, impl: str = "torch", block_t: int | None = None,
                           num_warps: int | None = None, num_stages: int | None = None) -> torch.Tensor:
    """q [B, Hq, D] (one new token a sequence, its K/V already in the cache); cache [pages + 1, 2, page_size,
    Hkv, D]; indptr [>= B + 1], indices, last_len [>= B] int32 (FlashInfer's CSR page table) -> [B, Hq, D].
    `block_t`, `num_warps`, `num_stages`: the Triton kernel's config (`kernel_config`)."""
    check_impl(impl)
    bsz, hq, d = q.shape
    _, _, ps, hkv, _ = cache.shape
    scale = 1.0 / math.sqrt(d)
    if impl == "torch":
        out = torch.zeros_like(q)
        ptr, idx, last = indptr.tolist(), indices.tolist(), last_len.tolist()
        for b in range(bsz):
            pages = idx[ptr[b] : ptr[b + 1]]
            n = (len(pages) - 1) * ps + last[b]
            kv = cache[pages].permute(1, 0, 2, 3, 4).reshape(2, len(pages) * ps, hkv, d)[:, :n].float()  # [2, n, Hkv, D]
            qf = q[b].float().view(hkv, hq // hkv, d)
            scores = torch.einsum("hgd,nhd->hgn", qf, kv[0]) * scale
            out[b] = torch.einsum("hgn,nhd->hgd", scores.softmax(-1), kv[1]).reshape(hq, d).to(q.dtype)
        return out
    assert q.is_contiguous() and cache.is_contiguous() and (hq // hkv) <= GROUP_ROWS
    bt, warps, stages = kernel_config(block_t, num_warps, num_stages)
    out = torch.empty_like(q)
    _paged_decode_kernel[(bsz, hkv)](
        q, out, cache, indptr, indices, last_len, scale, cache.stride(0), cache.stride(1), cache.stride(2),
        cache.stride(3), PS=ps, HQ=hq, HKV=hkv, D=d, GR=GROUP_ROWS, BT=bt,
        DOT_F32=interpreting() or cache.dtype == torch.float32, num_warps=warps,
        **({} if stages is None else {"num_stages": stages}))
    return out
