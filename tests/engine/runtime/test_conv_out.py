"""The codec's output layer kernel (kernels/conv_out.py): a causal conv to one channel, bias, clamp, float32.
The Triton kernel (Triton's interpreter on the CPU) equals the torch ops, which are the reference decoder's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels.conv_out import mono_conv_clamp


def _case(batch: int, channels: int, time: int, kernel: int, dtype: torch.dtype, scale: float = 1.0, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    padded = (torch.randn(batch, channels, time + kernel - 1, generator=g) * scale).to(dtype)
    weight = (torch.randn(1, channels, kernel, generator=g) / (channels * kernel) ** 0.5).to(dtype)
    bias = torch.randn(1, generator=g).to(dtype) * 0.1
    return padded, weight, bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 5, 37, 7), (1, 3, 1, 7), (3, 4, 1030, 3), (2, 6, 20, 1)])
def test_triton_equals_torch(dtype, shape):
    padded, weight, bias = _case(*shape, dtype=dtype, scale=3.0)  # scale 3: many samples past the clamp
    want = mono_conv_clamp(padded, weight, bias, "torch")
    got = mono_conv_clamp(padded, weight, bias, "triton")
    assert got.shape == (shape[0], shape[2]) and got.dtype == torch.float32
    # float32: the same sum in another order; bf16: the kernel sums in float32, torch's conv in bf16
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(got, want, **tol)
    assert got.abs().max() <= 1.0 and (got.abs() == 1.0).any()  # the clamp bites


def test_torch_path_is_the_reference_ops():
    padded, weight, bias = _case(2, 4, 50, 7, torch.float32)
    want = F.conv1d(padded, weight, bias).squeeze(1).clamp(-1, 1)
    torch.testing.assert_close(mono_conv_clamp(padded, weight, bias), want, atol=0, rtol=0)


def test_strided_rows_and_precomputed_float32_weights():
    padded, weight, bias = _case(2, 4, 40, 7, torch.bfloat16)
    wide = torch.zeros(2, 6, 46, dtype=torch.bfloat16)
    wide[:, 1:5] = padded
    view = wide[:, 1:5]  # rows strided, time contiguous: what a padded view into a bigger buffer looks like
    got = mono_conv_clamp(view, weight, bias, "triton", weight.float().reshape(4, 7).contiguous(), bias.float())
    torch.testing.assert_close(got, mono_conv_clamp(padded, weight, bias, "triton"), atol=0, rtol=0)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_bad_shapes_are_refused(impl):
    padded, weight, bias = _case(1, 4, 10, 7, torch.float32)
    with pytest.raises(ValueError, match="mono_conv_clamp wants"):
        mono_conv_clamp(padded, weight.repeat(2, 1, 1), bias, impl)  # two output channels
    with pytest.raises(ValueError, match="mono_conv_clamp wants"):
        mono_conv_clamp(padded[:, :3], weight, bias, impl)  # channels differ
    with pytest.raises(ValueError, match="shorter than the kernel"):
        mono_conv_clamp(padded[..., :5], weight, bias, impl)
    with pytest.raises(ValueError, match="unknown kernel implementation"):
        mono_conv_clamp(padded, weight, bias, "cuda")
