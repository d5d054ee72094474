"""RMSNorm (with an optional residual add fused in), and the SiLU-gated activation of a packed gate/up
projection.

`add_rms_norm(x, residual, weight)` is the pre-norm block boundary of a Qwen3 layer: the reference computes
`r = residual + x` (rounded to the activation dtype), then `F.rms_norm(r)` (float32 inside, one rounding);
here both happen in one pass and `r` is returned as the next residual. `residual=None` is a plain RMSNorm.

`row_rstd` is the fused path's way around a norm kernel: the RMSNorm weight is folded into the next
projection's weight (`W diag(w)`), so `norm(x) @ W^T = rstd(x) * (x @ (W diag(w))^T)`, and the kernel that
consumes the projection applies each row's `rstd(x) = 1 / sqrt(mean(x^2) + eps)`, computed from x itself
(`silu_mul(gate_up, x=...)` here; the attention and sampling kernels likewise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import check_impl, next_pow2, pdl_args, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def row_rstd(x_row_ptr, n_cols, eps, BLOCK: tl.constexpr):
        """1 / sqrt(mean(x^2) + eps) of one row (float32), x held in one block."""
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_row_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        return 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)

    @triton.jit
    def _add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, x_stride, res_stride, out_stride,
                             res_out_stride, n_cols, eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
                             PDL: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()  # after the wait: one kernel ahead at most
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            r = tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0)
            x = (x.to(tl.float32) + r.to(tl.float32)).to(res_out_ptr.dtype.element_ty)
            tl.store(res_out_ptr + row * res_out_stride + cols, x, mask=mask)
        xf = x.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
        tl.store(out_ptr + row * out_stride + cols, (xf * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _silu_mul_kernel(gu_ptr, out_ptr, x_ptr, gu_stride, out_stride, x_stride, n_cols, n_x, eps,
                         HAS_X: tl.constexpr, BLOCK: tl.constexpr, BLOCK_X: tl.constexpr, PDL: tl.constexpr):
        if PDL:  # nothing to prefetch: every input is an activation
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()  # after the wait: one kernel ahead at most
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        gate = tl.load(gu_ptr + row * gu_stride + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(gu_ptr + row * gu_stride + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_X:
            rstd = row_rstd(x_ptr + row * x_stride, n_x, eps, BLOCK_X)
            gate = gate * rstd
            up = up * rstd
        silu = gate / (1.0 + tl.exp(-gate))
        tl.store(out_ptr + row * out_stride + cols, (silu * up).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """A 2-D view [rows, cols] whose rows may be strided but whose columns are contiguous."""
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def rstd_torch(x: torch.Tensor, eps: float) -> torch.Tensor:
    """[..., H] -> [..., 1] float32: each row's 1 / sqrt(mean(x^2) + eps)."""
    return torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 impl: str = "torch", out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, H] -> (rms_norm(residual + x) * weight, residual + x). Rows may be strided views. The norm comes
    out in `out_dtype` (default: x's)."""
    check_impl(impl)
    out_dtype = out_dtype or x.dtype
    if impl == "torch":
        r = x if residual is None else residual + x
        return F.rms_norm(r, (r.shape[-1],), weight.to(r.dtype), eps).to(out_dtype), r
    x2 = _rows(x)
    n, h = x2.shape
    out = torch.empty(n, h, dtype=out_dtype, device=x.device)
    if residual is None:
        res_in, res_out, r = x2, x2, x2
    else:
        res_in = _rows(residual)
        r = torch.empty(n, h, dtype=x.dtype, device=x.device)
        res_out = r
    _add_rms_norm_kernel[(n,)](x2, res_in, weight, out, res_out, x2.stride(0), res_in.stride(0), out.stride(0),
                               res_out.stride(0), h, eps, HAS_RESIDUAL=residual is not None, BLOCK=next_pow2(h),
                               num_warps=4 if h <= 2048 else 8, **pdl_args(x.device, n))
    return out.view(x.shape), r.view(x.shape)


def silu_mul(gate_up: torch.Tensor, impl: str = "torch", x: torch.Tensor | None = None,
             eps: float = 1e-6) -> torch.Tensor:
    """[N, 2I] (gate | up, a packed projection) -> [N, I] silu(gate) * up. With `x` [N, H]: gate and up are
    first scaled by each row's rstd(x) (the RMSNorm folded into the projection, see the module docstring)."""
    check_impl(impl)
    inter = gate_up.shape[-1] // 2
    if impl == "torch":
        gate, up = gate_up[..., :inter], gate_up[..., inter:]
        if x is not None:
            scale = rstd_torch(x, eps)
            gate, up = (gate.float() * scale).to(gate_up.dtype), (up.float() * scale).to(gate_up.dtype)
        return F.silu(gate) * up
    gu = _rows(gate_up)
    n = gu.shape[0]
    out = torch.empty(n, inter, dtype=gate_up.dtype, device=gate_up.device)
    x2 = _rows(x) if x is not None else gu
    block = min(1024, next_pow2(inter))
    _silu_mul_kernel[(n, triton.cdiv(inter, block))](
        gu, out, x2, gu.stride(0), out.stride(0), x2.stride(0), inter, x2.shape[-1], eps, HAS_X=x is not None,
        BLOCK=block, BLOCK_X=next_pow2(x2.shape[-1]), num_warps=4, **pdl_args(gate_up.device, n))
    return out.view(*gate_up.shape[:-1], inter)
