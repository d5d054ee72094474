"""A dilated causal conv as one implicit-GEMM kernel: every tap summed in float32 in registers (issue 15).

The Qwen3-TTS 12 Hz decoder spends most of its FLOPs (3.5 of 5.0 GFLOP a frame, counted with torch's
FlopCounterMode on the released config) in the residual units' 7-tap dilated convs (dilation 1, 3, 9), and
those at 96 and 192 channels over 48,000 and 16,000 samples a 25-frame x 16 chunk ran at 118 and 182-246 TFLOPS
under cuDNN on the H200 (0.84 and 0.54-0.73 ms for 99 and 132 GFLOP; bench/results/2026-12-02-codec/
convs-25x16.log), against 446 at 768 channels: a small output dimension that cuDNN's tiles fit badly. The codec's other formulation, k cuBLAS
products (`CausalConv.set_products`), writes and re-reads the output once a tap and sums the taps in bf16.

Here one program computes a [BLOCK_O output channels, BLOCK_T samples] tile of one batch row: for each (tap k,
block of input channels) in one loop, acc += W_k[o, i] @ x[i, t + k * dilation] with `tl.dot` (tensor cores in bf16,
float32 accumulation); the taps' shifted windows overlap, so their loads hit the cache. `padded` is the conv's
input with its left context already in front ([B, C_in, (K - 1) * dilation + T], time contiguous:
`CausalConv.padded_input`), `taps` the weight as [K, C_out, C_in] (contiguous: `CausalConv`'s `taps` buffer),
so the output is [B, C_out, T] in `padded`'s dtype (channels-last when `padded` is: channel stride 1, as
in the codec's channels-last decoder; the kernel reads and writes through every stride). Block sizes: `tap_conv_config`, overridable per call
(bench/gpu_codec_convs.py times them); whether it beats cuDNN and the products is measured per shape before the
codec uses it (`CausalConv.set_products("timed")` with the kernel among the candidates).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import channels_last, check_impl, interpreting, next_pow2, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _tap_conv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, c_in, c_out, n_out, dilation,
                         x_batch_stride, x_chan_stride, x_time_stride, w_tap_stride, w_out_stride,
                         out_batch_stride, out_chan_stride, out_time_stride, KERNEL: tl.constexpr, HAS_BIAS: tl.constexpr, DOT_F32: tl.constexpr,
                         BLOCK_O: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_I: tl.constexpr):
        o = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
        t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
        b = tl.program_id(2).to(tl.int64)
        o_ok = o < c_out
        t_ok = t < n_out
        row = x_ptr + b * x_batch_stride
        acc = tl.zeros((BLOCK_O, BLOCK_T), dtype=tl.float32)
        # One loop over (tap, input-channel block) pairs: two tiles a pipeline stage (a static loop over the taps
        # inside would hold 2 x KERNEL tiles a stage, past the shared memory at 3 stages), and one long loop for
        # Triton's software pipeline rather than KERNEL short ones (3 channel blocks a tap at 96 channels).
        blocks = tl.cdiv(c_in, BLOCK_I)
        for step in range(0, KERNEL * blocks):
            k = step // blocks
            i = (step - k * blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
            i_ok = i < c_in
            w = tl.load(w_ptr + k * w_tap_stride + o[:, None] * w_out_stride + i[None, :],
                        mask=o_ok[:, None] & i_ok[None, :], other=0.0)
            x = tl.load(row + i[:, None] * x_chan_stride + (t[None, :] + k * dilation) * x_time_stride,
                        mask=i_ok[:, None] & t_ok[None, :], other=0.0)
            if DOT_F32:
                acc = tl.dot(w.to(tl.float32), x.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(w, x, acc)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + o, mask=o_ok, other=0.0).to(tl.float32)[:, None]
        dst = out_ptr + b * out_batch_stride + o[:, None] * out_chan_stride + t[None, :] * out_time_stride
        tl.store(dst, acc.to(out_ptr.dtype.element_ty), mask=o_ok[:, None] & t_ok[None, :])


def tap_conv_config(c_in: int, c_out: int, n_out: int) -> dict:
    """Block sizes and warps for a conv of this shape: an output-channel block covering up to 128 channels
    (96 -> 128 with the last quarter masked: the input tile is read once, not three times), 64 samples, input
    channels 32 at a time, 4 warps: of the block sizes bench/gpu_codec_convs.py tried on an H100 (25 x 32
    chunks on plain data, bench/results/2026-12-06-h100-codec-cl) the fastest or within 2% of it at every
    conv shape; the previous default (128 samples and 8 warps below 512 output channels) was 3-9% slower at
    96, 192 and 384 channels. The tap kernel's channels-last timings (0.72 ms at 96 channels) used these sizes
    too, except at 192 channels (64 output channels, 128 samples)."""
    block_o = min(128, max(16, next_pow2(c_out)))
    block_t = min(64, max(16, next_pow2(n_out)))
    block_i = 32 if c_in >= 32 else max(16, next_pow2(c_in))
    return dict(BLOCK_O=block_o, BLOCK_T=block_t, BLOCK_I=block_i, num_warps=4, num_stages=3)


def tap_conv_torch(padded: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor | None, dilation: int) -> torch.Tensor:
    """The reference: F.conv1d over the padded input (no padding of its own). taps: [K, C_out, C_in]."""
    weight = taps.permute(1, 2, 0).to(padded.dtype)  # [C_out, C_in, K]
    return F.conv1d(padded, weight, None if bias is None else bias.to(padded.dtype), dilation=dilation)


def tap_conv(padded: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor | None, dilation: int,
             impl: str = "triton", config: dict | None = None) -> torch.Tensor:
    """[B, C_in, (K - 1) * dilation + T] and taps [K, C_out, C_in] (+ bias [C_out]) -> [B, C_out, T]."""
    check_impl(impl)
    if padded.dim() != 3 or taps.dim() != 3 or taps.shape[2] != padded.shape[1] or dilation < 1 \
            or (bias is not None and bias.shape != (taps.shape[1],)):
        raise ValueError(f"tap_conv wants padded [B, C_in, context + T], taps [K, C_out, C_in], bias [C_out] or "
                         f"None and dilation >= 1; got {tuple(padded.shape)}, {tuple(taps.shape)}, "
                         f"{None if bias is None else tuple(bias.shape)}, {dilation}")
    kernel, c_out, c_in = taps.shape
    n_out = padded.shape[2] - (kernel - 1) * dilation
    if n_out < 1:
        raise ValueError(f"padded input of {padded.shape[2]} samples is shorter than the conv's reach "
                         f"({(kernel - 1) * dilation + 1})")
    if impl == "torch":
        return tap_conv_torch(padded, taps, bias, dilation)
    cl = channels_last(padded)
    if padded.stride(-1) != 1 and not cl:
        padded = padded.contiguous()
    taps = taps.to(padded.dtype).contiguous()
    batch = padded.shape[0]
    if cl:  # channels-last in, channels-last out (the codec's channels-last decoder)
        out = padded.new_empty(batch, n_out, c_out).transpose(1, 2)
    else:
        out = torch.empty(batch, c_out, n_out, dtype=padded.dtype, device=padded.device)
    cfg = dict(tap_conv_config(c_in, c_out, n_out), **(config or {}))
    grid = (triton.cdiv(c_out, cfg["BLOCK_O"]), triton.cdiv(n_out, cfg["BLOCK_T"]), batch)
    _tap_conv_kernel[grid](
        padded, taps, bias if bias is not None else taps, out, c_in, c_out, n_out, dilation,
        padded.stride(0), padded.stride(1), padded.stride(2), taps.stride(0), taps.stride(1), out.stride(0),
        out.stride(1), out.stride(2),
        KERNEL=kernel, HAS_BIAS=bias is not None,
        # float32 operands for float32 inputs, and in Triton's interpreter (its bf16 dot is wrong; bf16 widens exactly)
        DOT_F32=padded.dtype == torch.float32 or interpreting(), **cfg)
    return out
