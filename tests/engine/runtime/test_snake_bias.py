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
