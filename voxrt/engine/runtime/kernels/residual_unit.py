"""A residual unit of the Qwen3-TTS codec's decoder as one kernel: x += conv2(snake(conv1(padded) + b1)) + b2.

The decoder's residual units (codec_layers.ResidualUnit: Snake -> 7-tap dilated conv -> Snake -> 1x1 conv,
plus the residual) run at 96 and 192 channels over 48,000 and 16,000 samples a 25-frame x 16 chunk, where they
are bound by memory more than by arithmetic (a 96-channel unit is ~150 kFLOP a sample against ~1.5 kB a sample
moved as the folded path runs it: conv1 writes h, the second Snake reads h and writes the product's rows, the
product reads them and x and writes x). On the H200 the folded 96-channel unit took 1.06 ms a 25 x 16 chunk
(bench/results/2026-12-02-codec/folded), about 4x its traffic's floor.

Here one program owns BLOCK_T samples of one batch row and every channel (C <= 256): it sums conv1's taps over
the padded input (the first Snake already applied, the carried context in front: `CausalConv.padded_input`) in
float32, adds b1, applies the second Snake in registers, multiplies by W2 (one output-channel block at a time:
W2's tile is the only operand that grows with C squared) and adds b2 and the residual x, written in place. Nothing
between the two convs touches memory. The two products run on tensor cores in the input's dtype (bf16 on the
GPU) with float32 accumulation; h is not rounded to bf16 as the unfused path rounds it.

`padded` [B, C, context + T] and `x` [B, C, T] may be either layout (time contiguous, or channels-last: channel
stride 1, the codec's channels-last decoder); the kernel reads and writes through every stride. `taps` is
conv1's weight as [K, C_out, C_in] (`CausalConv`'s `taps` buffer), `w2` [C, C] (conv2's weight without its
kernel dimension), `b2` [C] (conv2's bias, plus any bias x is missing: the folded path's `w_out` column).
"""

from __future__ import annotations

import torch

from voxrt.engine.runtime.kernels import check_impl, interpreting, next_pow2, triton_available
from voxrt.engine.runtime.kernels.snake import snake_beta_torch

