"""A codec residual unit as one kernel (kernels/residual_unit.py): Triton's interpreter on the CPU against the
float32 reference (conv1 + b1, Snake, 1x1 conv + b2, residual), both layouts, in place; bad input refused."""

from __future__ import annotations

import pytest
import torch

from voxrt.engine.runtime.kernels.residual_unit import residual_unit, residual_unit_config
from voxrt.engine.runtime.kernels.snake import channels_last, snake_beta_torch


def _case(batch, channels, time, dilation, dtype, seed=0, kernel=7):
    g = torch.Generator().manual_seed(seed)
    padded = torch.randn(batch, channels, (kernel - 1) * dilation + time, generator=g)
    x = torch.randn(batch, channels, time, generator=g)
    taps = torch.randn(kernel, channels, channels, generator=g) / (channels * kernel) ** 0.5
    b1, b2 = torch.randn(channels, generator=g) * 0.1, torch.randn(channels, generator=g) * 0.1
    alpha, inv_beta = torch.rand(channels, generator=g) + 0.5, torch.rand(channels, generator=g) + 0.5
    w2 = torch.randn(channels, channels, generator=g) / channels ** 0.5
    return [v.to(dtype) for v in (padded, x, taps, b1, alpha, inv_beta, w2, b2)]


def _by_ops(padded, x, taps, b1, alpha, inv_beta, w2, b2, dilation):
    """The unit as the codec's layers compose it, op by op in float32."""
    h = torch.nn.functional.conv1d(padded.float(), taps.permute(1, 2, 0).float(), b1.float(), dilation=dilation)
    a = snake_beta_torch(h, alpha.float(), inv_beta.float())
    return x.float() + torch.nn.functional.conv1d(a, w2.float()[:, :, None], b2.float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 24, 37, 3), (1, 16, 1, 9), (2, 96, 70, 1), (1, 40, 130, 9)])
@pytest.mark.parametrize("layout", ["ncl", "cl"])
def test_triton_equals_the_reference(dtype, shape, layout):
    batch, channels, time, dilation = shape
    padded, x, taps, b1, alpha, inv_beta, w2, b2 = _case(batch, channels, time, dilation, dtype)
    expected = _by_ops(padded, x, taps, b1, alpha, inv_beta, w2, b2, dilation)
    if layout == "cl":
        padded, x = (v.transpose(1, 2).contiguous().transpose(1, 2) for v in (padded, x))
    ref = residual_unit(padded, x, taps, b1, alpha, inv_beta, w2, b2, dilation, "torch")
    tol = dict(atol=2e-4, rtol=2e-4) if dtype == torch.float32 else dict(atol=6e-2, rtol=3e-2)
    torch.testing.assert_close(ref.float(), expected, **tol)
    before = x.data_ptr()
    got = residual_unit(padded, x, taps, b1, alpha, inv_beta, w2, b2, dilation, "triton",
                        config=dict(BLOCK_T=32) if time > 32 else None)
    assert got.data_ptr() == before  # in place
    assert channels_last(got) == (layout == "cl" and channels > 1 and time > 1)
    torch.testing.assert_close(got.float(), expected, **tol)
    x0 = _case(batch, channels, time, dilation, dtype)[1]
    wide = torch.full((batch, channels, time + 5), 7.0, dtype=dtype)  # into a view of a wider buffer; x untouched
    put = residual_unit(padded, x0, taps, b1, alpha, inv_beta, w2, b2, dilation, "triton", out=wide[..., :time])
    torch.testing.assert_close(put.float(), expected, **tol)
    assert bool((wide[..., time:] == 7.0).all())
    torch.testing.assert_close(x0, _case(batch, channels, time, dilation, dtype)[1], atol=0, rtol=0)


def test_config_and_refusals():
    assert residual_unit_config(96) == dict(BLOCK_T=64, BLOCK_I=32, BLOCK_O=64, num_warps=4, num_stages=2)
    assert residual_unit_config(192)["num_warps"] == 8
    padded, x, taps, b1, alpha, inv_beta, w2, b2 = _case(1, 16, 10, 3, torch.float32)
    for impl in ("torch", "triton"):
        with pytest.raises(ValueError, match="more samples"):
            residual_unit(padded[..., 1:], x, taps, b1, alpha, inv_beta, w2, b2, 3, impl)
        with pytest.raises(ValueError, match="more samples"):
            residual_unit(padded, x, taps, b1[:8], alpha, inv_beta, w2, b2, 3, impl)
        with pytest.raises(ValueError, match="one dtype"):
            residual_unit(padded.double(), x, taps, b1, alpha, inv_beta, w2, b2, 3, impl)
        with pytest.raises(ValueError, match="out must be"):
            residual_unit(padded, x, taps, b1, alpha, inv_beta, w2, b2, 3, impl, out=x[..., 1:])
    wide = _case(1, 264, 4, 1, torch.float32)
    with pytest.raises(ValueError, match="up to 256 channels"):
        residual_unit(*wide, 1, "triton")
