"""Per-head q/k RMSNorm + rotary + the KV write, in one pass over a packed QKV projection.

Qwen3 attention normalizes each head of q and k (`q_norm`, `k_norm`, RMSNorm over head_dim), rotates them
(rotate-half rotary, `models/common/layers.py`), and writes k and v into the cache. The reference does this
in about 15 kernels a layer; `qk_norm_rope_paged` does it in one: it reads the [N, (Hq + 2 Hkv) * D] output of
the packed projection, writes K/V into the paged cache at each token's (page, offset), and returns q
[N, Hq, D] ready for the attention kernel. Rounding follows the reference: the normed head is rounded to the
activation dtype, cos/sin are cast to it (transformers casts them to the query's dtype), the rotation is
computed in float32 and rounded once.

With `x` (the layer's input rows, when its RMSNorm is folded into the projection: kernels/norm.py), v is
scaled by each row's rstd(x); q and k need no scale, since their per-head RMSNorm cancels any row scale
(up to its eps, 1e-6 against mean squares of order one).
"""

from __future__ import annotations

import torch

from voxrt.engine.runtime.kernels import check_impl, next_pow2, pdl_args, triton_available
from voxrt.engine.runtime.kernels.norm import _rows, rstd_torch

if triton_available():
    import triton
    import triton.language as tl

    from voxrt.engine.runtime.kernels.norm import row_rstd

    @triton.jit
    def _norm_rope_half(x1, x2, w1, w2, inv_freq, pos, eps, like_ptr, D: tl.constexpr):
        """Two halves of one head (float32) -> its normed, rotated halves (float32); w1, w2: the halves of the
        norm weight, inv_freq [D / 2] (float32, loaded by the caller: before the PDL wait, kernels/__init__.py);
        roundings to the dtype of `like_ptr` (the activations)."""
        dt = like_ptr.dtype.element_ty
        rstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
        n1 = (x1 * rstd * w1).to(dt).to(tl.float32)
        n2 = (x2 * rstd * w2).to(dt).to(tl.float32)
        freq = pos.to(tl.float32) * inv_freq
        c = tl.cos(freq).to(dt).to(tl.float32)
        s = tl.sin(freq).to(dt).to(tl.float32)
        return n1 * c - n2 * s, n2 * c + n1 * s

    @triton.jit
    def _qk_norm_rope_paged_kernel(qkv_ptr, qkv_stride, q_out_ptr, cache_ptr, pos_ptr, page_ptr, off_ptr,
                                   qw_ptr, kw_ptr, inv_freq_ptr, eps, s_page, s_kv, s_slot, s_head,
                                   x_ptr, x_stride, n_x, x_eps, HQ: tl.constexpr, HKV: tl.constexpr,
                                   D: tl.constexpr, HAS_X: tl.constexpr, BLOCK_X: tl.constexpr,
                                   PDL: tl.constexpr):
        tok = tl.program_id(0)
        head = tl.program_id(1)
        HALF: tl.constexpr = D // 2
        cols = tl.arange(0, HALF)
        is_q = head < HQ
        w1 = tl.where(is_q, tl.load(qw_ptr + cols), tl.load(kw_ptr + cols)).to(tl.float32)
        w2 = tl.where(is_q, tl.load(qw_ptr + HALF + cols), tl.load(kw_ptr + HALF + cols)).to(tl.float32)
        inv_freq = tl.load(inv_freq_ptr + cols)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()  # after the wait: one kernel ahead at most
        pos = tl.load(pos_ptr + tok)
        row = qkv_ptr + tok * qkv_stride
        if is_q:
            base = row + head * D
            x1 = tl.load(base + cols).to(tl.float32)
            x2 = tl.load(base + HALF + cols).to(tl.float32)
            o1, o2 = _norm_rope_half(x1, x2, w1, w2, inv_freq, pos, eps, qkv_ptr, D)
            out = q_out_ptr + (tok * HQ + head) * D
            tl.store(out + cols, o1.to(q_out_ptr.dtype.element_ty))
            tl.store(out + HALF + cols, o2.to(q_out_ptr.dtype.element_ty))
        else:
            kh = head - HQ
            base = row + HQ * D + kh * D
            x1 = tl.load(base + cols).to(tl.float32)
            x2 = tl.load(base + HALF + cols).to(tl.float32)
            o1, o2 = _norm_rope_half(x1, x2, w1, w2, inv_freq, pos, eps, qkv_ptr, D)
            page = tl.load(page_ptr + tok)
            slot = tl.load(off_ptr + tok)
            dst = cache_ptr + page * s_page + slot * s_slot + kh * s_head
            tl.store(dst + cols, o1.to(cache_ptr.dtype.element_ty))
            tl.store(dst + HALF + cols, o2.to(cache_ptr.dtype.element_ty))
            v = tl.load(row + (HQ + HKV) * D + kh * D + tl.arange(0, D))
            if HAS_X:
                v = v.to(tl.float32) * row_rstd(x_ptr + tok * x_stride, n_x, x_eps, BLOCK_X)
            tl.store(dst + s_kv + tl.arange(0, D), v.to(cache_ptr.dtype.element_ty))


