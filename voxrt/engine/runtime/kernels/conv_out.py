"""The codec's output layer in one pass: a causal conv to ONE channel, its bias, the clamp to [-1, 1] and the
cast to float32 (issue 14).

The Qwen3-TTS 12 Hz decoder ends with Conv1d(96 -> 1, kernel 7) over the full-rate waveform (1920 samples a
frame). cuDNN has no tensor-core algorithm for one output channel: on the H200 it ran its generic
`implicit_convolve_sgemm` for this conv, 4.5 ms of a 20.5 ms chunk of 25 frames x 16 requests (22%,
bench/results/2026-12-01-codec/profile.log), then two more elementwise passes clamped and cast. The conv is
a small weighted sum per sample (96 x 7 taps): here each program reads a block of samples of every channel
once (the taps' overlapping loads hit the cache), sums in float32 and writes the clamped float32 audio.

`padded` is the conv's input with its left context already in front ([B, C, T + K - 1], time contiguous:
`CausalConv.padded_input`), so the output is [B, T].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import check_impl, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _mono_conv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, n_channels, n_out, x_batch_stride, x_chan_stride,
                          out_batch_stride, KERNEL: tl.constexpr, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = t < n_out
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        row = x_ptr + b * x_batch_stride
        for c in range(n_channels):
            for k in tl.static_range(KERNEL):
                w = tl.load(w_ptr + c * KERNEL + k)
                x = tl.load(row + c * x_chan_stride + t + k, mask=mask, other=0.0).to(tl.float32)
                acc += w * x
        y = acc + tl.load(bias_ptr)
        y = tl.minimum(tl.maximum(y, -1.0), 1.0)
        tl.store(out_ptr + b * out_batch_stride + t, y, mask=mask)


def mono_conv_clamp_torch(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The reference ops: conv1d (no padding: `padded` holds the context), clamp, float32. -> [B, T]."""
    return F.conv1d(padded, weight.to(padded.dtype), bias.to(padded.dtype)).squeeze(1).clamp(min=-1, max=1).float()


def mono_conv_clamp(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, impl: str = "torch",
                    weight_f32: torch.Tensor | None = None, bias_f32: torch.Tensor | None = None) -> torch.Tensor:
    """[B, C, T + K - 1] with a [1, C, K] weight and [1] bias -> float32 [B, T] in [-1, 1].
    `weight_f32`, `bias_f32`: the weight as float32 [C, K] and the bias as float32 [1], precomputed once by the
    caller (made here when None: two small kernels more per call)."""
    check_impl(impl)
    if padded.dim() != 3 or weight.dim() != 3 or weight.shape[0] != 1 or weight.shape[1] != padded.shape[1] \
            or bias.shape != (1,):
        raise ValueError(f"mono_conv_clamp wants padded [B, C, T + K - 1], weight [1, C, K] and bias [1]; got "
                         f"{tuple(padded.shape)}, {tuple(weight.shape)}, {tuple(bias.shape)}")
    kernel = weight.shape[2]
    if padded.shape[2] < kernel:
        raise ValueError(f"padded input of {padded.shape[2]} samples is shorter than the kernel ({kernel})")
    if impl == "torch":
        return mono_conv_clamp_torch(padded, weight, bias)
    if padded.stride(-1) != 1:
        padded = padded.contiguous()
    batch, channels, length = padded.shape
    n_out = length - kernel + 1
    w = weight_f32 if weight_f32 is not None else weight.detach().float().reshape(channels, kernel).contiguous()
    b = bias_f32 if bias_f32 is not None else bias.detach().float()
    out = torch.empty(batch, n_out, dtype=torch.float32, device=padded.device)
    block = 1024 if n_out >= 1024 else max(16, triton.next_power_of_2(n_out))
    _mono_conv_kernel[(batch, triton.cdiv(n_out, block))](
        padded, w, b, out, channels, n_out, padded.stride(0), padded.stride(1), out.stride(0),
        KERNEL=kernel, BLOCK=block, num_warps=4)
    return out
