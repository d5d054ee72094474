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

Two more things happen in the product where it saves a kernel. `rstd_eps`: the output is scaled by the row's
rstd(x) (the RMSNorm folded into the weight, kernels/norm.py; the kernel reads all of x anyway). `silu`: x is a
packed [gate | up] and the product's input is silu(gate) * up, computed tile by tile (the MLP's down
projection without the SiLU-gate kernel: `add_gated_mlp_`). With PDL (kernels/__init__.py) each program loads
its first weight tile, up to PREFETCH_ELEMENTS wide, before `gdc_wait()`: measured in a graph, a dependent
product of 2 MB took 3.05 us plainly and 1.60 us so (bench/gpu_pdl.py); in the frame's chains at one row a
16K-element first tile was the fastest (bench/results/2026-12-05-frame-inflight).

Above MAX_ROWS rows, with `VOXRT_SKINNY=1` (off by default), the products take a tensor-core kernel
(`_skinny_kernel`) instead of cuBLAS. Its first form (one program a BLOCK_M x BLOCK_N output tile over the whole K)
measured no faster than cuBLAS and 3-5x slower with the SiLU or rstd computed in its loop (bench/results/
2026-12-05-frame-pdl); since then it splits narrow outputs over K (`skinny_split_plan`: 64-column tiles, up to
SKINNY_SPLIT_K splits while the programs stay near two an SM), the tile's last program summing the partials in the
same kernel (no cuBLAS-style reduce kernel after it), and the gated MLP above MAX_ROWS runs plain products around
the SiLU-gate kernel. Why: without split-K (the engine's cuBLAS setting) the code predictor's o_proj and down at
64 rows ran at ~0.8 TB/s on an H100 (16 column tiles for 132 SMs). Measured on an H100 (bench/results/
2026-12-05-h100-splitk): every split output right (F.linear to 1e-4, the same bits each launch, counters back at
0), but no faster: each product costs >= ~5.5 us at 64 rows whatever its tiles, cuBLAS's included, and the frame
with these products was 20% slower at 64 rows (6.14 against 5.12 ms). So it stays off.

Triton does not software-pipeline a loop without `tl.dot`, so each program keeps one tile in flight; `PIPE`
loads the next tile before it multiplies this one (two in flight, the same sums in the same order). Measured
without PDL on the H200 it took 0.1 ms off the batch-1 frame (8 warps): not the default, one of the knobs of
`VOXRT_GEMV` (env_settings: the grid, the plain first tile, the pipeline, warps, the PDL first tile), which
bench/gpu_gemv_pdl.py and bench/gpu_frame_pdl.sh sweep.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from voxrt.engine.runtime import knobs

from voxrt.engine.runtime.kernels import (check_impl, interpreting, l2_prefetch_cap_bytes, l2_prefetch_enabled,
                                          next_pow2, pdl_args, skinny_enabled, triton_available)
from voxrt.engine.runtime.kernels.norm import rstd_torch, silu_mul

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
    def _x_tile(x_row_ptr, rk, k_ok, K, SILU: tl.constexpr):
        """Columns rk of one row of x (float32). SILU: the row is a packed [gate | up] of width 2K and x is
        silu(gate) * up, rounded to the activations' dtype as kernels/norm.py's `_silu_mul_kernel` rounds it."""
        if SILU:
            gate = tl.load(x_row_ptr + rk, mask=k_ok, other=0.0).to(tl.float32)
            up = tl.load(x_row_ptr + K + rk, mask=k_ok, other=0.0).to(tl.float32)
            x = (gate / (1.0 + tl.exp(-gate)) * up).to(x_row_ptr.dtype.element_ty).to(tl.float32)
        else:
            x = tl.load(x_row_ptr + rk, mask=k_ok, other=0.0).to(tl.float32)
        return x

    @triton.jit
    def _wx_tiles(w_ptr, x_row_ptr, rn, n_ok, k0, K, BLOCK_K: tl.constexpr, SILU: tl.constexpr):
        """The weight tile [BLOCK_N, BLOCK_K] at columns k0.. of rows rn, and x's matching columns (`_x_tile`);
        columns past K masked (no memory traffic)."""
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        return w, _x_tile(x_row_ptr, rk, k_ok, K, SILU)

    @triton.jit
    def _l2_prefetch(base_ptr, n_lines, pid, num_programs, ELEMS_PER_LINE: tl.constexpr, BLOCK_P: tl.constexpr):
        """Program `pid` of `num_programs` asks the L2 for its share of the n_lines 128-byte lines from base_ptr
        (`prefetch.global.L2`: nothing is loaded into registers and nothing waits for it)."""
        per = tl.cdiv(n_lines, num_programs)
        start = pid * per
        for i in range(0, per, BLOCK_P):
            line = tl.minimum(start + i + tl.arange(0, BLOCK_P), n_lines - 1)  # a line asked twice costs nothing
            ptrs = base_ptr + line.to(tl.int64) * ELEMS_PER_LINE
            tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                                      is_pure=False, pack=1)

    @triton.jit
    def _l2_prefetch_slice(w_ptr, rn, n_ok, k_lo, k_hi, K, BLOCK_K: tl.constexpr, LINES: tl.constexpr,
                           ELEMS_PER_LINE: tl.constexpr):
        """Asks the L2 for the weight rows rn, columns [k_lo, k_hi), one 128-byte line at a time (LINES lines a
        BLOCK_K step): the tensor-core product's own slice, before its PDL wait (no kernel writes weights)."""
        offs = tl.arange(0, LINES) * ELEMS_PER_LINE
        rows = tl.where(n_ok, rn, 0).to(tl.int64)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            ptrs = w_ptr + rows[:, None] * K + tl.minimum(k0 + offs, K - 1)[None, :]
            tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                                      is_pure=False, pack=1)

    @triton.jit
    def _gemv_kernel(x_ptr, w_ptr, out_ptr, N, K, x_stride, out_stride, eps, next_ptr, next_lines,
                     ROWS: tl.constexpr, RESIDUAL: tl.constexpr, RSTD: tl.constexpr, SILU: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FIRST_K: tl.constexpr, PDL: tl.constexpr,
                     PREFETCH: tl.constexpr = False, ELEMS_PER_LINE: tl.constexpr = 64,
                     BLOCK_P: tl.constexpr = 256, PIPE: tl.constexpr = False):
        """The first FIRST_K columns of the weight slice are loaded before `gdc_wait()` (no kernel of the frame
        writes weights: with PDL they stream while the previous kernel finishes, kernels/__init__.py), the rest
        in BLOCK_K tiles after it. RSTD: y scaled by the row's rstd(x) (the sum of squares gathered on the
        way through x, which the product reads whole anyway). SILU: see `_x_tile`."""
        rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = rn < N
        rk0 = tl.arange(0, FIRST_K)
        k0_ok = rk0 < K
        w0 = tl.load(w_ptr + rn[:, None] * K + rk0[None, :], mask=n_ok[:, None] & k0_ok[None, :], other=0.0)
        if PREFETCH:  # the next projection's weight, while this one streams (weights: no kernel writes them)
            _l2_prefetch(next_ptr, next_lines, tl.program_id(0), tl.num_programs(0), ELEMS_PER_LINE, BLOCK_P)
        if PDL:
            tl.extra.cuda.gdc_wait()  # every program reaches it: below, earlier kernels are complete
            tl.extra.cuda.gdc_launch_dependents()  # after the wait: one kernel ahead at most
        for m in tl.static_range(ROWS):
            x_row = x_ptr + m * x_stride
            x0 = _x_tile(x_row, rk0, k0_ok, K, SILU)
            part = w0.to(tl.float32) * x0[None, :]  # [BLOCK_N, FIRST_K]
            if FIRST_K == BLOCK_K:
                acc = part
            else:  # the wide first tile reduced on its own. Its former fold into the loop's tile (a reshape to
                # [BLOCK_N, FIRST_K // BLOCK_K, BLOCK_K], summed over the middle) made product chains 2.3-5x
                # slower on the H200, with PDL or without (bench/results/2026-12-05-frame-pdl); reduced on its own
                # it costs nothing (2026-12-05-frame-inflight: 16K elements without PDL as fast as the base)
                y_first = tl.sum(part, axis=1)  # [BLOCK_N]
                acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
            ss = tl.sum(x0 * x0, axis=0)
            if PIPE:  # the next tile's loads are issued before this tile's products: two tiles in flight
                w_next, x_next = _wx_tiles(w_ptr, x_row, rn, n_ok, FIRST_K, K, BLOCK_K, SILU)
                for k0 in range(FIRST_K, K, BLOCK_K):
                    w, x = w_next, x_next
                    # past the end on the last round: masked, no memory traffic
                    w_next, x_next = _wx_tiles(w_ptr, x_row, rn, n_ok, k0 + BLOCK_K, K, BLOCK_K, SILU)
                    acc += w.to(tl.float32) * x[None, :]
                    if RSTD:
                        ss += tl.sum(x * x, axis=0)
            else:
                for k0 in range(FIRST_K, K, BLOCK_K):
                    w, x = _wx_tiles(w_ptr, x_row, rn, n_ok, k0, K, BLOCK_K, SILU)
                    acc += w.to(tl.float32) * x[None, :]
                    if RSTD:
                        ss += tl.sum(x * x, axis=0)
            y = tl.sum(acc, axis=1)
            if FIRST_K != BLOCK_K:
                y = y + y_first
            if RSTD:
                y = y / tl.sqrt(ss / K + eps)
            dst = out_ptr + m * out_stride + rn
            if RESIDUAL:
                y = y + tl.load(dst, mask=n_ok, other=0.0).to(tl.float32)
            tl.store(dst, y.to(out_ptr.dtype.element_ty), mask=n_ok)

    @triton.jit
    def _skinny_kernel(x_ptr, w_ptr, out_ptr, M, N, K, x_stride, out_stride, eps, next_ptr, next_lines,
                       RESIDUAL: tl.constexpr, RSTD: tl.constexpr, SILU: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr, PDL: tl.constexpr,
                       PREFETCH: tl.constexpr, ELEMS_PER_LINE: tl.constexpr, BLOCK_P: tl.constexpr,
                       part_ptr=None, count_ptr=None, k_per=0, SPLIT_K: tl.constexpr = 1,
                       OWN_LINES: tl.constexpr = 1, OWN_LINE_ELEMS: tl.constexpr = 64):
        """The same product (RESIDUAL, RSTD, SILU as `_gemv_kernel`) for a few dozen rows, on tensor cores: a
        BLOCK_M x BLOCK_N tile of the output per program, K in BLOCK_K steps (software-pipelined by Triton).
        DOT_F32: both operands in float32, products exact (float32 inputs, and Triton's interpreter, whose
        bfloat16 dot is wrong: the tests' bf16 inputs widen exactly).

        SPLIT_K > 1 (plain and RESIDUAL forms only): program (n, m, s) multiplies the K columns
        [s * k_per, (s + 1) * k_per) and stores its float32 partial tile in `part_ptr`; the tile's last program
        to finish (a counter per tile at `count_ptr`, incremented with acquire-release at GPU scope after a
        barrier) sums the SPLIT_K partials in split order (deterministic), adds the residual, writes the output
        and sets the counter back to 0 for the next launch. One kernel: no workspace reduce kernel after it.

        PDL: before its wait the program asks the L2 for its own weight slice (OWN_LINES 128-byte lines a row a
        BLOCK_K step), so the stream starts while the previous kernel finishes. PDL reaches this kernel only with
        VOXRT_PDL=on (auto: <= 4 rows, where cuBLAS would sit between otherwise). Timed on an H100 with VOXRT_SKINNY=1
        VOXRT_PDL=on: the frame 1.5% faster at 8 rows, 21-30% slower at 64-128 (bench/results/2026-12-06-h100-split)."""
        pid_n, pid_m = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok, n_ok = rm < M, rn < N
        k_lo = 0
        k_hi = K
        if SPLIT_K > 1:
            k_lo = tl.program_id(2) * k_per
            k_hi = tl.minimum(K, k_lo + k_per)
        if PREFETCH:
            _l2_prefetch(next_ptr, next_lines, pid_m * tl.num_programs(0) + pid_n,
                         tl.num_programs(0) * tl.num_programs(1), ELEMS_PER_LINE, BLOCK_P)
        if PDL:
            # this program's weight slice streams into the L2 while the previous kernel finishes, as the one-row
            # kernel's first tile does; it did not take off the >= ~5.5 us each product costs at 64 rows (the frame
            # 21-30% slower at 64-128 rows than with cuBLAS, bench/results/2026-12-06-h100-split)
            _l2_prefetch_slice(w_ptr, rn, n_ok, k_lo, k_hi, K, BLOCK_K, OWN_LINES, OWN_LINE_ELEMS)
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
        x_rows = x_ptr + rm[:, None] * x_stride
        for k0 in range(k_lo, k_hi, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            k_ok = rk < K
            xm = m_ok[:, None] & k_ok[None, :]
            w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            if SILU:
                gate = tl.load(x_rows + rk[None, :], mask=xm, other=0.0).to(tl.float32)
                up = tl.load(x_rows + K + rk[None, :], mask=xm, other=0.0).to(tl.float32)
                x = (gate / (1.0 + tl.exp(-gate)) * up).to(w_ptr.dtype.element_ty)
            else:
                x = tl.load(x_rows + rk[None, :], mask=xm, other=0.0)
            if RSTD:
                xf = x.to(tl.float32)
                ss += tl.sum(xf * xf, axis=1)
            if DOT_F32:
                acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
            else:
                acc = tl.dot(x, tl.trans(w), acc)
        dst = out_ptr + rm[:, None] * out_stride + rn[None, :]
        om = m_ok[:, None] & n_ok[None, :]
        if SPLIT_K > 1:
            tile = pid_m * tl.num_programs(0) + pid_n
            cells = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            parts = part_ptr + tile.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
            tl.store(parts + tl.program_id(2) * (BLOCK_M * BLOCK_N) + cells, acc)
            tl.debug_barrier()  # every thread's partial is written before the counter moves
            done = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if done == SPLIT_K - 1:  # the tile's last program: the others' partials are visible to it
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in range(SPLIT_K):  # in split order, so every launch sums alike
                    acc += tl.load(parts + s * (BLOCK_M * BLOCK_N) + cells, cache_modifier=".cg")
                tl.store(count_ptr + tile, 0)
                if RESIDUAL:
                    acc = acc + tl.load(dst, mask=om, other=0.0).to(tl.float32)
                tl.store(dst, acc.to(out_ptr.dtype.element_ty), mask=om)
        else:
            if RSTD:
                acc = acc / tl.sqrt(ss / K + eps)[:, None]
            if RESIDUAL:
                acc = acc + tl.load(dst, mask=om, other=0.0).to(tl.float32)
            tl.store(dst, acc.to(out_ptr.dtype.element_ty), mask=om)


def plan(n: int, programs: int | None = None) -> int:
    """BLOCK_N: the widest power of two (4..32) that still gives `programs` (TARGET_PROGRAMS) programs."""
    programs = programs or TARGET_PROGRAMS
    block_n = 32
    while block_n > 4 and -(-n // block_n) < programs:
        block_n //= 2
    return block_n


PREFETCH_ELEMENTS = 16384  # weight elements a program loads before the PDL wait (32 KB in bf16): the chains' fastest
# at one row on the H100 (bench/results/2026-12-05-frame-inflight: 8192 and an ordinary tile were slower)
PLAIN_FIRST_ELEMENTS = 0  # without PDL: 0 = the first tile is an ordinary BLOCK_K one; else as wide as this allows
PIPELINE = False  # the loop issues the next tile's loads before this tile's products (two tiles in flight)
WARPS = 4  # warps a program
SKINNY_MAX_ROWS = 128  # the tensor-core product takes 5..128 rows when it is on (kernels.set_skinny)
SKINNY_TARGET_PROGRAMS = 128
SKINNY_MAX_MIN_DIM: int | None = None  # the tensor-core product only where min(N, K) <= this (None: every shape)
SKINNY_CONFIG: tuple[int, int, int, int, int] | None = None  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) for every
# shape instead of skinny_plan's (benchmarks: bench/gpu_gemv_pdl.py)
SKINNY_SPLIT_K = 16  # the most K splits a tensor-core product takes (1: none; VOXRT_GEMV=splitk=N): meant for a narrow
# output over a long K (the code predictor's o_proj and down: 16 column tiles at 64 rows); measured no faster than
# cuBLAS on the H100 (bench/results/2026-12-05-h100-splitk), like the tensor-core product itself
SPLIT_K_TARGET_PROGRAMS = 256  # split K while tiles x splits stays at or under this (about two programs an SM)
SPLIT_K_MIN_COLUMNS = 256  # and each split keeps at least this many columns of K
SPLIT_K_PARTIAL_FLOATS = 1 << 21  # the split-K workspace: float32 partial tiles (8 MB) and a counter per tile
SPLIT_K_TILES = 1 << 12


GEMV_KEYS = knobs.GEMV_KEYS


def env_settings(value: str | None = None) -> dict[str, int]:
    """`VOXRT_GEMV` (e.g. `programs=512,first=16384,pipe=1,warps=8`): the matrix-vector kernel's grid, plain first
    tile, pipelined loop, warps and (`pdlfirst`) first tile with PDL for this process, over the module's defaults
    (benchmarks and A/B runs; bench/gpu_gemv_pdl.py measures them). Read at each launch, so a graph captured
    afterwards takes the value of its capture. A bad value is a ValueError naming what is allowed (runtime/knobs.py)."""
    return knobs.gemv_settings(value)


def settings() -> tuple[int, int, bool, int, int]:
    """(TARGET_PROGRAMS, PLAIN_FIRST_ELEMENTS, PIPELINE, WARPS, PREFETCH_ELEMENTS): the module's values under
    VOXRT_GEMV's."""
    env = env_settings()
    return (env.get("programs", TARGET_PROGRAMS), env.get("first", PLAIN_FIRST_ELEMENTS),
            bool(env.get("pipe", PIPELINE)), env.get("warps", WARPS), env.get("pdlfirst", PREFETCH_ELEMENTS))


def _prefetch_args(nxt: torch.Tensor | None, device: torch.device) -> dict:
    """The kernels' arguments for an L2 prefetch of (at most l2_prefetch_cap_bytes() of) `nxt`, the next
    projection's weight, when it is on (kernels.l2_prefetch_enabled); a dummy pointer and PREFETCH=False if not."""
    if nxt is None or not l2_prefetch_enabled(device) or not nxt.is_contiguous() or nxt.device != device:
        return dict(next_ptr=None, next_lines=0, PREFETCH=False)
    nbytes = min(nxt.numel() * nxt.element_size(), l2_prefetch_cap_bytes())
    return dict(next_ptr=nxt, next_lines=max(1, nbytes // 128), PREFETCH=True, ELEMS_PER_LINE=128 // nxt.element_size())


def skinny_plan(m: int, n: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) of the tensor-core product: all rows in one tile up to 64, then 64-row
    tiles; BLOCK_N as wide as still gives SKINNY_TARGET_PROGRAMS programs (16..64)."""
    block_m = max(16, min(64, next_pow2(m)))
    tiles_m = -(-m // block_m)
    block_n = 64
    while block_n > 16 and -(-n // block_n) * tiles_m < SKINNY_TARGET_PROGRAMS:
        block_n //= 2
    return block_m, block_n, 128 if k >= 128 else max(16, next_pow2(k))


def skinny_split_plan(m: int, n: int, k: int, cap: int | None = None) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, splits) of a plain or residual tensor-core product: 64-column tiles split over
    K by split_k_plan (wide tiles re-read the rows of x fewest times: at 16 columns a 1024-wide output re-reads
    them 64 times); where that does not split (a wide output), skinny_plan's narrower tiles, unsplit."""
    block_m, _, block_k = skinny_plan(m, n, k)
    block_n = max(16, min(64, next_pow2(n)))
    splits = split_k_plan(m, n, k, block_m, block_n, block_k, cap)
    if splits == 1:
        return (*skinny_plan(m, n, k), 1)
    return block_m, block_n, block_k, splits


def split_k_fits(tiles: int, splits: int, block_m: int, block_n: int) -> bool:
    """Whether `tiles` output tiles split `splits` ways fit the split-K workspace (partials and counters)."""
    return tiles <= SPLIT_K_TILES and tiles * splits * block_m * block_n <= SPLIT_K_PARTIAL_FLOATS


def split_k_plan(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, cap: int | None = None) -> int:
    """How many K splits a tensor-core product of these tiles takes: doubled while the programs (tiles x splits)
    stay within SPLIT_K_TARGET_PROGRAMS, each split keeps SPLIT_K_MIN_COLUMNS (and a whole BLOCK_K step), the
    partial tiles fit the workspace and `cap` (SKINNY_SPLIT_K, or VOXRT_GEMV's splitk) allows; 1: no split."""
    cap = cap if cap is not None else settings_split_k()
    tiles = -(-m // block_m) * -(-n // block_n)
    splits = 1
    while (splits * 2 <= cap and tiles * splits * 2 <= SPLIT_K_TARGET_PROGRAMS
           and k // (splits * 2) >= max(SPLIT_K_MIN_COLUMNS, block_k)
           and split_k_fits(tiles, splits * 2, block_m, block_n)):
        splits *= 2
    return splits


def settings_split_k() -> int:
    """SKINNY_SPLIT_K under VOXRT_GEMV's `splitk`."""
    return env_settings().get("splitk", SKINNY_SPLIT_K)


_split_k_workspaces: dict[tuple[str, int | None], tuple[torch.Tensor, torch.Tensor]] = {}


def split_k_workspace(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The device's split-K workspace (float32 partial tiles, int32 counters at 0), made once and never freed:
    CUDA graphs keep its address. One per device is enough because every launch that uses it is the LM's, and the
    LM's kernels run one after another (one LM stream at a time; kernels/gemv.py is not used by the codec). A
    graph capture cannot make it (graphs.py warms every graph up outside capture first, which does)."""
    key = (device.type, device.index)
    ws = _split_k_workspaces.get(key)
    if ws is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the split-K workspace must be made before a CUDA graph capture: run the product "
                               "once outside capture (a warm-up) first")
        ws = (torch.empty(SPLIT_K_PARTIAL_FLOATS, dtype=torch.float32, device=device),
              torch.zeros(SPLIT_K_TILES, dtype=torch.int32, device=device))
        _split_k_workspaces[key] = ws
    return ws


def _launch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, residual: bool, rstd_eps: float | None = None,
            silu: bool = False, block_k: int | None = None, first_k: int | None = None,
            prefetch: torch.Tensor | None = None, pipe: bool | None = None) -> None:
    """`first_k` (tests: the PDL path's wide first tile, which the interpreter cannot run with PDL on).
    `pipe`: the loop's two-tiles-in-flight form (None: PIPELINE).
    `prefetch`: the next projection's weight, asked of the L2 while this product runs (where that is on)."""
    m, k = x.shape
    n = w.shape[0]
    if silu:
        k //= 2  # x is [gate | up]
    assert w.shape[1] == k, (tuple(x.shape), tuple(w.shape), silu)
    assert not (silu and rstd_eps is not None)
    pre = _prefetch_args(prefetch, x.device)
    if pre["next_ptr"] is None:
        pre["next_ptr"] = w  # never read: PREFETCH is off
    if m > MAX_ROWS:
        _launch_skinny(x, w, out, residual, rstd_eps, silu, pre)
        return
    programs, plain_first, pipeline, warps, pdl_first = settings()
    block_n = plan(n, programs)
    if block_k is None:  # long rows in narrow tiles stream best in 512-wide steps (measured); wide tiles spill
        block_k = 512 if k >= 2048 and block_n <= 16 else 256
    pdl = pdl_args(x.device, m)
    # with PDL the first tile is as wide as PREFETCH_ELEMENTS allows (the more weight streams before the wait,
    # the more of the previous kernel's tail it hides); without, the first tile is an ordinary one
    if first_k is None:
        first = pdl_first if pdl["PDL"] else plain_first
        first_k = max(block_k, min(next_pow2(k), first // block_n)) if first else block_k
    assert first_k % block_k == 0, (first_k, block_k)
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, w, out, n, k, x.stride(0), out.stride(0), rstd_eps or 0.0, ROWS=m, RESIDUAL=residual,
        RSTD=rstd_eps is not None, SILU=silu, BLOCK_N=block_n, BLOCK_K=block_k, FIRST_K=first_k,
        PIPE=pipeline if pipe is None else pipe, num_warps=warps, **pre, **pdl)


def _launch_skinny(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, residual: bool, rstd_eps: float | None,
                   silu: bool, pre: dict, config: tuple[int, int, int, int, int] | None = None,
                   split_k: int | None = None) -> None:
    """`config`: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), else skinny_plan's with 4 warps, 3 stages
    (bench/gpu_gemv_sweep.py measures the alternatives). `split_k`: K splits (None: split_k_plan's; the SiLU and
    rstd forms never split)."""
    m, k = x.shape[0], w.shape[1]
    n = w.shape[0]
    plain = not (silu or rstd_eps is not None)  # the activation forms reduce over the whole row: they do not split
    if config or SKINNY_CONFIG:
        bm, bn, bk, warps, stages = config or SKINNY_CONFIG
        if split_k is None:
            split_k = split_k_plan(m, n, k, bm, bn, bk) if plain else 1
    elif plain and split_k is None:
        bm, bn, bk, split_k = skinny_split_plan(m, n, k)
        warps, stages = 4, 3
    else:
        bm, bn, bk, warps, stages = (*skinny_plan(m, n, k), 4, 3)
        split_k = split_k or 1
    assert split_k == 1 or plain, "split-K takes the plain and residual forms only"
    grid = (triton.cdiv(n, bn), triton.cdiv(m, bm), split_k)
    extra = {}
    if split_k > 1:
        assert split_k_fits(grid[0] * grid[1], split_k, bm, bn), (grid, bm, bn)
        parts, counts = split_k_workspace(x.device)
        k_per = triton.cdiv(triton.cdiv(k, split_k), bk) * bk  # whole BLOCK_K steps a split
        extra = dict(part_ptr=parts, count_ptr=counts, k_per=k_per, SPLIT_K=split_k)
    line = 128 // w.element_size()  # elements a 128-byte line
    _skinny_kernel[grid](
        x, w, out, m, n, k, x.stride(0), out.stride(0), rstd_eps or 0.0, RESIDUAL=residual,
        RSTD=rstd_eps is not None, SILU=silu, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        DOT_F32=x.dtype == torch.float32 or interpreting(),
        num_warps=warps, num_stages=stages, BLOCK_P=256, **{"ELEMS_PER_LINE": 64, **pre}, **pdl_args(x.device, m),
        OWN_LINES=max(1, bk // line), OWN_LINE_ELEMS=line, **extra)


def _takes(rows: int, n: int, k: int, device: torch.device, force: bool) -> bool:
    """Whether this module's kernels take a [rows, k] x [k, n] product: the matrix-vector kernel at <= MAX_ROWS
    rows where it measured faster than cuBLAS (`force`: wherever the shape allows, for tests), the tensor-core
    kernel at up to SKINNY_MAX_ROWS rows where that is on (kernels.set_skinny / VOXRT_SKINNY)."""
    if rows <= MAX_ROWS and (force or prefers_gemv(rows, n, k)):
        return True
    return (MAX_ROWS < rows <= SKINNY_MAX_ROWS and k % 16 == 0 and skinny_enabled(device)
            and (SKINNY_MAX_MIN_DIM is None or min(n, k) <= SKINNY_MAX_MIN_DIM))


def _fits(x: torch.Tensor, w: torch.Tensor, force: bool) -> bool:
    if not (x.dim() == 2 and x.stride(-1) == 1 and w.is_contiguous()):
        return False
    return _takes(x.shape[0], w.shape[0], w.shape[1], x.device, force)


def linear(x: torch.Tensor, w: torch.Tensor, impl: str = "torch", force: bool = False,
           rstd_eps: float | None = None, prefetch: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (rows may be strided) @ w [N, K]^T -> [M, N] in x's dtype. `force`: this kernel whenever the
    shape allows (tests), not only where it measured faster. `rstd_eps`: each output row scaled by
    rstd(x row) = 1 / sqrt(mean(x^2) + eps) before the rounding (the RMSNorm folded into w, kernels/norm.py);
    the torch path rounds the product first, as `silu_mul(..., x=x)` sees it. `prefetch`: the weight of the
    product that runs next (an L2 prefetch while this one runs, where that is on; no effect on the result)."""
    check_impl(impl)
    if impl == "torch" or not _fits(x, w, force):
        y = F.linear(x, w)
        return y if rstd_eps is None else (y.float() * rstd_torch(x, rstd_eps)).to(y.dtype)
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    _launch(x, w, out, residual=False, rstd_eps=rstd_eps, prefetch=prefetch)
    return out


def add_linear_(residual: torch.Tensor, x: torch.Tensor, w: torch.Tensor, impl: str = "torch",
                force: bool = False, prefetch: torch.Tensor | None = None) -> None:
    """residual [M, N] += x [M, K] @ w [N, K]^T, in place (cuBLAS: `addmm_`, beta = 1)."""
    check_impl(impl)
    if impl == "torch" or not _fits(x, w, force) or not residual.is_contiguous():
        residual.addmm_(x, w.t())
        return
    _launch(x, w, residual, residual=True, prefetch=prefetch)


def takes_silu(residual: torch.Tensor, gate_up: torch.Tensor, w: torch.Tensor, impl: str, force: bool = False) -> bool:
    """Whether `add_silu_linear_` runs this kernel (else silu_mul's kernel and cuBLAS run)."""
    return (impl == "triton" and gate_up.dim() == 2 and gate_up.shape[-1] == 2 * w.shape[1]
            and residual.is_contiguous() and _fits(gate_up, w, force))


def add_silu_linear_(residual: torch.Tensor, gate_up: torch.Tensor, w: torch.Tensor, impl: str = "torch",
                     force: bool = False, prefetch: torch.Tensor | None = None) -> None:
    """residual [M, N] += (silu(gate) * up) @ w [N, I]^T for gate_up [M, 2I] = [gate | up]: the down
    projection of a SiLU-gated MLP with the activation computed in the product (no [M, I] activation
    tensor, one kernel less), where this kernel takes the product; else `silu_mul` then `addmm_`."""
    check_impl(impl)
    if not takes_silu(residual, gate_up, w, impl, force):
        residual.addmm_(silu_mul(gate_up, impl), w.t())
        return
    _launch(gate_up, w, residual, residual=True, silu=True, prefetch=prefetch)


def add_gated_mlp_(x: torch.Tensor, gate_up_w: torch.Tensor, down_w: torch.Tensor, eps: float, impl: str = "torch",
                   act_impl: str | None = None, force: bool = False, prefetch: torch.Tensor | None = None) -> None:
    """x [M, H] += (silu(g) * u) @ down_w [H, I]^T, [g | u] = rstd(x) * (x @ gate_up_w [2I, H]^T), in place: a
    Qwen3 MLP with its RMSNorm folded into gate_up_w (models/qwen3_tts/fused.py). Where both products take
    this kernel, two kernels: gate_up with the row's rstd applied in it, down with the activation computed in
    it. (The rstd cannot wait for the down product: that kernel writes x while its other programs would read
    the whole row.) Else three: product, `silu_mul` with the rstd (`act_impl`, default `impl`), product +
    residual. `prefetch`: the weight of the product after this MLP (gate_up prefetches down_w itself)."""
    # the rstd and SiLU computed in the products pay on the matrix-vector kernel (<= MAX_ROWS rows); in the
    # tensor-core one they stall its pipelined loads (3-5x slower, bench/results/2026-12-05-frame-pdl), so there
    # the three-kernel form runs, its products plain (and split over K)
    if (impl == "triton" and x.shape[0] <= MAX_ROWS and x.is_contiguous() and down_w.is_contiguous()
            and _fits(x, gate_up_w, force) and _takes(x.shape[0], down_w.shape[0], down_w.shape[1], x.device, force)):
        add_silu_linear_(x, linear(x, gate_up_w, impl, force, rstd_eps=eps, prefetch=down_w), down_w, impl, force,
                         prefetch=prefetch)
        return
    add_linear_(x, silu_mul(linear(x, gate_up_w, impl, force, prefetch=down_w), act_impl or impl, x=x, eps=eps),
                down_w, impl, force, prefetch=prefetch)
