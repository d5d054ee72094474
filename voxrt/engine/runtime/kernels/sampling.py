"""Gumbel-max sampling of one code per row, with per-row temperature / top-k / top-p, in one kernel that can
also write the next step's input row (the embedding of the sampled code).

The rule (both implementations): greedy rows take the argmax of the (suppressed) logits. Others scale by the
temperature; top-k keeps x when fewer than k kept values are strictly greater (ties at the boundary stay);
top-p keeps x when the probability mass of the kept values strictly greater than x is below p (the top value
always stays); then `argmax(scaled + g)` over the kept values with Gumbel noise `g = -log(-log(u))` from the
uniforms `u` the caller draws (`torch.rand` inside a CUDA graph draws fresh numbers on every replay). This is
`runtime/sampling.py`'s rule with the noise drawn in vocabulary order instead of sorted order.

The Triton kernel finds the top-k and top-p thresholds without sorting: a search over the order-preserving
integer image of the float32 scores that splits [min, max] into 4 at each of 17 rounds (the 3 inner
candidates' masked counts or sums over the row held in registers in one reduction per round, 17 reductions
where a bisection needs 32; more candidates per round would spill registers). One program per row; the row
must fit one block (codec vocabularies: 2048-4096).

`VOXRT_SAMPLER_SEARCH` (read at each launch) picks the search: `radix` by default (below), or `rounds` (the
search above), `sort` or `rounds16`. `VOXRT_SAMPLER_SEARCH=sort` finds the same thresholds
with one `tl.sort` of the row's scores instead: the k-th largest kept score is the top-k threshold, and the
first sorted score where the cumulative sum of the sorted probabilities reaches p is the top-p one. Same kept
set, same codes (tests/engine/runtime/test_kernels.py runs both against the torch rule); NOT yet timed on a
GPU against the rounds (bench/gpu_kernels.py's sampler rows `*_sort_w*_us`).

`VOXRT_SAMPLER_SEARCH=rounds16`: the same rounds, but the top-k threshold is searched over the 16-bit image of
the bfloat16 logits instead of the 32-bit image of the scaled float32 scores: 9 rounds instead of 17. The kept set
is the same: scaling by the row's rstd and dividing by the temperature (both > 0) maps distinct bfloat16 values to
distinct float32 scores in the same order (a relative gap of at least 2^-8 survives two roundings of 2^-24), so
the k-th largest score is the image of the k-th largest logit and ties are the same ties. That holds while every
kept score is a normal float or zero and finite; a row where one is not (a checked reduction) takes the 17
rounds. Float32 logits always take the 17 rounds. NOT yet timed on a GPU: its first form failed to compile with
the GPU image's Triton 3.6 (bench/results/2026-12-05-frame-pdl/; tests/engine/runtime/test_pdl_kernels.py
compiles every search for sm90 on the CPU now, and reproduces that failure with Triton 3.6).

`VOXRT_SAMPLER_SEARCH=radix` (the default): the top-k threshold by a radix select instead of the rounds (`_radix_kth`): 8 bits
a pass from the top, each pass one masked 256-bin histogram of the digits of the keys still in play and its
reversed cumulative sum, so 2 passes over the 16-bit image of bfloat16 logits (where rounds16 may use it) and 4
over the 32-bit one, against the rounds' 9 or 17, each of which is several block-wide reductions: on the H200
a top-k-50 draw took 16 us at one row against 3.3 us for temperature alone (2026-12-03-frame-attn), so the
search is most of it. Top-p keeps the rounds (a histogram counts; it does not sum probabilities). Checked in the
interpreter against the torch rule at the top-k boundary itself (tests/engine/runtime/test_kernels.py) and
compiled for sm90 with Triton 3.6 and the installed one (test_pdl_kernels.py). Timed on an H100
(bench/results/2026-12-05-h100/, bench/gpu_frame_pdl.sh `tune`): a top-k-50 draw 9.6 / 11.9 us against the
rounds' 14.9 / 19.9 (vocabulary 2048 / 3072, one row; the same ratio at 64), every draw equal to the torch rule,
and the Qwen3-TTS frame 2.2-2.9% shorter at batch 1-128 with it: hence the default. Not yet timed on the H200.

With `x` (the rows the logits were projected from, when the final RMSNorm is folded into the head:
kernels/norm.py), the logits are first scaled by each row's rstd(x).
"""