def rope_inv_freq(head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """[head_dim / 2] float32, computed as `rotary_cos_sin` computes it."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))


def norm_rope_torch(x: torch.Tensor, weight: torch.Tensor, inv_freq: torch.Tensor, positions: torch.Tensor,
                    eps: float) -> torch.Tensor:
    """Reference: x [..., N, H, D] (any float dtype), positions broadcastable to [..., N] -> the same shape."""
    dtype = x.dtype
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    normed = (xf * rstd * weight.float()).to(dtype).float()
    freq = positions.float()[..., None, None] * inv_freq  # [..., N, 1, D/2]
    c, s = freq.cos().to(dtype).float(), freq.sin().to(dtype).float()
    half = x.shape[-1] // 2
    n1, n2 = normed[..., :half], normed[..., half:]
    return torch.cat([n1 * c - n2 * s, n2 * c + n1 * s], dim=-1).to(dtype)


def qk_norm_rope_paged(qkv: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int,
                       q_norm: torch.Tensor, k_norm: torch.Tensor, inv_freq: torch.Tensor, eps: float,
                       positions: torch.Tensor, page_idx: torch.Tensor, page_off: torch.Tensor, cache: torch.Tensor,
                       impl: str = "torch", x: torch.Tensor | None = None, x_eps: float = 1e-6) -> torch.Tensor:
    """qkv [N, (Hq + 2 Hkv) * D]; positions, page_idx, page_off [>= N] int64; cache
    [pages + 1, 2, page_size, Hkv, D] (FlashInfer NHD). Writes token t's k, v at cache[page_idx[t], :,
    page_off[t]] and returns q [N, Hq, D], normed and rotated. `x` [N, H]: v scaled by rstd(x) per row."""
    check_impl(impl)
    n = qkv.shape[0]
    hq, hkv, d = num_q_heads, num_kv_heads, head_dim
    if impl == "torch":
        pos = positions[:n]
        q = norm_rope_torch(qkv[:, : hq * d].view(n, hq, d), q_norm, inv_freq, pos, eps)
        k = norm_rope_torch(qkv[:, hq * d : (hq + hkv) * d].view(n, hkv, d), k_norm, inv_freq, pos, eps)
        v = qkv[:, (hq + hkv) * d :].view(n, hkv, d)
        if x is not None:
            v = (v.float() * rstd_torch(x, x_eps)[:, :, None]).to(qkv.dtype)
        cache[page_idx[:n], 0, page_off[:n]] = k.to(cache.dtype)
        cache[page_idx[:n], 1, page_off[:n]] = v.to(cache.dtype)
        return q
    assert qkv.stride(-1) == 1 and cache.is_contiguous()
    q = torch.empty(n, hq, d, dtype=qkv.dtype, device=qkv.device)
    x2 = _rows(x) if x is not None else qkv
    _qk_norm_rope_paged_kernel[(n, hq + hkv)](
        qkv, qkv.stride(0), q, cache, positions, page_idx, page_off, q_norm, k_norm, inv_freq, eps,
        cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3), x2, x2.stride(0), x2.shape[-1], x_eps,
        HQ=hq, HKV=hkv, D=d, HAS_X=x is not None, BLOCK_X=next_pow2(x2.shape[-1]), num_warps=1 if x is None else 4,
        **pdl_args(qkv.device, n))
    return q
