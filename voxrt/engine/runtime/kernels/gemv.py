"""Skinny matrix products for decode steps: a few rows (the batch) times a weight matrix, spread over the
whole GPU.

At decode batch sizes a projection is a weight stream: its time is the weight's bytes over the bandwidth the
kernel reaches. cuBLAS picks tiles for these shapes that leave most SMs idle (measured on the H200 for the
code predictor: o_proj, 2048 -> 1024 at one row, 13.9 us in 16 thread blocks, 0.3 TB/s; qkv, 1024 -> 4096,
8.2 us in 64 blocks; bench/results/2026-12-01-frame). Here each program streams a BLOCK_N x K slice of the
weight (split along K too when N is small), so a projection runs in >= 2 programs per SM, and the product
with the rows is a tensor-core `tl.dot` over a 16-row padded block.

`linear(x, w)` returns x @ w^T in w's dtype. `linear_accumulate(out, x, w)` adds x @ w^T into `out`, a float32
residual stream, with atomic adds when the product is split along K (so the residual add costs nothing; the
order of the float32 additions may vary between runs). Rows beyond `MAX_ROWS` (prefill) go to cuBLAS.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import check_impl, next_pow2, triton_available

MAX_ROWS = 128  # more rows: a compute-shaped product, cuBLAS's tiles fit
TARGET_PROGRAMS = 264  # two per SM on the H200 (132 SMs)

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _skinny_kernel(x_ptr, w_ptr, out_ptr, M, N, K, x_stride, out_stride, k_per_split,
                       ACCUMULATE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        rm = tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rm < M
        col_ok = rn < N
        k_start = pid_k * k_per_split
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(k_start, k_start + k_per_split, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            k_ok = rk < K
            a = tl.load(x_ptr + rm[:, None] * x_stride + rk[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            acc += tl.dot(a.to(w_ptr.dtype.element_ty), b)
        dst = out_ptr + rm[:, None] * out_stride + rn[None, :]
        mask = row_ok[:, None] & col_ok[None, :]
        if ACCUMULATE:
            tl.atomic_add(dst, acc, mask=mask)
        else:
            tl.store(dst, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _plan(m: int, n: int, k: int, accumulate: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, split): enough programs to keep every SM streaming. A plain product
    cannot split K (its output is written once), so it narrows BLOCK_N instead."""
    block_m = max(16, next_pow2(m))
    block_k = 128
    block_n = 32
    while not accumulate and block_n > 16 and -(-n // block_n) < TARGET_PROGRAMS:
        block_n //= 2
    split = 1
    if accumulate:
        max_split = max(1, k // (2 * block_k))  # at least two BLOCK_K steps per program
        split = min(max_split, max(1, TARGET_PROGRAMS // -(-n // block_n)))
    return block_m, block_n, block_k, split


def _launch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
    m, k = x.shape
    n = w.shape[0]
    block_m, block_n, block_k, split = _plan(m, n, k, accumulate)
    k_per_split = -(-k // (split * block_k)) * block_k
    split = -(-k // k_per_split)
    _skinny_kernel[(triton.cdiv(n, block_n), split)](
        x, w, out, m, n, k, x.stride(0), out.stride(0), k_per_split, ACCUMULATE=accumulate, BLOCK_M=block_m,
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4, num_stages=3)


def _ok(x: torch.Tensor, w: torch.Tensor) -> bool:
    return x.dim() == 2 and x.shape[0] <= MAX_ROWS and x.stride(-1) == 1 and w.is_contiguous()


def linear(x: torch.Tensor, w: torch.Tensor, impl: str = "torch") -> torch.Tensor:
    """x [M, K] (any float dtype; rows may be strided) @ w [N, K]^T -> [M, N] in w's dtype."""
    check_impl(impl)
    if impl == "torch" or not _ok(x, w):
        return F.linear(x.to(w.dtype), w)
    out = torch.empty(x.shape[0], w.shape[0], dtype=w.dtype, device=x.device)
    _launch(x, w, out, accumulate=False)
    return out


def linear_accumulate(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, impl: str = "torch") -> None:
    """out [M, N] float32 += x [M, K] @ w [N, K]^T (the product in w's dtype, accumulated in float32)."""
    check_impl(impl)
    assert out.dtype == torch.float32, out.dtype
    if impl == "torch" or not _ok(x, w) or not out.is_contiguous():
        out += F.linear(x.to(w.dtype), w).float()
        return
    _launch(x, w, out, accumulate=True)
