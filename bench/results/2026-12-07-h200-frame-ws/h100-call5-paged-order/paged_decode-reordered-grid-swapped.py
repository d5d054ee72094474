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
(32,2,2 took 29.81 at 128 but 12.94 at 64). In an H100's frame: 17.3 against 18.3 us a layer at 64 rows, 31.9
against 33.4 at 128 (bench/results/2026-12-07-h100-kernel-defaults/); not yet measured in the H200's
(VOXRT_PAGED_DECODE_CONFIG=64,4 gives the earlier config back).

`paged_decode_rope_attention` (`VOXRT_PAGED_DECODE_ROPE=on`, runtime/attention.py) is the same kernel with
kernels/rope.py's work folded in: from the packed q/k/v projection row, each program norms and rotates its
group's query heads and its key head (per-head RMSNorm, rounded, rotate-half rotary, rounded: rope.py's rule),
writes the new K and V (v scaled by the row's rstd where the input norm is folded into the projection) at the
token's (page, offset), attends over the sequence's earlier tokens from the cache, and adds the new token from
registers, so it never reads what it has just written. One launch a layer instead of two (28 a talker step);
the same K/V bits and output as the two kernels in the interpreter. On by default: in an H100's frame 4.902 against
5.003-5.025 ms at 64 rows, 5.716 against 5.782-5.809 at 128 (bench/results/2026-12-07-h100-launch-cuts/).

The cache is FlashInfer's NHD layout, `[pages + 1, 2, page_size, kv_heads, head_dim]`; a sequence is its page
indices `indices[indptr[b]:indptr[b + 1]]` and the fill of its last page `last_len[b]` (FlashInfer's CSR
form), so the attention context uploads the same arrays it would plan FlashInfer with.
"""

from __future__ import annotations

import math

import torch

from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.kernels import check_impl, interpreting, next_pow2, triton_available
from voxrt.engine.runtime.kernels.norm import _rows
from voxrt.engine.runtime.kernels.rope import qk_norm_rope_paged

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

    from voxrt.engine.runtime.kernels.norm import row_rstd
    from voxrt.engine.runtime.kernels.rope import _norm_rope_half

    @triton.jit
    def _round_rows(cache_ptr, indices_ptr, start, t, valid, kh, s_page, s_slot, s_head, PS: tl.constexpr):
        """The cache addresses of KV head kh at the sequence's tokens t (a round's [BT]), its pages from the CSR
        table at `start`."""
        page = tl.load(indices_ptr + start + t // PS, mask=valid, other=0).to(tl.int64)
        return cache_ptr + page * s_page + (t % PS) * s_slot + kh * s_head

    @triton.jit
    def _online_softmax(m, l, acc, s, v):
        """One round of the online softmax: the running max m and sum l [GR], the output acc [GR, D], the round's
        scores s [GR, BT] (float32, -inf where masked) and values v [BT, D] -> m, l, acc."""
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        return m_new, l * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)

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
            base = _round_rows(cache_ptr, indices_ptr, start, t, valid, kh, s_page, s_slot, s_head, PS)  # [BT]
            k = tl.load(base[:, None] + dcols[None, :], mask=valid[:, None], other=0.0)  # [BT, D]
            v = tl.load(base[:, None] + s_kv + dcols[None, :], mask=valid[:, None], other=0.0)
            if DOT_F32:  # float32 caches, and Triton's interpreter (its bf16 products are not usable)
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.where(valid[None, :], tl.dot(q, tl.trans(k)) * scale, float("-inf"))  # [GR, BT] float32
            m, l, acc = _online_softmax(m, l, acc, s, v)
        out = acc / l[:, None]
        tl.store(out_ptr + (b * HQ + kh * G + rows)[:, None] * D + dcols[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=qmask[:, None])

    @triton.jit
    def _paged_decode_rope_kernel(qkv_ptr, qkv_stride, out_ptr, cache_ptr, indptr_ptr, indices_ptr, last_ptr,
                                  pos_ptr, page_ptr, off_ptr, qw_ptr, kw_ptr, inv_freq_ptr, eps, scale,
                                  s_page, s_kv, s_slot, s_head, x_ptr, x_stride, n_x, x_eps, PS: tl.constexpr,
                                  HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, GR: tl.constexpr,
                                  BT: tl.constexpr, DOT_F32: tl.constexpr, HAS_X: tl.constexpr,
                                  BLOCK_X: tl.constexpr):
        """`_paged_decode_kernel` with the rotary kernel's work (kernels/rope.py) folded in: the program of
        (sequence b, KV head kh) norms and rotates its group's query heads, attends over the sequence's earlier
        tokens from the cache, then norms and rotates its key head from the packed projection row, writes the
        new K/V at (page_ptr[b], off_ptr[b]) and attends over the new token from registers (the loop never
        reads the slot it writes). Only what the loop needs comes before it: the page table's loads first
        (the loop's K/V addresses wait on them), then the query heads; the key, the value's rstd (a read of
        the whole input row) and the stores after it, off the path to the loop's first loads."""
        kh = tl.program_id(0)
        b = tl.program_id(1)
        start = tl.load(indptr_ptr + b)
        num_pages = tl.load(indptr_ptr + b + 1) - start
        earlier = (num_pages - 1) * PS + tl.load(last_ptr + b) - 1  # the tokens before the new one
        G: tl.constexpr = HQ // HKV
        HALF: tl.constexpr = D // 2
        dt = qkv_ptr.dtype.element_ty
        rows = tl.arange(0, GR)
        hcols = tl.arange(0, HALF)
        dcols = tl.arange(0, D)
        tcols = tl.arange(0, BT)
        qmask = rows < G
        inv_freq = tl.load(inv_freq_ptr + hcols)
        pos = tl.load(pos_ptr + b)
        freq = pos.to(tl.float32) * inv_freq
        c = tl.cos(freq).to(dt).to(tl.float32)[None, :]  # rounded to the activations' dtype, as transformers does
        sn = tl.sin(freq).to(dt).to(tl.float32)[None, :]
        row = qkv_ptr + b * qkv_stride
        # the group's query heads: per-head RMSNorm, rounded, rotated in float32, rounded (as kernels/rope.py)
        qbase = row + (kh * G + rows)[:, None] * D
        x1 = tl.load(qbase + hcols[None, :], mask=qmask[:, None], other=0.0).to(tl.float32)  # [GR, HALF]
        x2 = tl.load(qbase + HALF + hcols[None, :], mask=qmask[:, None], other=0.0).to(tl.float32)
        qrstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / D + eps)[:, None]
        n1 = (x1 * qrstd * tl.load(qw_ptr + hcols).to(tl.float32)[None, :]).to(dt).to(tl.float32)
        n2 = (x2 * qrstd * tl.load(qw_ptr + HALF + hcols).to(tl.float32)[None, :]).to(dt).to(tl.float32)
        q1 = (n1 * c - n2 * sn).to(dt)
        q2 = (n2 * c + n1 * sn).to(dt)
        cdt = cache_ptr.dtype.element_ty
        q1 = q1.to(cdt)
        q2 = q2.to(cdt)
        if DOT_F32:
            q1 = q1.to(tl.float32)
            q2 = q2.to(tl.float32)
        m = tl.full((GR,), float("-inf"), tl.float32)
        l = tl.zeros((GR,), tl.float32)
        acc = tl.zeros((GR, D), tl.float32)
        for t0 in range(0, earlier, BT):
            t = t0 + tcols
            valid = t < earlier
            base = _round_rows(cache_ptr, indices_ptr, start, t, valid, kh, s_page, s_slot, s_head, PS)  # [BT]
            ka = tl.load(base[:, None] + hcols[None, :], mask=valid[:, None], other=0.0)  # [BT, HALF]
            kb = tl.load(base[:, None] + HALF + hcols[None, :], mask=valid[:, None], other=0.0)
            v = tl.load(base[:, None] + s_kv + dcols[None, :], mask=valid[:, None], other=0.0)  # [BT, D]
            if DOT_F32:
                ka = ka.to(tl.float32)
                kb = kb.to(tl.float32)
                v = v.to(tl.float32)
            s = (tl.dot(q1, tl.trans(ka)) + tl.dot(q2, tl.trans(kb))) * scale  # [GR, BT] float32
            m, l, acc = _online_softmax(m, l, acc, tl.where(valid[None, :], s, float("-inf")), v)
        # the new key (the same rule as the queries) and value (scaled by the row's rstd where the input norm is
        # folded), written to the cache and attended from registers
        kbase = row + (HQ + kh) * D
        y1 = tl.load(kbase + hcols).to(tl.float32)
        y2 = tl.load(kbase + HALF + hcols).to(tl.float32)
        r1, r2 = _norm_rope_half(y1, y2, tl.load(kw_ptr + hcols).to(tl.float32),
                                 tl.load(kw_ptr + HALF + hcols).to(tl.float32), inv_freq, pos, eps, qkv_ptr, D)
        k1 = r1.to(cdt)
        k2 = r2.to(cdt)
        v_new = tl.load(row + (HQ + HKV) * D + kh * D + dcols)
        if HAS_X:
            v_new = v_new.to(tl.float32) * row_rstd(x_ptr + b * x_stride, n_x, x_eps, BLOCK_X)
        v_new = v_new.to(cdt)
        dst = cache_ptr + tl.load(page_ptr + b) * s_page + tl.load(off_ptr + b) * s_slot + kh * s_head
        tl.store(dst + hcols, k1)
        tl.store(dst + HALF + hcols, k2)
        tl.store(dst + s_kv + dcols, v_new)
        s_last = (tl.sum(q1.to(tl.float32) * k1.to(tl.float32)[None, :], axis=1)
                  + tl.sum(q2.to(tl.float32) * k2.to(tl.float32)[None, :], axis=1)) * scale  # [GR]
        m_new = tl.maximum(m, s_last)
        alpha = tl.exp(m - m_new)
        p_last = tl.exp(s_last - m_new)
        l = l * alpha + p_last
        acc = acc * alpha[:, None] + p_last[:, None] * v_new.to(tl.float32)[None, :]
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