from __future__ import annotations

import torch

from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.kernels import check_impl, next_pow2, pdl_args, triton_available
from voxrt.engine.runtime.kernels.norm import _rows, rstd_torch
from voxrt.engine.runtime.sampling import apply_repetition_penalty

SEARCHES = knobs.SAMPLER_SEARCHES  # how the Triton kernel finds the top-k / top-p thresholds (module docstring)
DEFAULT_SEARCH = knobs.DEFAULT_SAMPLER_SEARCH  # fastest measured (module docstring); bench/pick_tuned.py's
# COMMITTED_SEARCH must match


def default_warps(vocab: int) -> int:
    """The kernel's warps when the caller names none: `VOXRT_SAMPLER_WARPS`, else 8 from a 2048-code vocabulary
    up (each row's reductions spread over more threads), 4 below. Timed on an H100 (bench/results/2026-12-05-h100/
    tune/kernels.json, a top-k-50 radix draw): vocabulary 2048, 8 warps 8.17 / 8.39 us at 1 / 64 rows against 4's
    9.52 / 10.03; temperature alone 3.25 / 3.47 against 3.96 / 4.15; vocabulary 3072 8 warps as before (11.95 /
    12.2 against 4's 16.44 / 17.22). The code predictor draws 15 codes of its 2048 a frame. In an H100's frame: ~10
    against ~15.2 us a draw at 64 and 128 rows, the frame 0.07-0.09 ms shorter (bench/results/
    2026-12-07-h100-kernel-defaults/). In an H200's frame 16 warps took 12.25 against 8's 11.94 us a draw at 64 rows
    (bench/results/2026-12-07-h200-frame-ws/)."""
    return knobs.sampler_warps() or (8 if vocab >= 2048 else 4)


def sampler_search() -> str:
    """`VOXRT_SAMPLER_SEARCH` (`radix`, the default, `rounds`, `sort` or `rounds16`), read at each launch, so a
    graph captured afterwards takes the value of its capture (parsed in runtime/knobs.py)."""
    return knobs.sampler_search()

