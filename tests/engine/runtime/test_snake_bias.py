"""SnakeBeta with a folded input bias (the codec's folded decoder path): snake(x + b) per channel, in the
kernel (Triton's interpreter on the CPU) and in the torch ops, into a strided output view."""

from __future__ import annotations

import pytest
import torch

from voxrt.engine.runtime.kernels.snake import snake_beta, snake_beta_torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_snake_beta_in_bias_equals_adding_it_first(dtype):
    g = torch.Generator().manual_seed(4)
    alpha = torch.rand(5, generator=g) + 0.5
    inv_beta = torch.rand(5, generator=g) + 0.5
    bias = torch.randn(5, generator=g)
    x = torch.randn(2, 5, 1100, generator=g).to(dtype)
    expected = snake_beta_torch(x.float() + bias[:, None], alpha, inv_beta).to(dtype)  # float32 math
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(snake_beta(x, alpha, inv_beta, "triton", in_bias=bias.to(dtype)), expected, **tol)
    loose = tol if dtype == torch.float32 else dict(atol=6e-2, rtol=6e-2)  # the torch ops round per op
    torch.testing.assert_close(snake_beta(x, alpha, inv_beta, "torch", in_bias=bias.to(dtype)), expected, **loose)
    rows = torch.full((2, 5 + 8, 1100), 3.0, dtype=dtype)  # the folded product's input: C rows, then 8 more
    snake_beta(x, alpha, inv_beta, "triton", out=rows[:, :5], in_bias=bias.to(dtype))
    torch.testing.assert_close(rows[:, :5], expected, **tol)
    assert bool((rows[:, 5:] == 3.0).all())
    with pytest.raises(ValueError, match="in_bias"):
        snake_beta(x, alpha, inv_beta, "triton", in_bias=bias[:3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last_snake_reads_and_writes_through_the_strides(dtype):
    """Channels-last data ([B, C, T] over [B, T, C] memory: the codec's channels-last decoder): the second
    kernel, the same numbers; out channels-last whether given or made, into a padded buffer's tail and into a
    folded product's wider rows; plain x into a channels-last out converts x first."""
    from voxrt.engine.runtime.kernels.snake import channels_last

    g = torch.Generator().manual_seed(5)
    alpha, inv_beta, bias = torch.rand(40, generator=g) + 0.5, torch.rand(40, generator=g) + 0.5, torch.randn(40, generator=g)
    x = torch.randn(2, 40, 70, generator=g).to(dtype)
    expected = snake_beta_torch(x.float() + bias[:, None], alpha, inv_beta).to(dtype)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    cl = x.transpose(1, 2).contiguous().transpose(1, 2)
    made = snake_beta(cl, alpha, inv_beta, "triton", in_bias=bias.to(dtype))
    assert channels_last(made)
    torch.testing.assert_close(made, expected, **tol)
    padded = torch.full((2, 6 + 70, 40), 3.0, dtype=dtype).transpose(1, 2)  # context, then the activation
    snake_beta(cl, alpha, inv_beta, "triton", out=padded[..., 6:], in_bias=bias.to(dtype))
    torch.testing.assert_close(padded[..., 6:], expected, **tol)
    assert bool((padded[..., :6] == 3.0).all())
    rows = torch.full((2, 70, 40 + 8), 3.0, dtype=dtype).transpose(1, 2)  # C rows, then 8 more
    snake_beta(x, alpha, inv_beta, "triton", out=rows[:, :40], in_bias=bias.to(dtype))  # plain x, cl out
    torch.testing.assert_close(rows[:, :40], expected, **tol)
    assert bool((rows[:, 40:] == 3.0).all())
    with pytest.raises(ValueError, match="contiguous along time or along the channels"):
        snake_beta(x, alpha, inv_beta, "triton", out=torch.empty(2, 70, 40, 2, dtype=dtype)[..., 0].transpose(1, 2))