def paged_decode_rope_attention(qkv: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int,
                                q_norm: torch.Tensor, k_norm: torch.Tensor, inv_freq: torch.Tensor, eps: float,
                                positions: torch.Tensor, page_idx: torch.Tensor, page_off: torch.Tensor,
                                cache: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
                                last_len: torch.Tensor, impl: str = "torch", x: torch.Tensor | None = None,
                                x_eps: float = 1e-6) -> torch.Tensor:
    """kernels/rope.py's `qk_norm_rope_paged` (q/k norm, rotary, the K/V write at `page_idx` / `page_off`) then
    `paged_decode_attention`, for a decode step (one new token a sequence, the last of its pages' tokens), in one
    launch: qkv [B, (Hq + 2 Hkv) * D] -> [B, Hq, D]. The torch impl runs the two in turn (the reference)."""
    check_impl(impl)
    if impl == "torch":
        q = qk_norm_rope_paged(qkv, num_q_heads, num_kv_heads, head_dim, q_norm, k_norm, inv_freq, eps, positions,
                               page_idx, page_off, cache, "torch", x=x, x_eps=x_eps)
        return paged_decode_attention(q.to(cache.dtype), cache, indptr, indices, last_len, impl="torch")
    bsz = qkv.shape[0]
    hq, hkv, d = num_q_heads, num_kv_heads, head_dim
    _, _, ps, cache_hkv, cache_d = cache.shape
    assert (cache_hkv, cache_d) == (hkv, d) and qkv.shape[1] == (hq + 2 * hkv) * d, (qkv.shape, cache.shape)
    assert qkv.stride(-1) == 1 and cache.is_contiguous() and hq // hkv <= GROUP_ROWS and d % 32 == 0
    bt, warps, stages = kernel_config()
    out = torch.empty(bsz, hq, d, dtype=cache.dtype, device=qkv.device)
    x2 = _rows(x) if x is not None else qkv
    _paged_decode_rope_kernel[(hkv, bsz)](
        qkv, qkv.stride(0), out, cache, indptr, indices, last_len, positions, page_idx, page_off, q_norm, k_norm,
        inv_freq, eps, 1.0 / math.sqrt(d), cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3),
        x2, x2.stride(0), x2.shape[-1], x_eps, PS=ps, HQ=hq, HKV=hkv, D=d, GR=GROUP_ROWS, BT=bt,
        DOT_F32=interpreting() or cache.dtype == torch.float32, HAS_X=x is not None,
        BLOCK_X=next_pow2(x2.shape[-1]), num_warps=warps, **({} if stages is None else {"num_stages": stages}))
    return out