MAX_CHANNELS = 256  # the released decoder's 96- and 192-channel units; wider ones keep the unfused path

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _residual_unit_kernel(pad_ptr, x_ptr, out_ptr, w1_ptr, b1_ptr, alpha_ptr, inv_beta_ptr, w2_ptr, b2_ptr,
                              channels, n_out, dilation, pad_batch_stride, pad_chan_stride, pad_time_stride,
                              x_batch_stride, x_chan_stride, x_time_stride, out_batch_stride, out_chan_stride,
                              out_time_stride, w1_tap_stride, w1_out_stride, w2_out_stride,
                              KERNEL: tl.constexpr, C_PAD: tl.constexpr, DOT_F32: tl.constexpr,
                              BLOCK_T: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_O: tl.constexpr):
        t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        b = tl.program_id(1).to(tl.int64)
        t_ok = t < n_out
        c = tl.arange(0, C_PAD)
        c_ok = c < channels
        row = pad_ptr + b * pad_batch_stride
        # conv1: acc[t, o] = sum over (tap k, input block) of padded[t + k*d, i] @ W1_k[o, i]^T
        acc = tl.zeros((BLOCK_T, C_PAD), dtype=tl.float32)
        blocks = tl.cdiv(channels, BLOCK_I)
        for step in range(0, KERNEL * blocks):
            k = step // blocks
            i = (step - k * blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
            i_ok = i < channels
            xs = tl.load(row + (t[:, None] + k * dilation) * pad_time_stride + i[None, :] * pad_chan_stride,
                         mask=t_ok[:, None] & i_ok[None, :], other=0.0)
            w = tl.load(w1_ptr + k * w1_tap_stride + c[None, :] * w1_out_stride + i[:, None],
                        mask=i_ok[:, None] & c_ok[None, :], other=0.0)  # [BLOCK_I, C_PAD] = W1_k^T
            if DOT_F32:
                acc = tl.dot(xs.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(xs, w, acc)
        # + b1, the second Snake, in float32 (padded channels stay 0: alpha, inv_beta and b1 load as 0 there)
        h = acc + tl.load(b1_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        alpha = tl.load(alpha_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        inv_beta = tl.load(inv_beta_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        s = tl.sin(h * alpha)
        a = (h + inv_beta * s * s).to(w2_ptr.dtype.element_ty)
        if DOT_F32:
            a = a.to(tl.float32)
        # conv2 (1x1) + b2 + the residual, one block of output channels at a time
        xrow = x_ptr + b * x_batch_stride
        orow = out_ptr + b * out_batch_stride
        for ob in tl.static_range(0, C_PAD // BLOCK_O):
            o = ob * BLOCK_O + tl.arange(0, BLOCK_O)
            o_ok = o < channels
            w2 = tl.load(w2_ptr + o[None, :] * w2_out_stride + c[:, None],
                         mask=c_ok[:, None] & o_ok[None, :], other=0.0)  # [C_PAD, BLOCK_O] = W2[o, c]^T
            if DOT_F32:
                out = tl.dot(a, w2.to(tl.float32), input_precision="ieee")
            else:
                out = tl.dot(a, w2)
            out += tl.load(b2_ptr + o, mask=o_ok, other=0.0).to(tl.float32)[None, :]
            mask = t_ok[:, None] & o_ok[None, :]
            res = tl.load(xrow + t[:, None] * x_time_stride + o[None, :] * x_chan_stride, mask=mask,
                          other=0.0).to(tl.float32)
            tl.store(orow + t[:, None] * out_time_stride + o[None, :] * out_chan_stride,
                     (res + out).to(out_ptr.dtype.element_ty), mask=mask)


def residual_unit_config(channels: int) -> dict:
    """Block sizes: 64 samples a program, input channels 32 at a time, output channels of conv2 64 at a time
    (W2's tile [C_PAD, 64]); 8 warps past 128 channels. A first guess for the GPU to refine, not a measured
    choice."""
    c_pad = max(16, next_pow2(channels))
    return dict(BLOCK_T=64, BLOCK_I=min(32, c_pad), BLOCK_O=min(64, c_pad), num_warps=8 if c_pad > 128 else 4,
                num_stages=2)


def residual_unit_torch(padded: torch.Tensor, x: torch.Tensor, taps: torch.Tensor, b1: torch.Tensor,
                        alpha: torch.Tensor, inv_beta: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                        dilation: int) -> torch.Tensor:
    """The reference, in float32 (h unrounded, as the kernel keeps it): x + W2 @ snake(conv1(padded) + b1) + b2,
    returned as a new tensor in x's dtype."""
    weight = taps.permute(1, 2, 0).float()  # [C_out, C_in, K]
    h = torch.nn.functional.conv1d(padded.float(), weight, b1.float(), dilation=dilation)
    a = snake_beta_torch(h, alpha.float(), inv_beta.float())
    return (x.float() + torch.einsum("oc,bct->bot", w2.float(), a) + b2.float()[:, None]).to(x.dtype)


def residual_unit(padded: torch.Tensor, x: torch.Tensor, taps: torch.Tensor, b1: torch.Tensor, alpha: torch.Tensor,
                  inv_beta: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor, dilation: int, impl: str = "triton",
                  config: dict | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """x + w2 @ snake(conv1(padded) + b1) + b2: for "triton" into `out` (x's shape and dtype, any strides; x
    itself when None: in place), returned; "torch" returns a new tensor. padded [B, C, (K - 1) * dilation + T],
    x [B, C, T], taps [K, C, C], b1 / alpha / inv_beta / b2 [C], w2 [C, C]; C <= MAX_CHANNELS."""
    check_impl(impl)
    if padded.dim() != 3 or x.dim() != 3 or taps.dim() != 3:
        raise ValueError(f"residual_unit wants padded [B, C, context + T], x [B, C, T], taps [K, C, C]; got "
                         f"{tuple(padded.shape)}, {tuple(x.shape)}, {tuple(taps.shape)}")
    batch, channels, time = x.shape
    kernel = taps.shape[0]
    shapes_ok = (padded.shape[:2] == (batch, channels) and taps.shape[1:] == (channels, channels)
                 and padded.shape[2] == (kernel - 1) * dilation + time and w2.shape == (channels, channels)
                 and all(v.shape == (channels,) for v in (b1, alpha, inv_beta, b2)))
    if not shapes_ok or dilation < 1:
        raise ValueError(f"residual_unit: padded {tuple(padded.shape)} must be x's {tuple(x.shape)} with "
                         f"(K - 1) * dilation = {(kernel - 1) * dilation} more samples, taps [K, C, C], w2 [C, C], "
                         f"b1 / alpha / inv_beta / b2 [C] (C = {channels}), dilation >= 1 (got {dilation})")
    if padded.dtype != x.dtype:
        raise ValueError(f"residual_unit wants padded and x of one dtype, got {padded.dtype} and {x.dtype}")
    if channels > MAX_CHANNELS:
        raise ValueError(f"residual_unit runs up to {MAX_CHANNELS} channels, got {channels}")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype):
        raise ValueError(f"residual_unit's out must be x's shape and dtype {tuple(x.shape)} {x.dtype}, got "
                         f"{tuple(out.shape)} {out.dtype}")
    if impl == "torch":
        y = residual_unit_torch(padded, x, taps, b1, alpha, inv_beta, w2, b2, dilation)
        return y if out is None else out.copy_(y)
    out = x if out is None else out
    if time == 0 or batch == 0:
        return out
    cfg = dict(residual_unit_config(channels), **(config or {}))
    dtype = x.dtype
    taps = taps.to(dtype).contiguous()
    w2 = w2.to(dtype).contiguous()
    grid = (triton.cdiv(time, cfg["BLOCK_T"]), batch)
    _residual_unit_kernel[grid](
        padded, x, out, taps, b1.contiguous(), alpha.contiguous(), inv_beta.contiguous(), w2, b2.contiguous(),
        channels, time, dilation, padded.stride(0), padded.stride(1), padded.stride(2), x.stride(0), x.stride(1),
        x.stride(2), out.stride(0), out.stride(1), out.stride(2), taps.stride(0), taps.stride(1), w2.stride(0),
        KERNEL=kernel, C_PAD=max(16, next_pow2(channels)),
        # float32 operands for float32 inputs, and in Triton's interpreter (its bf16 dot is wrong; bf16 widens exactly)
        DOT_F32=dtype == torch.float32 or interpreting(), **cfg)
    return out
