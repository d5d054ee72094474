"""Attention of a depth transformer (Qwen3-TTS's code predictor) over its per-frame cache, in one kernel.

The code predictor's cache lives for one frame: at most `num_code_groups` (16) positions, written at fixed
offsets (step 0 writes positions 0 and 1, step s >= 1 writes position s + 1). Each step therefore needs, per
layer: per-head q/k RMSNorm, rotary, the K/V write, and causal attention over <= 16 keys. The reference does
that in ~25 kernels (rotary, cache slices, repeat_interleave for GQA, a mask, SDPA); here one program per
(batch row, query head) does all of it: it computes the step's k/v (the group's first head writes them to the
cache), and attends for the step's tokens with keys and values in registers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import check_impl, next_pow2, pdl_args, triton_available
from voxrt.engine.runtime.kernels.norm import _rows, rstd_torch
from voxrt.engine.runtime.kernels.rope import norm_rope_torch

# One program per query head with one warp: fastest at every batch measured (bench/gpu_kernels.py on the H200,
# 2026-12-01, bench/results/2026-12-01-prefill: 2.7 us at 1 row, 4.0 at 64, 5.4 at 128, against 7.0 / 23.3 /
# 43.7 us with 4 warps, and 4.5 / 5.0 / 5.4 us for one program per KV group with one warp). The step's
# cache is at most 16 positions of 128 dims: one warp holds it, and more warps only add the reductions' barriers.
HEADS_PER_PROGRAM = 1
NUM_WARPS = 1

if triton_available():
    import triton
    import triton.language as tl

    from voxrt.engine.runtime.kernels.norm import row_rstd
    from voxrt.engine.runtime.kernels.rope import _norm_rope_half

    @triton.jit
    def _depth_attention_kernel(qkv_ptr, qkv_stride, out_ptr, out_stride, k_cache_ptr, v_cache_ptr, qw_ptr, kw_ptr,
                                inv_freq_ptr, start, eps, scale, s_b, s_h, s_l, x_ptr, x_stride, n_x, x_eps,
                                T: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                                L: tl.constexpr, HAS_X: tl.constexpr, BLOCK_X: tl.constexpr, NH: tl.constexpr,
                                PDL: tl.constexpr):
        """One program per (batch row, NH query heads of one KV group). The step's new k/v are computed in
        registers by each program of their group (the first writes them to the cache), so no program reads
        back what another wrote in the same launch; older positions come from the cache."""
        b = tl.program_id(0)
        h0 = tl.program_id(1) * NH
        G: tl.constexpr = HQ // HKV
        kh = h0 // G
        HALF: tl.constexpr = D // 2
        cols = tl.arange(0, HALF)
        dcols = tl.arange(0, D)
        lpos = tl.arange(0, L)
        qw1 = tl.load(qw_ptr + cols).to(tl.float32)
        qw2 = tl.load(qw_ptr + HALF + cols).to(tl.float32)
        kw1 = tl.load(kw_ptr + cols).to(tl.float32)
        kw2 = tl.load(kw_ptr + HALF + cols).to(tl.float32)
        inv_freq = tl.load(inv_freq_ptr + cols)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()  # after the wait: one kernel ahead at most
        kbase = k_cache_ptr + b * s_b + kh * s_h
        vbase = v_cache_ptr + b * s_b + kh * s_h
        old = (lpos < start)[:, None]
        k1s = tl.load(kbase + lpos[:, None] * s_l + cols[None, :], mask=old, other=0.0).to(tl.float32)
        k2s = tl.load(kbase + lpos[:, None] * s_l + HALF + cols[None, :], mask=old, other=0.0).to(tl.float32)
        vs = tl.load(vbase + lpos[:, None] * s_l + dcols[None, :], mask=old, other=0.0).to(tl.float32)
        for t in tl.static_range(T):
            row = qkv_ptr + (b * T + t) * qkv_stride
            pos = start + t
            k1 = tl.load(row + HQ * D + kh * D + cols).to(tl.float32)
            k2 = tl.load(row + HQ * D + kh * D + HALF + cols).to(tl.float32)
            o1, o2 = _norm_rope_half(k1, k2, kw1, kw2, inv_freq, pos, eps, qkv_ptr, D)
            o1 = o1.to(k_cache_ptr.dtype.element_ty)
            o2 = o2.to(k_cache_ptr.dtype.element_ty)
            v = tl.load(row + (HQ + HKV) * D + kh * D + dcols)
            if HAS_X:  # the input norm folded into the projection: v takes the row's rstd (kernels/rope.py)
                v = v.to(tl.float32) * row_rstd(x_ptr + (b * T + t) * x_stride, n_x, x_eps, BLOCK_X)
            v = v.to(v_cache_ptr.dtype.element_ty)
            if h0 % G == 0:
                tl.store(kbase + pos * s_l + cols, o1)
                tl.store(kbase + pos * s_l + HALF + cols, o2)
                tl.store(vbase + pos * s_l + dcols, v)
            here = (lpos == pos)[:, None]
            k1s = tl.where(here, o1.to(tl.float32)[None, :], k1s)
            k2s = tl.where(here, o2.to(tl.float32)[None, :], k2s)
            vs = tl.where(here, v.to(tl.float32)[None, :], vs)
        for t in tl.static_range(T):
            row = qkv_ptr + (b * T + t) * qkv_stride
            pos = start + t
            for g in tl.static_range(NH):
                h = h0 + g
                q1 = tl.load(row + h * D + cols).to(tl.float32)
                q2 = tl.load(row + h * D + HALF + cols).to(tl.float32)
                r1, r2 = _norm_rope_half(q1, q2, qw1, qw2, inv_freq, pos, eps, qkv_ptr, D)
                r1 = r1.to(qkv_ptr.dtype.element_ty).to(tl.float32)  # the reference attends over rounded q
                r2 = r2.to(qkv_ptr.dtype.element_ty).to(tl.float32)
                scores = (tl.sum(k1s * r1[None, :], axis=1) + tl.sum(k2s * r2[None, :], axis=1)) * scale
                scores = tl.where(lpos <= pos, scores, float("-inf"))
                p = tl.exp(scores - tl.max(scores, axis=0))
                p = p / tl.sum(p, axis=0)
                o = tl.sum(p[:, None] * vs, axis=0)
                tl.store(out_ptr + (b * T + t) * out_stride + h * D + dcols, o.to(out_ptr.dtype.element_ty))


def depth_attention(qkv: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int, q_norm: torch.Tensor,
                    k_norm: torch.Tensor, inv_freq: torch.Tensor, eps: float, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, start: int, num_new: int, impl: str = "torch", x: torch.Tensor | None = None,
                    x_eps: float = 1e-6, heads_per_program: int | None = None, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """qkv [B * T, (Hq + 2 Hkv) * D] for T = `num_new` tokens per row at positions start..start+T-1;
    k_cache, v_cache [B, Hkv, L, D]. Writes the new k/v, returns the attention output [B * T, Hq * D].
    `x` [B * T, H]: v scaled by rstd(x) per row (kernels/rope.py). `heads_per_program`: query heads per
    Triton program (default HEADS_PER_PROGRAM; a whole KV group shares its cache loads, one head has the most
    programs in flight)."""
    check_impl(impl)
    hq, hkv, d, t = num_q_heads, num_kv_heads, head_dim, num_new
    bsz = qkv.shape[0] // t
    x_rows = x
    if impl == "torch":
        x = qkv.view(bsz, t, -1)
        pos = torch.arange(start, start + t, device=qkv.device)
        q = norm_rope_torch(x[..., : hq * d].view(bsz, t, hq, d), q_norm, inv_freq, pos, eps)
        k = norm_rope_torch(x[..., hq * d : (hq + hkv) * d].view(bsz, t, hkv, d), k_norm, inv_freq, pos, eps)
        v = x[..., (hq + hkv) * d :].view(bsz, t, hkv, d)
        if x_rows is not None:
            v = (v.float() * rstd_torch(x_rows, x_eps).view(bsz, t, 1, 1)).to(qkv.dtype)
        k_cache[:, :, start : start + t] = k.transpose(1, 2).to(k_cache.dtype)
        v_cache[:, :, start : start + t] = v.transpose(1, 2).to(v_cache.dtype)
        keys = k_cache[:, :, : start + t].repeat_interleave(hq // hkv, dim=1)
        values = v_cache[:, :, : start + t].repeat_interleave(hq // hkv, dim=1)
        mask = torch.ones(t, start + t, dtype=torch.bool, device=qkv.device).tril(diagonal=start)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)  # [B, Hq, T, D]
        return out.transpose(1, 2).reshape(bsz * t, hq * d)
    assert qkv.stride(-1) == 1 and k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    length = k_cache.shape[2]
    assert start + t <= length, (start, t, length)
    out = torch.empty(bsz * t, hq * d, dtype=qkv.dtype, device=qkv.device)
    x2 = _rows(x_rows) if x_rows is not None else qkv
    nh = heads_per_program or HEADS_PER_PROGRAM
    assert (hq // hkv) % nh == 0, (hq, hkv, nh)
    _depth_attention_kernel[(bsz, hq // nh)](
        qkv, qkv.stride(0), out, out.stride(0), k_cache, v_cache, q_norm, k_norm, inv_freq, start, eps,
        1.0 / math.sqrt(d), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), x2, x2.stride(0), x2.shape[-1],
        x_eps, T=t, HQ=hq, HKV=hkv, D=d, L=next_pow2(length), HAS_X=x_rows is not None,
        BLOCK_X=next_pow2(x2.shape[-1]), NH=nh, num_warps=num_warps, **pdl_args(qkv.device, bsz * t))
    return out
