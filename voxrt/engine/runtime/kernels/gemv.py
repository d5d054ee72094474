"""Matrix-vector products for decode steps of a few rows, spread over the whole GPU, with the residual add
fused in.

At one or a few rows a projection is a weight stream: its time is the weight's bytes over the bandwidth the
kernel reaches. cuBLAS picks tiles for these shapes that leave most SMs idle (measured on the H200 for the
code predictor at one row: o_proj, 2048 -> 1024, 13.9 us in 16 thread blocks, 0.3 TB/s; qkv, 1024 -> 4096,
8.2 us in 64 blocks; bench/results/2026-12-01-frame). Here each program streams a BLOCK_N x K slice of the
weight in row-major BLOCK_N x BLOCK_K tiles (contiguous along K: wide vector loads), multiplies it by each row
of x elementwise and reduces along K once at the end; BLOCK_N is as narrow as it takes to run >= 2 programs
per SM. `residual`: out = residual + x @ w^T, written into `residual` in place (the o_proj / down_proj of a
layer add into the residual stream).

Which products take this kernel is measured, not guessed (bench/gpu_kernels.py on the H200, in CUDA graphs,
bench/results/2026-12-01-frame/kernels): at one row every projection of the 1.7B talker and predictor is
faster here (predictor o_proj 2.7 us against cuBLAS's 12.4, down 3.2 / 5.8, qkv 3.0 / 3.8, gate_up 3.3 / 4.8;
talker down 6.1 / 8.5, gate_up 11.2 / 12.9); at two rows only narrow outputs with a long K (o_proj, the
predictor's down); at four only the predictor's o_proj; beyond, cuBLAS everywhere (each row re-reads the
weight tile from registers here, so the kernel's time grows with the rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import check_impl, triton_available

MAX_ROWS = 4
TARGET_PROGRAMS = 256  # about two per SM on the H200 (132 SMs)


def prefers_gemv(rows: int, n: int, k: int) -> bool:
    """Whether this kernel beats cuBLAS for a [rows, k] x [k, n] product (the measured rule above)."""
    if rows == 1:
        return True
    if rows == 2:
        return n <= 2048 and 2048 <= k <= 3072
    return rows <= MAX_ROWS and n <= 1024 and k == 2048

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _gemv_kernel(x_ptr, w_ptr, out_ptr, N, K, x_stride, out_stride, ROWS: tl.constexpr,
                     RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = rn < N
        for m in tl.static_range(ROWS):
            acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                k_ok = rk < K
                w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
                x = tl.load(x_ptr + m * x_stride + rk, mask=k_ok, other=0.0)
                acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
            y = tl.sum(acc, axis=1)
            dst = out_ptr + m * out_stride + rn
            if RESIDUAL:
                y = y + tl.load(dst, mask=n_ok, other=0.0).to(tl.float32)
            tl.store(dst, y.to(out_ptr.dtype.element_ty), mask=n_ok)


def plan(n: int) -> int:
    """BLOCK_N: the widest power of two (4..32) that still gives TARGET_PROGRAMS programs."""
    block_n = 32
    while block_n > 4 and -(-n // block_n) < TARGET_PROGRAMS:
        block_n //= 2
    return block_n


def _launch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, residual: bool, block_k: int | None = None) -> None:
    m, k = x.shape
    n = w.shape[0]
    block_n = plan(n)
    if block_k is None:  # long rows in narrow tiles stream best in 512-wide steps (measured); wide tiles spill
        block_k = 512 if k >= 2048 and block_n <= 16 else 256
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, w, out, n, k, x.stride(0), out.stride(0), ROWS=m, RESIDUAL=residual,
                                              BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4)


def _fits(x: torch.Tensor, w: torch.Tensor, force: bool) -> bool:
    if not (x.dim() == 2 and x.shape[0] <= MAX_ROWS and x.stride(-1) == 1 and w.is_contiguous()):
        return False
    return force or prefers_gemv(x.shape[0], w.shape[0], w.shape[1])


def linear(x: torch.Tensor, w: torch.Tensor, impl: str = "torch", force: bool = False) -> torch.Tensor:
    """x [M, K] (rows may be strided) @ w [N, K]^T -> [M, N] in x's dtype. `force`: this kernel whenever the
    shape allows (tests), not only where it measured faster."""
    check_impl(impl)
    if impl == "torch" or not _fits(x, w, force):
        return F.linear(x, w)
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    _launch(x, w, out, residual=False)
    return out


def add_linear_(residual: torch.Tensor, x: torch.Tensor, w: torch.Tensor, impl: str = "torch",
                force: bool = False) -> None:
    """residual [M, N] += x [M, K] @ w [N, K]^T, in place (cuBLAS: `addmm_`, beta = 1)."""
    check_impl(impl)
    if impl == "torch" or not _fits(x, w, force) or not residual.is_contiguous():
        residual.addmm_(x, w.t())
        return
    _launch(x, w, residual, residual=True)
