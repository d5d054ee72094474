"""Paged attention reference (TorchAttention) on CPU, float32, against dense per-sequence causal attention.

Sequences live on shuffled, non-contiguous pages of a KVCache; prefill, decode, chunked prefill and the
static (graph-bucket) variant with padding rows must all match dense GQA attention, and K/V must land at
(pages[pos // page_size], pos % page_size), padding writing only into the scratch page."""

from __future__ import annotations

import math

import pytest
import torch

from voxrt.engine.runtime.attention import KVCache, SeqSlice, TorchAttention, bytes_per_page

CPU = torch.device("cpu")
NUM_PAGES, PAGE_SIZE, KV_HEADS, Q_HEADS, HEAD_DIM = 32, 4, 2, 4, 8
LENGTHS = [5, 1, 11]
ATOL = 1e-5


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pages_for(n_tokens: int) -> int:
    return -(-n_tokens // PAGE_SIZE)


class Seq:
    """One sequence's full q/k/v up to `final_len` tokens and the (shuffled) pages reserved for it."""

    def __init__(self, final_len: int, pages: list[int]) -> None:
        self.q = torch.randn(final_len, Q_HEADS, HEAD_DIM)
        self.k = torch.randn(final_len, KV_HEADS, HEAD_DIM)
        self.v = torch.randn(final_len, KV_HEADS, HEAD_DIM)
        self.pages = pages
        self.dense = dense_attention(self.q, self.k, self.v)

    def slice(self, start: int, end: int) -> SeqSlice:
        # only the pages needed so far: the page list grows as the sequence does
        return SeqSlice(self.pages[: pages_for(end)], end - start, end)


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA over one whole sequence: q [L, Hq, D], k/v [L, Hkv, D] -> [L, Hq, D]; q head h uses kv
    head h // (Hq / Hkv) (transformers' repeat_kv)."""
    length = q.shape[0]
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def make_seqs(lengths: list[int], final_lengths: list[int] | None = None, seed: int = 0) -> list[Seq]:
    final_lengths = final_lengths or lengths
    perm = torch.randperm(NUM_PAGES, generator=torch.Generator().manual_seed(seed)).tolist()
    seqs, at = [], 0
    for final in final_lengths:
        n = pages_for(final)
        seqs.append(Seq(final, perm[at : at + n]))
        at += n
    assert at <= NUM_PAGES
    return seqs


def make_kv(num_layers: int = 1, garbage: bool = True) -> KVCache:
    kv = KVCache(num_layers, NUM_PAGES, PAGE_SIZE, KV_HEADS, HEAD_DIM, CPU, torch.float32)
    if garbage:  # stale contents of freed pages: must never leak into attention
        for layer in kv.layers:
            layer.normal_(std=10.0)
    return kv


def run_step(ctx: TorchAttention, seqs: list[Seq], ranges: list[tuple[int, int, int]], layer: int = 0,
             pad_to: int | None = None) -> list[torch.Tensor]:
    """ranges: (seq index, start, end) of the new tokens. Returns each range's outputs."""
    ctx.fill([seqs[i].slice(s, e) for i, s, e in ranges])
    q = torch.cat([seqs[i].q[s:e] for i, s, e in ranges])
    k = torch.cat([seqs[i].k[s:e] for i, s, e in ranges])
    v = torch.cat([seqs[i].v[s:e] for i, s, e in ranges])
    n = q.shape[0]
    if pad_to is not None:  # a graph bucket runs max_tokens rows, padding holds whatever the buffers held
        extra = pad_to - n
        q = torch.cat([q, torch.randn(extra, Q_HEADS, HEAD_DIM) * 100])
        k = torch.cat([k, torch.randn(extra, KV_HEADS, HEAD_DIM) * 100])
        v = torch.cat([v, torch.randn(extra, KV_HEADS, HEAD_DIM) * 100])
    out = ctx.forward(layer, q, k, v)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all()
    return list(out[:n].split([e - s for _, s, e in ranges]))


def eager(kv: KVCache, max_seqs: int = 8, max_tokens: int = 64) -> TorchAttention:
    return TorchAttention(kv, max_seqs=max_seqs, max_tokens=max_tokens, max_pages_per_seq=None, device=CPU)


def prefill_ranges(seqs: list[Seq], lengths: list[int]) -> list[tuple[int, int, int]]:
    return [(i, 0, length) for i, length in enumerate(lengths)]


def assert_matches_dense(outs, seqs, ranges):
    for out, (i, s, e) in zip(outs, ranges):
        torch.testing.assert_close(out, seqs[i].dense[s:e], atol=ATOL, rtol=0)


def assert_kv_written(kv: KVCache, seqs: list[Seq], upto: list[int], layer: int = 0):
    cache = kv.layers[layer]
    for seq, n in zip(seqs, upto):
        for pos in range(n):
            page, off = seq.pages[pos // PAGE_SIZE], pos % PAGE_SIZE
            assert torch.equal(cache[page, 0, off], seq.k[pos]), (page, off)
            assert torch.equal(cache[page, 1, off], seq.v[pos]), (page, off)


# --- the reference itself -----------------------------------------------------------------------------------------


def test_dense_reference_agrees_with_sdpa():
    seq = Seq(11, [0])
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        seq.q.transpose(0, 1), seq.k.transpose(0, 1), seq.v.transpose(0, 1), is_causal=True, enable_gqa=True)
    torch.testing.assert_close(seq.dense, sdpa.transpose(0, 1), atol=ATOL, rtol=0)


def test_pages_are_shuffled_and_disjoint():
    seqs = make_seqs(LENGTHS)
    all_pages = [p for s in seqs for p in s.pages]
    assert len(set(all_pages)) == len(all_pages)
    assert seqs[2].pages != sorted(seqs[2].pages) or any(b != a + 1 for a, b in zip(seqs[2].pages, seqs[2].pages[1:]))


def test_kvcache_layout():
    kv = KVCache(3, NUM_PAGES, PAGE_SIZE, KV_HEADS, HEAD_DIM, CPU, torch.float16)
    assert kv.scratch_page == NUM_PAGES
    assert len(kv.layers) == 3
    assert kv.layers[0].shape == (NUM_PAGES + 1, 2, PAGE_SIZE, KV_HEADS, HEAD_DIM)
    assert kv.num_bytes == 3 * (NUM_PAGES + 1) * 2 * PAGE_SIZE * KV_HEADS * HEAD_DIM * 2
    assert bytes_per_page(3, PAGE_SIZE, KV_HEADS, HEAD_DIM, torch.float16) * (NUM_PAGES + 1) == kv.num_bytes


# --- eager ------------------------------------------------------------------------------------------------------------


def test_prefill_matches_dense():
    seqs = make_seqs(LENGTHS)
    kv = make_kv()
    ranges = prefill_ranges(seqs, LENGTHS)
    outs = run_step(eager(kv), seqs, ranges)
    assert_matches_dense(outs, seqs, ranges)
    assert_kv_written(kv, seqs, LENGTHS)


def test_prefill_writes_kv_only_at_its_slots():
    seqs = make_seqs(LENGTHS)
    kv = make_kv()
    before = kv.layers[0].clone()
    run_step(eager(kv), seqs, prefill_ranges(seqs, LENGTHS))
    written = torch.zeros(NUM_PAGES + 1, PAGE_SIZE, dtype=torch.bool)
    for seq, n in zip(seqs, LENGTHS):
        for pos in range(n):
            written[seq.pages[pos // PAGE_SIZE], pos % PAGE_SIZE] = True
    after = kv.layers[0]
    assert torch.equal(after.permute(0, 2, 1, 3, 4)[~written], before.permute(0, 2, 1, 3, 4)[~written])
    assert_kv_written(kv, seqs, LENGTHS)


def test_decode_steps_match_dense_with_page_growth():
    steps = 6  # 5 -> 11 crosses a page edge at 8, 1 -> 7 at 4, 11 -> 17 at 12 and 16
    finals = [n + steps for n in LENGTHS]
    seqs = make_seqs(LENGTHS, finals)
    kv = make_kv()
    ctx = eager(kv)  # one context refilled every step, as the runner does
    run_step(ctx, seqs, prefill_ranges(seqs, LENGTHS))
    for step in range(steps):
        ranges = [(i, n + step, n + step + 1) for i, n in enumerate(LENGTHS)]
        outs = run_step(ctx, seqs, ranges)
        assert_matches_dense(outs, seqs, ranges)
    assert_kv_written(kv, seqs, finals)


def test_decode_single_sequence_and_reordered_batch():
    seqs = make_seqs(LENGTHS, [n + 2 for n in LENGTHS])
    kv = make_kv()
    ctx = eager(kv)
    run_step(ctx, seqs, prefill_ranges(seqs, LENGTHS))
    # batch rows in a different order than at prefill: the page table, not the row, names the sequence
    ranges = [(2, 11, 12), (0, 5, 6), (1, 1, 2)]
    assert_matches_dense(run_step(ctx, seqs, ranges), seqs, ranges)
    ranges = [(1, 2, 3)]
    assert_matches_dense(run_step(ctx, seqs, ranges), seqs, ranges)


def test_chunked_prefill_equals_one_shot():
    seqs = make_seqs(LENGTHS)
    kv_one = make_kv(garbage=False)
    one = run_step(eager(kv_one), seqs, prefill_ranges(seqs, LENGTHS))

    kv_chunked = make_kv(garbage=False)
    ctx = eager(kv_chunked)
    first = [(i, 0, min(3, n)) for i, n in enumerate(LENGTHS)]
    rest = [(i, min(3, n), n) for i, n in enumerate(LENGTHS) if n > 3]
    outs_first = run_step(ctx, seqs, first)
    outs_rest = run_step(ctx, seqs, rest)
    assert_matches_dense(outs_first, seqs, first)
    assert_matches_dense(outs_rest, seqs, rest)

    for i, n in enumerate(LENGTHS):
        chunked = torch.cat([outs_first[i]] + [o for o, (j, _, _) in zip(outs_rest, rest) if j == i])
        torch.testing.assert_close(chunked, one[i], atol=ATOL, rtol=0)
    assert torch.equal(kv_chunked.layers[0], kv_one.layers[0])


def test_chunked_prefill_mixed_with_decode():
    # one step carrying a prefill chunk of one sequence and a decode token of another
    seqs = make_seqs([3, 5], [9, 6])
    kv = make_kv()
    ctx = eager(kv)
    run_step(ctx, seqs, [(0, 0, 3), (1, 0, 5)])
    ranges = [(0, 3, 9), (1, 5, 6)]
    assert_matches_dense(run_step(ctx, seqs, ranges), seqs, ranges)
    assert_kv_written(kv, seqs, [9, 6])


def test_layers_are_independent():
    seqs = make_seqs(LENGTHS)
    kv = make_kv(num_layers=2)
    layer0 = kv.layers[0].clone()
    ranges = prefill_ranges(seqs, LENGTHS)
    outs = run_step(eager(kv), seqs, ranges, layer=1)
    assert_matches_dense(outs, seqs, ranges)
    assert torch.equal(kv.layers[0], layer0)
    assert_kv_written(kv, seqs, LENGTHS, layer=1)


# --- static (graph bucket) ------------------------------------------------------------------------------------------


def static(kv: KVCache, max_seqs: int, max_tokens: int, max_pages_per_seq: int = 8) -> TorchAttention:
    return TorchAttention(kv, max_seqs=max_seqs, max_tokens=max_tokens, max_pages_per_seq=max_pages_per_seq,
                          device=CPU)


def written_mask(seqs: list[Seq], ranges) -> torch.Tensor:
    written = torch.zeros(NUM_PAGES + 1, PAGE_SIZE, dtype=torch.bool)
    for i, s, e in ranges:
        for pos in range(s, e):
            written[seqs[i].pages[pos // PAGE_SIZE], pos % PAGE_SIZE] = True
    return written


def assert_only_written_changed(before: torch.Tensor, after: torch.Tensor, written: torch.Tensor):
    """Real pages: only `written` slots changed; the scratch page may change anywhere."""
    real = torch.zeros(NUM_PAGES + 1, PAGE_SIZE, dtype=torch.bool)
    real[:NUM_PAGES] = True
    untouched = real & ~written
    b, a = before.permute(0, 2, 1, 3, 4), after.permute(0, 2, 1, 3, 4)  # [pages, ps, 2, Hkv, D]
    assert torch.equal(a[untouched], b[untouched])


@pytest.mark.parametrize("padded", [False, True])
def test_static_prefill_matches_eager_and_padding_hits_scratch_only(padded):
    seqs = make_seqs(LENGTHS)
    ranges = prefill_ranges(seqs, LENGTHS)
    kv_eager = make_kv()
    ref = run_step(eager(kv_eager), seqs, ranges)

    kv = make_kv()
    before = kv.layers[0].clone()
    max_tokens = 24  # 17 real tokens + 7 padding rows
    ctx = static(kv, max_seqs=6, max_tokens=max_tokens)
    outs = run_step(ctx, seqs, ranges, pad_to=max_tokens if padded else None)
    assert_matches_dense(outs, seqs, ranges)
    for a, b in zip(outs, ref):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)

    assert_only_written_changed(before, kv.layers[0], written_mask(seqs, ranges))
    assert_kv_written(kv, seqs, LENGTHS)
    if padded:  # padding rows write at the scratch page, offset 0, and nowhere else
        scratch_b, scratch_a = before[kv.scratch_page], kv.layers[0][kv.scratch_page]
        assert not torch.equal(scratch_a[:, 0], scratch_b[:, 0])
        assert torch.equal(scratch_a[:, 1:], scratch_b[:, 1:])
    else:
        assert torch.equal(kv.layers[0][kv.scratch_page], before[kv.scratch_page])


def test_static_decode_bucket_with_padding_rows():
    steps = 6
    finals = [n + steps for n in LENGTHS]
    seqs = make_seqs(LENGTHS, finals)
    kv = make_kv()
    run_step(eager(kv), seqs, prefill_ranges(seqs, LENGTHS))
    bucket = 8  # decode graph bucket: 8 rows, 3 real
    ctx = static(kv, max_seqs=bucket, max_tokens=bucket)
    page_table_ptr = ctx.page_table.data_ptr()
    for step in range(steps):
        ranges = [(i, n + step, n + step + 1) for i, n in enumerate(LENGTHS)]
        before = kv.layers[0].clone()
        outs = run_step(ctx, seqs, ranges, pad_to=bucket)
        assert_matches_dense(outs, seqs, ranges)
        assert_only_written_changed(before, kv.layers[0], written_mask(seqs, ranges))
        assert torch.equal(kv.layers[0][kv.scratch_page, :, 1:], before[kv.scratch_page, :, 1:])
    assert ctx.page_table.data_ptr() == page_table_ptr  # static tensors are updated in place
    assert ctx.page_table.shape == (bucket + 1, 8)
    assert_kv_written(kv, seqs, finals)


def test_static_refill_with_fewer_sequences_forgets_old_rows():
    seqs = make_seqs(LENGTHS, [n + 2 for n in LENGTHS])
    kv = make_kv()
    ctx = static(kv, max_seqs=4, max_tokens=24)
    run_step(ctx, seqs, prefill_ranges(seqs, LENGTHS), pad_to=24)
    ranges = [(2, 11, 12)]  # a later step with a single sequence, in row 0
    outs = run_step(ctx, seqs, ranges, pad_to=24)
    assert_matches_dense(outs, seqs, ranges)
    assert (ctx.page_table[1:] == kv.scratch_page).all()
    assert (ctx.seq_ids[1:] == 4).all()  # padding tokens point at the padding row
    assert (ctx.page_idx[1:] == kv.scratch_page).all() and (ctx.page_off[1:] == 0).all()


def test_fill_tensors_for_a_step():
    seqs = make_seqs(LENGTHS)
    ctx = static(make_kv(), max_seqs=4, max_tokens=8)
    ctx.fill([seqs[0].slice(3, 6), seqs[2].slice(10, 12)])  # positions 3..5 of seq 0, 10..11 of seq 2
    p0, p2 = seqs[0].pages, seqs[2].pages
    assert ctx.page_idx.tolist() == [p0[0], p0[1], p0[1], p2[2], p2[2]] + [NUM_PAGES] * 3
    assert ctx.page_off.tolist() == [3, 0, 1, 2, 3, 0, 0, 0]
    assert ctx.positions.tolist() == [3, 4, 5, 10, 11, 0, 0, 0]
    assert ctx.seq_ids.tolist() == [0, 0, 0, 1, 1, 4, 4, 4]
    assert ctx.page_table[0].tolist() == p0[:2] + [NUM_PAGES] * 6
    assert ctx.page_table[1].tolist() == p2[:3] + [NUM_PAGES] * 5
    assert (ctx.page_table[2:] == NUM_PAGES).all()


def test_fill_rejects_over_capacity():
    seqs = make_seqs(LENGTHS)
    ctx = static(make_kv(), max_seqs=2, max_tokens=8, max_pages_per_seq=2)
    with pytest.raises(AssertionError):
        ctx.fill([seqs[i].slice(0, 1) for i in range(3)])  # 3 sequences > max_seqs
    with pytest.raises(AssertionError):
        ctx.fill([seqs[2].slice(0, 11)])  # 11 tokens > max_tokens
    with pytest.raises(AssertionError):
        ctx.fill([seqs[2].slice(10, 11)])  # 3 pages > max_pages_per_seq


def test_low_precision_cache_keeps_query_dtype():
    seqs = make_seqs(LENGTHS)
    kv = KVCache(1, NUM_PAGES, PAGE_SIZE, KV_HEADS, HEAD_DIM, CPU, torch.bfloat16)
    ctx = eager(kv)
    ranges = prefill_ranges(seqs, LENGTHS)
    outs = run_step(ctx, seqs, ranges)
    for out, (i, s, e) in zip(outs, ranges):
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, seqs[i].dense[s:e], atol=5e-2, rtol=0)


def test_the_decode_kernel_switch_names_its_choices(monkeypatch):
    """FlashInfer's decode kernel is chosen by name (set_decode_kernel over VOXRT_DECODE_ATTENTION); an unknown
    name is an error that lists the choices, never a silent fallback."""
    from voxrt.engine.runtime.attention import DECODE_KERNELS, decode_kernel, resolve_decode_kernel, set_decode_kernel

    monkeypatch.delenv("VOXRT_DECODE_ATTENTION", raising=False)
    assert decode_kernel() == "auto"
    # auto on Hopper: FA3 for small batches, ours above (both measured faster there); elsewhere the CUDA-core kernel
    assert [resolve_decode_kernel("auto", rows, True) for rows in (1, 8, 16, 128)] == ["fa3", "fa3", "triton", "triton"]
    assert resolve_decode_kernel("auto", 1, False) == "cuda-cores"
    assert resolve_decode_kernel("fa2-nosplit", 128, True) == "fa2-nosplit"
    monkeypatch.setenv("VOXRT_DECODE_ATTENTION", "fa3")
    assert decode_kernel() == "fa3"
    try:
        set_decode_kernel("fa2-nosplit")
        assert decode_kernel() == "fa2-nosplit"  # the override wins over the environment
    finally:
        set_decode_kernel(None)
    assert decode_kernel() == "fa3"
    monkeypatch.setenv("VOXRT_DECODE_ATTENTION", "fast")
    with pytest.raises(ValueError, match="auto, cuda-cores, fa2-nosplit, fa3, triton"):
        decode_kernel()
    with pytest.raises(ValueError, match="unknown decode kernel 'fast'"):
        set_decode_kernel("fast")
    assert set(DECODE_KERNELS) == {"auto", "cuda-cores", "fa2-nosplit", "fa3", "triton"}


@pytest.mark.parametrize("graphed", [False, True])
def test_paged_decode_context_attends_as_the_torch_reference(graphed):
    """PagedDecodeAttention (our kernel, in Triton's interpreter) through fill/forward: the same output and
    cache as TorchAttention for a decode batch over scattered pages, with a graph bucket's padding rows
    (graphed) or the exact rows (eager, a context larger than the step), over two steps of different size."""
    from voxrt.engine.runtime.attention import PagedDecodeAttention

    g = torch.Generator().manual_seed(5)
    hq, hkv, d, ps = 4, 2, 32, 4
    kvs = {name: KVCache(1, 24, ps, hkv, d, torch.device("cpu"), torch.float32) for name in ("ref", "ours")}
    base = torch.randn(kvs["ref"].layers[0].shape, generator=g)
    for kv in kvs.values():
        kv.layers[0].copy_(base)
    ours = PagedDecodeAttention(kvs["ours"], 6, 8, torch.device("cpu"), use_cuda_graph=graphed)
    for seqs in ([SeqSlice([3, 9, 1], 1, 10), SeqSlice([7], 1, 1), SeqSlice([2, 11, 5, 0], 1, 16)],
                 [SeqSlice([3, 9, 1], 1, 11), SeqSlice([4, 6], 1, 5)]):
        rows = 6 if graphed else len(seqs)
        q = torch.randn(rows, hq, d, generator=g)
        k, v = torch.randn(rows, hkv, d, generator=g), torch.randn(rows, hkv, d, generator=g)
        ref = TorchAttention(kvs["ref"], len(seqs), len(seqs), None, torch.device("cpu"))
        ref.fill(seqs)
        want = ref.forward(0, q[: len(seqs)], k[: len(seqs)], v[: len(seqs)])
        ours.fill(seqs)
        got = ours.forward(0, q, k, v)
        torch.testing.assert_close(got[: len(seqs)], want, atol=1e-5, rtol=1e-5)
        used = sorted({p for s in seqs for p in s.pages})
        torch.testing.assert_close(kvs["ours"].layers[0][used], kvs["ref"].layers[0][used])


@pytest.mark.parametrize("graphed", [False, True])
def test_paged_decode_context_with_the_rotary_inside_equals_the_two_kernels(graphed, monkeypatch):
    """PagedDecodeAttention.norm_rope_attend with VOXRT_PAGED_DECODE_ROPE=on (one kernel: norm, rotary, K/V write
    and attention) against the same context with it off (kernels/rope.py's kernel, then the paged decode) and
    against TorchAttention's reference ops, over two decode steps, a graph bucket's padding rows included."""
    from voxrt.engine.runtime.attention import PagedDecodeAttention
    from voxrt.engine.runtime.kernels.rope import rope_inv_freq

    g = torch.Generator().manual_seed(9)
    hq, hkv, d, ps = 4, 2, 32, 4
    kvs = {name: KVCache(1, 24, ps, hkv, d, torch.device("cpu"), torch.float32) for name in ("ref", "off", "on")}
    base = torch.randn(kvs["ref"].layers[0].shape, generator=g)
    for kv in kvs.values():
        kv.layers[0].copy_(base)
    ctx = {name: PagedDecodeAttention(kvs[name], 6, 8, torch.device("cpu"), use_cuda_graph=graphed)
           for name in ("off", "on")}
    q_norm, k_norm = 1 + 0.1 * torch.randn(d, generator=g), 1 + 0.1 * torch.randn(d, generator=g)
    inv_freq = rope_inv_freq(d, 10000.0, torch.device("cpu"))
    for seqs in ([SeqSlice([3, 9, 1], 1, 10), SeqSlice([7], 1, 1), SeqSlice([2, 11, 5, 0], 1, 16)],
                 [SeqSlice([3, 9, 1], 1, 11), SeqSlice([4, 6], 1, 5)]):
        rows = 6 if graphed else len(seqs)
        qkv = torch.randn(rows, (hq + 2 * hkv) * d, generator=g)
        x = torch.randn(rows, 48, generator=g)
        ref = TorchAttention(kvs["ref"], len(seqs), len(seqs), None, torch.device("cpu"))
        ref.fill(seqs)
        n = len(seqs)
        want = ref.norm_rope_attend(0, qkv[:n], ref.positions, hq, hkv, d, q_norm, k_norm, inv_freq, 1e-6, "torch",
                                    x=x[:n], x_eps=1e-6)
        got = {}
        for name, on in (("off", "off"), ("on", "on")):
            monkeypatch.setenv("VOXRT_PAGED_DECODE_ROPE", on)
            ctx[name].fill(seqs)
            got[name] = ctx[name].norm_rope_attend(0, qkv, ctx[name].positions, hq, hkv, d, q_norm, k_norm, inv_freq,
                                                   1e-6, "triton", x=x, x_eps=1e-6)
        # (padding rows' outputs are discarded and may differ: with two kernels each reads the scratch slot that
        # the last padding row wrote, with one each attends over its own new K/V)
        torch.testing.assert_close(got["on"][:n], got["off"][:n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got["on"][:n], want, atol=1e-5, rtol=1e-5)
        used = sorted({p for s in seqs for p in s.pages})
        torch.testing.assert_close(kvs["on"].layers[0], kvs["off"].layers[0], atol=0, rtol=0)
        torch.testing.assert_close(kvs["on"].layers[0][used], kvs["ref"].layers[0][used], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rope_inside", ["on", "off"])
def test_a_mixed_step_attends_each_part_through_its_own_context(rope_inside, monkeypatch):
    """SplitAttention.norm_rope_attend (each part's own path: the decode rows through PagedDecodeAttention's, the
    paged kernel with the rotary inside when VOXRT_PAGED_DECODE_ROPE is on) against what it replaced, one
    norm-rope kernel over every row through the joined page indices and then each part's attention: the same
    cache bits and the same outputs for the real rows, decode rows (a graph bucket's padding row among them) and
    two prompts padded to one length."""
    from voxrt.engine.runtime.attention import AttentionContext, PagedDecodeAttention, SplitAttention
    from voxrt.engine.runtime.kernels.rope import rope_inv_freq

    monkeypatch.setenv("VOXRT_PAGED_DECODE_ROPE", rope_inside)
    g = torch.Generator().manual_seed(11)
    hq, hkv, d, ps, length = 4, 2, 32, 4, 6
    kvs = {name: KVCache(1, 24, ps, hkv, d, CPU, torch.float32) for name in ("joined", "parts")}
    base = torch.randn(kvs["joined"].layers[0].shape, generator=g)
    for kv in kvs.values():
        kv.layers[0].copy_(base)
    decodes = [SeqSlice([3, 9, 1], 1, 10), SeqSlice([2, 11, 5, 0], 1, 16)]  # + one padding row (bucket of 3)
    prompts = [SeqSlice([13, 14], length, length), SeqSlice([15, 16], length, length)]  # two prompts of 6, padded
    ctx = {}
    for name, kv in kvs.items():
        dec = PagedDecodeAttention(kv, 3, 8, CPU, use_cuda_graph=True)
        pre = TorchAttention(kv, 2, 2 * length, 2, CPU)
        dec.fill(decodes)
        pre.fill(prompts)
        ctx[name] = SplitAttention(dec, pre, 3, 2 * length)
        ctx[name].join()
    n = 3 + 2 * length
    qkv = torch.randn(n, (hq + 2 * hkv) * d, generator=g)
    x = torch.randn(n, 48, generator=g)
    q_norm, k_norm = 1 + 0.1 * torch.randn(d, generator=g), 1 + 0.1 * torch.randn(d, generator=g)
    inv_freq = rope_inv_freq(d, 10000.0, CPU)
    args = (0, qkv, None, hq, hkv, d, q_norm, k_norm, inv_freq, 1e-6, "triton")
    want = AttentionContext.norm_rope_attend(ctx["joined"], *args[:2], ctx["joined"].positions, *args[3:], x=x,
                                             x_eps=1e-6)
    got = ctx["parts"].norm_rope_attend(*args[:2], ctx["parts"].positions, *args[3:], x=x, x_eps=1e-6)
    real = [0, 1] + list(range(3, n))  # row 2 is the decode bucket's padding row: its output is never read
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    used = sorted({p for s in decodes + prompts for p in s.pages})
    torch.testing.assert_close(kvs["parts"].layers[0][used], kvs["joined"].layers[0][used], atol=0, rtol=0)