if triton_available():
    import triton
    import triton.language as tl

    from voxrt.engine.runtime.kernels.norm import row_rstd

    @triton.jit
    def _threshold(key, keep, weight, target, rounds):
        """The smallest integer K with sum(weight over kept keys > K) < target (weights >= 0, the sum at the
        lowest kept key - 1 is >= target): 4 candidates per round, each round shrinks [lo, hi] 4-fold, so 17
        rounds take the 2^32-wide integer range down to one step (9 a 2^16-wide one)."""
        # keys are int32 (no kept key is INT32_MIN, so lo does not wrap); the arithmetic on the bounds is int64
        lo = tl.min(tl.where(keep, key, 2147483647), axis=0).to(tl.int64) - 1
        hi = tl.max(tl.where(keep, key, -2147483647), axis=0).to(tl.int64)
        j = tl.arange(0, 4).to(tl.int64)
        for _ in range(rounds):
            mids = lo + ((hi - lo) * (j + 1)) // 4  # [4], mids[3] == hi
            above = keep[None, :] & (key[None, :] > mids.to(tl.int32)[:, None])  # [4, V]
            total = tl.sum(tl.where(above, weight[None, :], 0.0), axis=1)  # [4], non-increasing
            first = tl.sum((total >= target).to(tl.int32), axis=0)  # the first candidate under target
            new_hi = tl.sum(tl.where(j == first, mids, 0), axis=0)
            lo = tl.where(first > 0, tl.sum(tl.where(j == first - 1, mids, 0), axis=0), lo)
            hi = new_hi
        return hi

    @triton.jit
    def _radix_kth(key, keep, k, ok16):
        """The k-th largest kept key (1 <= k <= the kept count; `VOXRT_SAMPLER_SEARCH=radix`): a radix select, 8
        bits a pass from the top, each pass one masked 256-bin histogram of the digits of the keys still in play,
        its count from the top (`cumsum`, reversed), and the digit where that count reaches the rank left. 4
        passes over the 32-bit ordered image; 2 over the 16-bit one when `ok16` (the bfloat16 logits' image,
        whose order the scores keep: module docstring). The result is the key itself (the largest of the keys
        left in play, all equal to it), so its threshold compares in the keys' own order."""
        bins = tl.arange(0, 256)
        # unsigned order: the 16-bit keys (signed, [-2^15, 2^15)) offset, the 32-bit ones' sign bit flipped
        ukey = tl.where(ok16, key + 32768, key ^ -2147483648)
        passes = tl.where(ok16, 2, 4)
        inplay = keep
        rank = k
        for p in range(passes):
            shift = (passes - 1 - p) * 8
            digit = (ukey >> shift) & 255  # (an arithmetic shift: the mask drops the sign's copies)
            hist = tl.histogram(digit, 256, mask=inplay)  # [256] int32
            at_least = tl.cumsum(hist, axis=0, reverse=True)  # in play with a digit >= each bin
            d = tl.max(tl.where(at_least >= rank, bins, -1), axis=0)  # the k-th largest's digit
            rank -= tl.sum(tl.where(bins == d, at_least - hist, 0), axis=0)  # less those with a larger digit
            inplay = inplay & (digit == d)
        return tl.max(tl.where(inplay, key, -2147483647), axis=0)

    @triton.jit
    def _sorted_cut(scaled, keep, cols, top_k, do_k, top_p, do_p):
        """`keep` cut by top-k (when do_k) then top-p (when do_p), the thresholds read off the row's scores sorted
        descending (`VOXRT_SAMPLER_SEARCH=sort`). The row holds at least one kept score; dropped ones are -inf."""
        ordered = tl.sort(scaled, descending=True)  # [V]: kept scores first, the -inf ones (dropped, padding) last
        # top-k: fewer than k kept values are strictly greater than x iff x >= the k-th largest (ties stay)
        kth = tl.max(tl.where(cols == top_k - 1, ordered, float("-inf")), axis=0)
        lowest = tl.where(do_k, kth, float("-inf"))
        keep = keep & (scaled >= lowest)
        if do_p:
            kept = (ordered > float("-inf")) & (ordered >= lowest)  # a prefix of `ordered`
            e = tl.where(kept, tl.exp(ordered - tl.max(ordered, axis=0)), 0.0)
            mass = tl.cumsum(e / tl.sum(e, axis=0), axis=0)  # [V]: the mass of the sorted values up to each
            # the first sorted value whose mass reaches p stays (the mass above it is below p), the next does not;
            # values tied with it stay by `>=` (the mass strictly greater than them is no more than its own)
            last = tl.sum(kept.to(tl.int32), axis=0) - 1
            first = tl.min(tl.where(kept & (mass >= top_p), cols, last), axis=0)
            cut = tl.max(tl.where(cols == first, ordered, float("-inf")), axis=0)
            keep = keep & (scaled >= cut)
        return keep

    @triton.jit
    def _sample_kernel(logits_ptr, l_stride, n_vocab, u_ptr, u_stride, temp_ptr, topk_ptr, topp_ptr, greedy_ptr,
                       suppress_ptr, out_ptr, out_stride, table_ptr, t_stride, next_ptr, n_stride, n_hidden,
                       table2_ptr, t2_stride, next2_ptr, n2_stride, n_hidden2,
                       x_ptr, x_stride, n_x, x_eps, hist_ptr, h_stride, pen_ptr, stop_ptr, eos_ptr,
                       HAS_SUPPRESS: tl.constexpr, HAS_NEXT: tl.constexpr,
                       HAS_X: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_X: tl.constexpr,
                       SORT: tl.constexpr, PDL: tl.constexpr, KEY16: tl.constexpr = False,
                       RADIX: tl.constexpr = False, HAS_NEXT2: tl.constexpr = False, CODE0: tl.constexpr = False):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_V)
        valid = cols < n_vocab
        if HAS_SUPPRESS:
            banned = tl.load(suppress_ptr + cols, mask=valid, other=1).to(tl.int32)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()  # after the wait: one kernel ahead at most
        x = tl.load(logits_ptr + row * l_stride + cols, mask=valid, other=float("-inf")).to(tl.float32)
        if KEY16:
            x16 = x  # the logits as loaded (bfloat16, exact in float32), before any scaling
        if HAS_X:
            x = x * row_rstd(x_ptr + row * x_stride, n_x, x_eps, BLOCK_X)
        if CODE0:  # code 0's processors (`sample_codes`' `history`): repetition penalty, EOS before frame 2
            plain = tl.load(hist_ptr + row * h_stride + cols, mask=valid, other=0).to(tl.int32)
            tagged = tl.load(hist_ptr + row * h_stride + n_vocab + cols, mask=valid, other=0).to(tl.int32)
            pen = tl.load(pen_ptr + row)
            x = tl.where((plain | tagged) != 0, tl.where(x > 0, tl.math.div_rn(x, pen), x * pen), x)  # (IEEE, as torch)
            past1 = tl.max(tagged, axis=0) != 0  # frame 1's code is in the history: frame 2 or later
            no_eos = (past1 == 0) | (tl.load(stop_ptr + row).to(tl.int32) == 0)
            is_eos = tl.load(eos_ptr + cols, mask=valid, other=0).to(tl.int32) != 0
            x = tl.where(no_eos & is_eos, float("-inf"), x)
            frame1 = (tl.max(plain, axis=0) != 0) & (past1 == 0)
        if HAS_SUPPRESS:
            x = tl.where(banned != 0, float("-inf"), x)
        is_greedy = tl.load(greedy_ptr + row).to(tl.int32)
        if is_greedy != 0:
            choice = tl.argmax(x, axis=0)
        else:
            scaled = x / tl.load(temp_ptr + row)
            keep = scaled > float("-inf")
            bits = scaled.to(tl.int32, bitcast=True)
            key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # int32, ordered like the floats
            top_k = tl.load(topk_ptr + row)
            num_kept = tl.sum(keep.to(tl.int32), axis=0)
            top_p = tl.load(topp_ptr + row)
            if SORT:
                do_k = (top_k > 0) & (top_k < num_kept)
                do_p = top_p < 1.0
                if do_k | do_p:
                    keep = _sorted_cut(scaled, keep, cols, top_k, do_k, top_p, do_p)
            else:
                if (top_k > 0) & (top_k < num_kept):  # keep x when fewer than top_k kept values are greater
                    ones = tl.where(keep, 1.0, 0.0)
                    search_key = key
                    rounds = 17
                    ok16 = tl.full((), 0, tl.int1)  # the 16-bit image (KEY16, below) is not used
                    if KEY16:  # the scores keep the logits' order when every kept one is finite and normal or zero
                        mag = tl.abs(scaled)
                        big = tl.max(tl.where(keep, mag, 0.0), axis=0)
                        small = tl.min(tl.where(keep & (mag > 0.0), mag, 1.0), axis=0)
                        ok16 = (big < float("inf")) & (small >= 1.1754943508222875e-38)
                        # the logits' 16 bits, ordered: the top half of the ordered image of their exact float32
                        raw = x16.to(tl.int32, bitcast=True)
                        key16 = tl.where(raw >= 0, raw, raw ^ 0x7FFFFFFF) >> 16
                        search_key = tl.where(ok16, key16, key)
                        rounds = tl.where(ok16, 9, 17)
                    if RADIX:
                        keep = keep & (search_key >= _radix_kth(search_key, keep, top_k.to(tl.int32), ok16))
                    else:
                        # one call site: two inlined searches in sibling branches broke Triton 3.6's compile
                        # ("operand does not dominate this use"; tests/engine/runtime/test_pdl_kernels.py
                        # reproduces it on a CPU)
                        keep = keep & (search_key >= _threshold(search_key, keep, ones, top_k.to(tl.float32) - 0.5,
                                                                rounds))
                if top_p < 1.0:  # keep x when the mass of the kept values greater than x is below top_p
                    e = tl.where(keep, tl.exp(scaled - tl.max(tl.where(keep, scaled, float("-inf")), axis=0)), 0.0)
                    probs = e / tl.sum(e, axis=0)
                    keep = keep & (key >= _threshold(key, keep, probs, top_p, 17))
            u = tl.load(u_ptr + row * u_stride + cols, mask=valid, other=0.5)
            u = tl.minimum(tl.maximum(u, 1e-20), 1.0 - 1e-7)
            score = tl.where(keep, scaled - tl.log(-tl.log(u)), float("-inf"))
            choice = tl.argmax(score, axis=0)
        if CODE0:
            choice = choice + n_vocab * frame1.to(tl.int32)  # frame 1's code tagged by the vocabulary
        tl.store(out_ptr + row * out_stride, choice.to(tl.int64))
        if HAS_NEXT:
            for h0 in range(0, n_hidden, BLOCK_H):
                hcols = h0 + tl.arange(0, BLOCK_H)
                hmask = hcols < n_hidden
                vals = tl.load(table_ptr + choice.to(tl.int64) * t_stride + hcols, mask=hmask)
                tl.store(next_ptr + row * n_stride + hcols, vals.to(next_ptr.dtype.element_ty), mask=hmask)
        if HAS_NEXT2:  # a second row of the chosen code (the code predictor's next layer-0 q/k/v)
            for h0 in range(0, n_hidden2, BLOCK_H):
                hcols = h0 + tl.arange(0, BLOCK_H)
                hmask = hcols < n_hidden2
                vals = tl.load(table2_ptr + choice.to(tl.int64) * t2_stride + hcols, mask=hmask)
                tl.store(next2_ptr + row * n2_stride + hcols, vals.to(next2_ptr.dtype.element_ty), mask=hmask)


