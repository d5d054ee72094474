"""SnakeBeta in one pass, for the codec's decoder (issue 14).

`snake_beta(x, alpha, inv_beta)` is `x + inv_beta[c] * sin(alpha[c] * x)^2` over [B, C, T] (the DAC-style
activation of the Qwen3-TTS 12 Hz codec; `alpha = exp(log_alpha)`, `inv_beta = 1 / (exp(log_beta) + 1e-9)`,
both precomputed per channel). Written as torch ops it is five elementwise kernels, each reading and writing
the whole tensor: at the decoder's last stage (96 channels x 1920 samples a frame) a 25-frame chunk at batch
16 is 74 M elements, and the decoder applies it 29 times. The Triton kernel reads x once and writes once, math
in float32 whatever the storage dtype.

`in_bias` (optional, [C]): a per-channel bias added to x first (the previous conv's bias, folded in here so
that conv runs without its own bias pass: the activation is `snake(x + in_bias)`).

`out` may be a view into a bigger buffer (a causal conv's input with its left context in front: the
activation lands where the conv reads it, so the `torch.cat` of context and input disappears); its rows may be
strided, its time axis must be contiguous.

Channels-last data (the codec's channels-last decoder, `Qwen3TTSCodec.set_kernel_impl(channels_last=True)`:
[B, C, T] views of [B, T, C] memory, channel stride 1) runs a second kernel over [time block, channel block]
tiles, so its loads stay contiguous along the channels; `out` then must have channel stride 1 (its time and
batch strides may be anything: a view into a padded buffer or into a folded product's wider rows).
"""

from __future__ import annotations

import torch

from voxrt.engine.runtime.kernels import channels_last, check_impl, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _snake_kernel(x_ptr, alpha_ptr, inv_beta_ptr, bias_ptr, out_ptr, n_channels, n_time, x_batch_stride,
                      x_chan_stride, out_batch_stride, out_chan_stride, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)  # one (batch, channel) row
        b = row // n_channels
        c = row % n_channels
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = t < n_time
        x = tl.load(x_ptr + b * x_batch_stride + c * x_chan_stride + t, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            x = x + tl.load(bias_ptr + c).to(tl.float32)
        alpha = tl.load(alpha_ptr + c).to(tl.float32)
        inv_beta = tl.load(inv_beta_ptr + c).to(tl.float32)
        s = tl.sin(x * alpha)
        y = x + inv_beta * s * s
        tl.store(out_ptr + b * out_batch_stride + c * out_chan_stride + t, y.to(out_ptr.dtype.element_ty), mask=mask)


    @triton.jit
    def _snake_cl_kernel(x_ptr, alpha_ptr, inv_beta_ptr, bias_ptr, out_ptr, n_channels, n_time, x_batch_stride,
                         x_time_stride, out_batch_stride, out_time_stride, HAS_BIAS: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
        t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        b = tl.program_id(2).to(tl.int64)
        c_ok = c < n_channels
        mask = (t < n_time)[:, None] & c_ok[None, :]
        x = tl.load(x_ptr + b * x_batch_stride + t[:, None] * x_time_stride + c[None, :], mask=mask,
                    other=0.0).to(tl.float32)
        if HAS_BIAS:
            x = x + tl.load(bias_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        alpha = tl.load(alpha_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        inv_beta = tl.load(inv_beta_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        s = tl.sin(x * alpha)
        y = x + inv_beta * s * s
        tl.store(out_ptr + b * out_batch_stride + t[:, None] * out_time_stride + c[None, :],
                 y.to(out_ptr.dtype.element_ty), mask=mask)


def snake_beta_torch(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """The reference math: [B, C, T] with per-channel alpha and inv_beta [C] (in x's dtype, op by op)."""
    return x + inv_beta.to(x.dtype)[:, None] * torch.sin(x * alpha.to(x.dtype)[:, None]).pow(2)


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor, impl: str = "torch",
               out: torch.Tensor | None = None, in_bias: torch.Tensor | None = None) -> torch.Tensor:
    """[B, C, T] -> [B, C, T] (into `out` when given, which is returned)."""
    check_impl(impl)
    if x.dim() != 3 or alpha.shape != (x.shape[1],) or inv_beta.shape != (x.shape[1],):
        raise ValueError(f"snake_beta wants x [B, C, T] and alpha, inv_beta [C]; got {tuple(x.shape)}, "
                         f"{tuple(alpha.shape)}, {tuple(inv_beta.shape)}")
    if in_bias is not None and in_bias.shape != (x.shape[1],):
        raise ValueError(f"snake_beta's in_bias must be [C] = [{x.shape[1]}], got {tuple(in_bias.shape)}")
    if out is not None and out.shape != x.shape:
        raise ValueError(f"out {tuple(out.shape)} must have x's shape {tuple(x.shape)}")
    if impl == "torch":
        y = snake_beta_torch(x if in_bias is None else x + in_bias.to(x.dtype)[:, None], alpha, inv_beta)
        return y if out is None else out.copy_(y)
    batch, channels, time = x.shape
    cl = channels_last(x) if out is None else channels_last(out)
    if cl:
        if x.stride(1) != 1:
            x = x.transpose(1, 2).contiguous().transpose(1, 2)
        if out is None:
            out = x.new_empty(batch, time, channels).transpose(1, 2)
    else:
        if x.stride(-1) != 1:
            x = x.contiguous()
        if out is None:
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
        if out.stride(-1) != 1:
            raise ValueError("snake_beta's out must be contiguous along time or along the channels")
    if x.numel() == 0:
        return out
    bias = alpha if in_bias is None else in_bias.contiguous()  # (a placeholder pointer when there is none)
    if cl:
        block_c = min(256, max(16, triton.next_power_of_2(channels)))
        block_t = max(1, 4096 // block_c)
        _snake_cl_kernel[(triton.cdiv(time, block_t), triton.cdiv(channels, block_c), batch)](
            x, alpha.contiguous(), inv_beta.contiguous(), bias, out, channels, time, x.stride(0), x.stride(2),
            out.stride(0), out.stride(2), HAS_BIAS=in_bias is not None, BLOCK_T=block_t, BLOCK_C=block_c,
            num_warps=4)
        return out
    block = 1024 if time >= 1024 else max(16, triton.next_power_of_2(time))
    _snake_kernel[(batch * channels, triton.cdiv(time, block))](
        x, alpha.contiguous(), inv_beta.contiguous(), bias, out, channels, time, x.stride(0), x.stride(1),
        out.stride(0), out.stride(1), HAS_BIAS=in_bias is not None, BLOCK=block, num_warps=4)
    return out