def _keep_torch(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The kept set of each row [B, V] bool, by the rule in the module docstring."""
    vocab = scaled.shape[-1]
    keep = scaled > float("-inf")
    num_kept = keep.sum(-1)
    sorted_desc = scaled.sort(dim=-1, descending=True).values
    k = torch.where((top_k > 0) & (top_k < num_kept), top_k, torch.full_like(top_k, vocab))
    kth = sorted_desc.gather(-1, (k - 1).clamp(max=vocab - 1)[:, None])  # [B, 1]
    keep = keep & ((scaled >= kth) | (k == vocab)[:, None])
    masked = scaled.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(masked, dim=-1)
    ascending, order = masked.sort(dim=-1)
    cumulative = probs.gather(-1, order).cumsum(-1)  # mass of values <= each sorted value
    num_le = torch.searchsorted(ascending.contiguous(), masked.contiguous(), right=True)  # [B, V]
    mass_le = cumulative.gather(-1, (num_le - 1).clamp(min=0))
    mass_gt = cumulative[:, -1:] - mass_le
    return keep & ((mass_gt < top_p[:, None]) | (top_p >= 1.0)[:, None])


def sample_codes(logits: torch.Tensor, uniform: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor, greedy: torch.Tensor, out: torch.Tensor, suppress: torch.Tensor | None = None,
                 next_table: torch.Tensor | None = None, next_out: torch.Tensor | None = None,
                 impl: str = "torch", x: torch.Tensor | None = None, x_eps: float = 1e-6,
                 num_warps: int | None = None, search: str | None = None,
                 next2_table: torch.Tensor | None = None, next2_out: torch.Tensor | None = None,
                 history: torch.Tensor | None = None, penalty: torch.Tensor | None = None,
                 allow_stop: torch.Tensor | None = None, eos_mask: torch.Tensor | None = None) -> None:
    """logits [B, V]; uniform [B, V] float32 in (0, 1); temperature, top_p [B] float32; top_k [B] int64
    (0: off); greedy [B] bool; out [B] int64 (a strided column is fine) <- the codes. With `next_table`
    [V, H]: next_out [B, H] <- next_table[code] (and with `next2_table` [V, H2] too: next2_out [B, H2] <-
    next2_table[code]). With `x` [B, H]: logits scaled by rstd(x) per row first.
    With `history` [B, 2V] bool (and `penalty` [B] float32, `allow_stop` [B] bool, `eos_mask` [V] bool): the
    processors of Qwen3-TTS's code 0 first, in the reference's order (models/qwen3_tts/program.py,
    `sample_first_code`): the repetition penalty over the codes in either half of the history, EOS masked while
    the row has no frame-1 mark (the upper half) or may not stop, then the draw; the code of frame 1 (a mark in the
    lower half only) comes out shifted by V. In the Triton kernel that is one launch instead of ~18.
    `search`: the Triton kernel's threshold search, one of `SEARCHES` (None: `VOXRT_SAMPLER_SEARCH`); `num_warps`
    (None: `default_warps`)."""
    check_impl(impl)
    rows = x
    code0 = history is not None
    if code0 and (penalty is None or allow_stop is None or eos_mask is None or next_table is not None):
        raise ValueError("history goes with penalty, allow_stop and eos_mask, and without next_table")
    if impl == "torch":
        x = logits.float()
        if rows is not None:
            x = x * rstd_torch(rows, x_eps)
        if code0:
            vocab = x.shape[-1]
            plain, tagged = history[:, :vocab], history[:, vocab:]
            x = apply_repetition_penalty(x, plain | tagged, penalty)
            past1 = tagged.any(dim=-1)
            x = x.masked_fill((~past1 | ~allow_stop)[:, None] & eos_mask[None, :], float("-inf"))
        if suppress is not None:
            x = x.masked_fill(suppress, float("-inf"))
        scaled = x / temperature[:, None]
        keep = _keep_torch(scaled, top_k, top_p)
        noise = -torch.log(-torch.log(uniform.clamp(min=1e-20, max=1.0 - 1e-7)))
        sampled = scaled.add(noise).masked_fill(~keep, float("-inf")).argmax(-1)
        codes = torch.where(greedy, x.argmax(-1), sampled)
        if code0:
            codes = codes + vocab * (plain.any(dim=-1) & ~past1)
        out.copy_(codes)
        if next_table is not None:
            next_out.copy_(next_table[codes])
        if next2_table is not None:
            next2_out.copy_(next2_table[codes])
        return
    bsz, vocab = logits.shape
    assert logits.stride(-1) == 1 and uniform.stride(-1) == 1
    if search is None:
        search = sampler_search()  # validated there
    elif search not in SEARCHES:
        raise ValueError(f"unknown sampler search {search!r}; expected one of {', '.join(SEARCHES)}")
    has_next = next_table is not None
    hidden = next_table.shape[1] if has_next else 0
    has_next2 = next2_table is not None
    hidden2 = next2_table.shape[1] if has_next2 else 0
    assert has_next or not has_next2, "next2_table goes with next_table"
    x2 = _rows(rows) if rows is not None else logits
    if code0:
        assert history.shape == (bsz, 2 * vocab) and history.stride(-1) == 1 and eos_mask.shape == (vocab,)
    _sample_kernel[(bsz,)](
        logits, logits.stride(0), vocab, uniform, uniform.stride(0), temperature, top_k, top_p, greedy,
        suppress if suppress is not None else logits, out, out.stride(0),
        next_table if has_next else logits, next_table.stride(0) if has_next else 0,
        next_out if has_next else logits, next_out.stride(0) if has_next else 0, hidden,
        next2_table if has_next2 else logits, next2_table.stride(0) if has_next2 else 0,
        next2_out if has_next2 else logits, next2_out.stride(0) if has_next2 else 0, hidden2,
        x2, x2.stride(0), x2.shape[-1], x_eps, history if code0 else logits, history.stride(0) if code0 else 0,
        penalty if code0 else logits, allow_stop if code0 else logits, eos_mask if code0 else logits,
        CODE0=code0, HAS_SUPPRESS=suppress is not None, HAS_NEXT=has_next,
        HAS_NEXT2=has_next2, HAS_X=rows is not None, BLOCK_V=next_pow2(vocab),
        BLOCK_H=min(1024, next_pow2(max(hidden, hidden2, 1))),
        BLOCK_X=next_pow2(x2.shape[-1]), SORT=search == "sort", num_warps=num_warps or default_warps(vocab),
        # (not with code 0's penalty: it reorders the scores, so the logits' 16-bit image no longer ranks them)
        KEY16=search in ("rounds16", "radix") and logits.dtype == torch.bfloat16 and not code0,
        RADIX=search == "radix",
        **pdl_args(logits.device, bsz))
