"""The fused frame kernels: the Triton implementation (run by Triton's interpreter on the CPU, compiled on a
GPU) equals the torch implementation, and the torch implementation equals the reference layers' math."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels import default_impl, triton_available
from voxrt.engine.runtime.kernels.depth_attention import depth_attention
from voxrt.engine.runtime.kernels.norm import add_rms_norm, silu_mul
from voxrt.engine.runtime.kernels.rope import norm_rope_torch, qk_norm_rope_paged, rope_inv_freq
from voxrt.engine.runtime.kernels.sampling import SEARCHES, sample_codes, sampler_search
from voxrt.models.common.layers import apply_rotary, rotary_cos_sin

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def _fixed_inputs():
    """Every test's unseeded torch.randn the same whatever ran before it on its worker: bf16 tolerances hold for
    nearly every draw, not every one (test_norm_rope_equals_the_layers_math failed one CI run in five, 1 draw in
    300), and a test must not depend on the order pytest-xdist hands out."""
    torch.manual_seed(0)


def _tol(dtype: torch.dtype, loose: bool = False) -> dict:
    """float32: the same math; bfloat16: roundings differ (and the interpreter truncates), so a bf16 ulp or
    two per op, more where errors compound through attention (`loose`)."""
    if dtype == torch.float32:
        return dict(atol=1e-5, rtol=1e-5)
    return dict(atol=6e-2, rtol=6e-2) if loose else dict(atol=2e-2, rtol=2e-2)


def test_triton_is_installed_for_these_tests():
    # CI installs triton (requirements/dev): the kernels below must really run, never be skipped
    assert triton_available()
    assert default_impl(torch.device("cpu")) == "torch"  # the interpreter is for tests, never for serving


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_equals_reference(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=g).to(dtype)
    res = torch.randn(5, 96, generator=g).to(dtype)
    w = torch.rand(96, generator=g) + 0.5
    ref_r = res + x
    ref = F.rms_norm(ref_r, (96,), w.to(dtype), 1e-6)
    for impl in ("torch", "triton"):
        out, r = add_rms_norm(x, res, w, 1e-6, impl=impl)
        # Triton's interpreter rounds float32 -> bfloat16 toward zero (the GPU rounds to nearest): close, not equal
        torch.testing.assert_close(r, ref_r, **_tol(dtype))
        torch.testing.assert_close(out, ref, **_tol(dtype))
        out0, r0 = add_rms_norm(x, None, w, 1e-6, impl=impl)
        assert r0.data_ptr() == x.data_ptr() or torch.equal(r0, x)
        torch.testing.assert_close(out0, F.rms_norm(x, (96,), w.to(dtype), 1e-6), **_tol(dtype))


def test_add_rms_norm_takes_strided_rows():
    x = torch.randn(3, 2, 64)[:, -1]  # the last token of each row: a strided view
    res = torch.randn(3, 2, 64)[:, -1]
    w = torch.ones(64)
    a, ra = add_rms_norm(x, res, w, 1e-6, impl="torch")
    b, rb = add_rms_norm(x, res, w, 1e-6, impl="triton")
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ra, rb)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_equals_reference(dtype):
    gu = torch.randn(4, 2 * 200).to(dtype)
    ref = F.silu(gu[:, :200]) * gu[:, 200:]
    for impl in ("torch", "triton"):
        torch.testing.assert_close(silu_mul(gu, impl=impl), ref, **_tol(dtype))


def _reference_norm_rope(x, weight, positions, theta, eps):
    """The layers' own math: q_norm (RMSNorm over head_dim) then apply_rotary with rotary_cos_sin."""
    d = x.shape[-1]
    normed = F.rms_norm(x, (d,), weight.to(x.dtype), eps)
    cos, sin = rotary_cos_sin(positions, d, theta, x.dtype)
    return apply_rotary(normed, cos.unsqueeze(-2), sin.unsqueeze(-2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_rope_equals_the_layers_math(dtype):
    x = torch.randn(6, 4, 64).to(dtype)
    w = torch.rand(64) + 0.5
    positions = torch.tensor([0, 1, 5, 17, 300, 4000])
    ours = norm_rope_torch(x, w, rope_inv_freq(64, 1e6, torch.device("cpu")), positions, 1e-6)
    torch.testing.assert_close(ours, _reference_norm_rope(x, w, positions, 1e6, 1e-6), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope_paged_writes_the_cache_and_returns_q(dtype):
    hq, hkv, d, n, ps = 4, 2, 64, 5, 4
    qkv = torch.randn(n, (hq + 2 * hkv) * d).to(dtype)
    qw, kw = torch.rand(d) + 0.5, torch.rand(d) + 0.5
    inv = rope_inv_freq(d, 1e4, torch.device("cpu"))
    positions = torch.tensor([3, 0, 9, 1, 2, 0, 0])  # longer than n: graph buffers are
    page_idx = torch.tensor([1, 0, 2, 3, 1, 4, 4])
    page_off = torch.tensor([3, 0, 1, 1, 2, 0, 0])
    caches = {}
    outs = {}
    for impl in ("torch", "triton"):
        cache = torch.zeros(5, 2, ps, hkv, d, dtype=dtype)
        outs[impl] = qk_norm_rope_paged(qkv, hq, hkv, d, qw, kw, inv, 1e-6, positions, page_idx, page_off, cache,
                                        impl=impl)
        caches[impl] = cache
    torch.testing.assert_close(outs["triton"], outs["torch"], **_tol(dtype))
    torch.testing.assert_close(caches["triton"], caches["torch"], **_tol(dtype))
    q_ref = _reference_norm_rope(qkv[:, : hq * d].view(n, hq, d), qw, positions[:n], 1e4, 1e-6)
    torch.testing.assert_close(outs["torch"], q_ref, **_tol(dtype))
    v = qkv[:, (hq + hkv) * d :].view(n, hkv, d)
    assert torch.equal(caches["torch"][page_idx[:n], 1, page_off[:n]], v)
    assert caches["torch"][4].abs().sum() == 0  # pages no token names stay untouched


def _reference_depth_step(q, k_cache, v_cache, start, t):
    """SDPA with GQA expansion and a causal mask, as the reference DenseDecoderLayer attends."""
    hq, hkv = q.shape[2], k_cache.shape[1]
    keys = k_cache[:, :, : start + t].repeat_interleave(hq // hkv, dim=1)
    values = v_cache[:, :, : start + t].repeat_interleave(hq // hkv, dim=1)
    mask = torch.ones(t, start + t, dtype=torch.bool).tril(diagonal=start)
    return F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_depth_attention_over_a_frame(dtype):
    """A whole frame of steps (2 tokens at step 0, then 1) over one cache: triton == torch == SDPA. A frame of
    6 positions (the predictor's is 16): the cache length is not a power of two, so the kernel's key block (8)
    runs past it, masked; each step costs the interpreter the same, so 5 steps instead of 15 cover the same."""
    bsz, hq, hkv, d, length = 3, 4, 2, 64, 6
    qw, kw = torch.rand(d) + 0.5, torch.rand(d) + 0.5
    inv = rope_inv_freq(d, 1e6, torch.device("cpu"))
    caches = {impl: (torch.zeros(bsz, hkv, length, d, dtype=dtype), torch.zeros(bsz, hkv, length, d, dtype=dtype))
              for impl in ("torch", "triton")}
    start = 0
    for step in range(length - 1):
        t = 2 if step == 0 else 1
        qkv = torch.randn(bsz * t, (hq + 2 * hkv) * d).to(dtype)
        outs = {impl: depth_attention(qkv, hq, hkv, d, qw, kw, inv, 1e-6, *caches[impl], start, t, impl=impl)
                for impl in caches}
        grouped = depth_attention(qkv, hq, hkv, d, qw, kw, inv, 1e-6, *[c.clone() for c in caches["triton"]], start,
                                  t, impl="triton", heads_per_program=hq // hkv)  # one program per KV group
        torch.testing.assert_close(grouped, outs["triton"])
        torch.testing.assert_close(outs["triton"], outs["torch"], **_tol(dtype, loose=True))
        torch.testing.assert_close(caches["triton"][0], caches["torch"][0], **_tol(dtype))
        pos = torch.arange(start, start + t)
        q = _reference_norm_rope(qkv[:, : hq * d].view(bsz, t, hq, d), qw, pos, 1e6, 1e-6)
        ref = _reference_depth_step(q, *caches["torch"], start, t).reshape(bsz * t, hq * d)
        torch.testing.assert_close(outs["torch"], ref, **_tol(dtype))
        start += t


def _params(bsz, temperature, top_k, top_p, greedy):
    return (torch.full((bsz,), temperature, dtype=torch.float32), torch.full((bsz,), top_k, dtype=torch.int64),
            torch.full((bsz,), top_p, dtype=torch.float32), torch.full((bsz,), greedy, dtype=torch.bool))


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("top_k,top_p,greedy", [(0, 1.0, False), (50, 1.0, False), (5, 0.8, False),
                                                (0, 0.3, False), (1, 1.0, False), (50, 1.0, True)])
def test_sampler_triton_equals_torch_on_the_same_uniforms(top_k, top_p, greedy, search, monkeypatch):
    monkeypatch.setenv("VOXRT_SAMPLER_SEARCH", search)  # the Triton kernel's threshold search, read at launch
    g = torch.Generator().manual_seed(7)
    bsz, vocab, hidden = 6, 300, 40
    logits = (torch.randn(bsz, vocab, generator=g) * 3).to(torch.bfloat16)
    uniform = torch.rand(bsz, vocab, generator=g)
    suppress = torch.zeros(vocab, dtype=torch.bool)
    suppress[250:] = True
    table = torch.randn(vocab, hidden, generator=g)
    params = _params(bsz, 0.9, top_k, top_p, greedy)
    results = {}
    for impl in ("torch", "triton"):
        codes = torch.full((bsz, 3), -1, dtype=torch.int64)
        nxt = torch.zeros(bsz, hidden)
        sample_codes(logits, uniform, *params, out=codes[:, 1], suppress=suppress, next_table=table, next_out=nxt,
                     impl=impl)
        results[impl] = (codes, nxt)
    assert torch.equal(results["triton"][0], results["torch"][0])
    codes = results["torch"][0][:, 1]
    assert (codes < 250).all() and (results["torch"][0][:, [0, 2]] == -1).all()
    assert torch.equal(results["torch"][1], table[codes])
    assert torch.equal(results["triton"][1], table[codes])
    x = logits.float().masked_fill(suppress, float("-inf"))
    if greedy or top_k == 1:
        assert torch.equal(codes, x.argmax(-1))
    if top_k > 1:  # every code is among the k best of its row
        kth = x.topk(top_k, dim=-1).values[:, -1:]
        assert (x.gather(-1, codes[:, None]) >= kth).all()


@pytest.mark.parametrize("search,greedy", [("radix", False), ("rounds", False), ("radix", True)])
def test_sampler_with_code0_processors_equals_the_program_rule(search, greedy, monkeypatch):
    """`sample_codes`' `history` (VOXRT_GLUE_KERNELS=on: Qwen3-TTS's code 0 with its processors in the sampler):
    the Triton kernel and the torch impl give the codes that the program's rule gives (the repetition penalty
    over both halves of the history, EOS barred before frame 2 and for pinned rows, then the draw on the same
    uniforms, frame 1's code shifted by V), for rows at frame 0, frame 1 and later, pinned or not."""
    from voxrt.engine.runtime.sampling import apply_repetition_penalty  # noqa: PLC0415

    monkeypatch.setenv("VOXRT_SAMPLER_SEARCH", search)
    g = torch.Generator().manual_seed(11)
    bsz, vocab = 8, 300
    logits = (torch.randn(bsz, vocab, generator=g) * 3).to(torch.bfloat16)
    eos = 257
    logits[:, eos] = 20.0  # EOS the best code of every row: drawn wherever it is allowed
    uniform = torch.rand(bsz, vocab, generator=g)
    suppress = torch.zeros(vocab, dtype=torch.bool)
    suppress[250:] = True
    suppress[eos] = False  # the special range barred except EOS
    eos_mask = torch.zeros(vocab, dtype=torch.bool)
    eos_mask[eos] = True
    history = torch.zeros(bsz, 2 * vocab, dtype=torch.bool)
    history[2:, torch.randint(0, 250, (40,), generator=g)] = True  # codes seen (rows 0-1: frame 0, empty)
    history[2:4, vocab:] = False  # rows 2-3: frame 1 (marks in the lower half only)
    history[4:, vocab + 7] = True  # rows 4-7: frame 1's code marked in the upper half: frame 2 or later
    history[2:, logits[0].float().topk(3).indices[1:]] = True  # the penalty meets high logits too
    temperature, top_k, top_p, greedy_t = _params(bsz, 0.9, 50, 1.0, greedy)
    penalty = torch.full((bsz,), 1.3)
    allow_stop = torch.tensor([True, True, True, True, True, True, False, False])
    plain, tagged = history[:, :vocab], history[:, vocab:]
    x = apply_repetition_penalty(logits.float(), plain | tagged, penalty)
    x = x.masked_fill((~tagged.any(-1) | ~allow_stop)[:, None] & eos_mask[None, :], float("-inf"))
    want = torch.empty(bsz, dtype=torch.int64)
    sample_codes(x, uniform, temperature, top_k, top_p, greedy_t, want, suppress=suppress, impl="torch")
    want += vocab * (plain.any(-1) & ~tagged.any(-1))
    assert (want[4:6] == eos).all() and (want[:4] % vocab != eos).all() and (want[6:] != eos).all()
    assert (want[:2] < vocab).all() and (want[2:4] >= vocab).all() and (want[4:] < vocab).all()
    for impl in ("torch", "triton"):
        got = torch.full((bsz,), -1, dtype=torch.int64)
        sample_codes(logits, uniform, temperature, top_k, top_p, greedy_t, got, suppress=suppress, impl=impl,
                     history=history, penalty=penalty, allow_stop=allow_stop, eos_mask=eos_mask)
        assert torch.equal(got, want), (impl, got, want)
    with pytest.raises(ValueError, match="history goes with"):
        sample_codes(logits, uniform, temperature, top_k, top_p, greedy_t, got, history=history, impl="torch")


def test_gather_rows_in_one_kernel_equals_index_select(monkeypatch):
    """kernels/gather.py (`VOXRT_GLUE_KERNELS=on`: the slots' sampling parameters in one launch): the same rows as
    index_select for each dtype of SamplingTensors, repeated and unordered indices over several blocks, none at
    all; and SlotSampling gathers through it when asked, on the CPU with the knob on only by `impl`."""
    from voxrt.engine.params import SamplingParams  # noqa: PLC0415
    from voxrt.engine.runtime.kernels.gather import BLOCK, gather_rows  # noqa: PLC0415
    from voxrt.engine.runtime.sampling import SlotSampling  # noqa: PLC0415

    g = torch.Generator().manual_seed(4)
    rows = 300
    sources = [torch.rand(rows, generator=g), torch.randint(0, 99, (rows,), generator=g), torch.rand(rows, generator=g),
               torch.rand(rows, generator=g) + 1, torch.rand(rows, generator=g) > 0.5, torch.rand(rows, generator=g) > 0.3]
    for n in (0, 1, BLOCK + 5):
        index = torch.randint(0, rows, (n,), generator=g)
        want = gather_rows(sources, index, "torch")
        got = gather_rows(sources, index, "triton")
        assert [t.dtype for t in got] == [t.dtype for t in sources]
        for a, b in zip(got, want):
            assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(gather_rows(sources[:2], index, "triton"), want[:2]))
    with pytest.raises(ValueError, match="1-D"):
        gather_rows([torch.zeros(3, 2)], index, "triton")
    monkeypatch.delenv("VOXRT_GLUE_KERNELS", raising=False)  # the default: on
    assert SlotSampling(4, torch.device("cpu")).impl == "torch"  # the CPU serves with torch ops
    slot = SlotSampling(9, torch.device("cpu"), impl="triton")
    params = [SamplingParams(temperature=0.5 + i / 10, top_k=i, top_p=0.9, repetition_penalty=1.1, greedy=i % 2 == 0,
                             num_frames=None if i % 3 else 5) for i in range(4)]
    from voxrt.engine.runtime.sampling import SamplingTensors  # noqa: PLC0415
    slot.scatter(torch.tensor([7, 2, 5, 0]), SamplingTensors.from_params(params, torch.device("cpu")))
    got = slot.gather(torch.tensor([5, 5, 8, 0, 2, 7]))
    want = SlotSampling(9, torch.device("cpu"), impl="torch")
    want.rows = slot.rows
    for a, b in zip(got._fields(), want.gather(torch.tensor([5, 5, 8, 0, 2, 7]))._fields()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_depth_inputs_in_one_kernel_equal_the_torch_ops(dtype):
    """kernels/gather.py's `depth_inputs` (VOXRT_GLUE_KERNELS=on): code 0 untagged (frame 1's arrives shifted by the
    vocabulary) into a strided column of the frame's codes, and the projected hidden state and code 0's embedding
    interleaved row by row, as torch.stack gives them; the same bits in Triton's interpreter."""
    from voxrt.engine.runtime.kernels.gather import depth_inputs  # noqa: PLC0415

    g = torch.Generator().manual_seed(9)
    bsz, hidden, vocab, tag = 5, 48, 30, 100
    first = torch.randn(bsz, hidden, generator=g).to(dtype)
    table = torch.randn(vocab, hidden, generator=g).to(dtype)
    code0 = torch.tensor([3, tag + 7, 0, tag + 29, 12])
    out = {}
    for impl in ("torch", "triton"):
        codes = torch.full((bsz, 4), -1, dtype=torch.int64)
        out[impl] = (depth_inputs(first, code0, tag, table, codes[:, 0], impl), codes)
    x, codes = out["torch"]
    assert torch.equal(codes[:, 0], torch.tensor([3, 7, 0, 29, 12])) and (codes[:, 1:] == -1).all()
    assert torch.equal(x[0::2], first) and torch.equal(x[1::2], table[codes[:, 0]])
    assert torch.equal(out["triton"][0], x) and torch.equal(out["triton"][1], codes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embed_step_in_one_kernel_equals_the_torch_ops(dtype):
    """kernels/gather.py's `embed_step` (VOXRT_GLUE_KERNELS=on): a decode step's input, the frame's embeddings from
    one concatenated table summed plus the text embedding, as the torch ops give it (the float32 sum's order may
    differ in its last bit: bf16 within one rounding), over a hidden size of two blocks."""
    from voxrt.engine.runtime.kernels.gather import embed_step  # noqa: PLC0415

    g = torch.Generator().manual_seed(6)
    bsz, groups, vocab, hidden, texts = 4, 5, 11, 1500, 20
    table = torch.randn(groups * vocab, hidden, generator=g).to(dtype)
    offsets = torch.arange(groups) * vocab
    codes = torch.randint(0, vocab, (bsz, groups), generator=g)
    text_table = torch.randn(texts, hidden, generator=g).to(dtype)
    text_ids = torch.tensor([0, 19, 7, 7])
    want = embed_step(codes, offsets, table, text_ids, text_table, "torch")
    got = embed_step(codes, offsets, table, text_ids, text_table, "triton")
    assert got.dtype == dtype and got.shape == (bsz, hidden)
    exact = (table[codes + offsets].float().sum(1).to(dtype).float() + text_table[text_ids].float()).to(dtype)
    torch.testing.assert_close(want, exact, **_tol(dtype))
    torch.testing.assert_close(got, exact, **_tol(dtype))


# the sort search on bf16 only (its ties are the harder case): a 2048-wide sort takes ~3 s a row in the interpreter
@pytest.mark.parametrize("dtype,search", [(torch.float32, "rounds"), (torch.bfloat16, "rounds"),
                                          (torch.bfloat16, "sort"), (torch.bfloat16, "rounds16"),
                                          (torch.float32, "radix"), (torch.bfloat16, "radix")])
def test_sampler_threshold_search_is_exact_at_codec_vocabulary_size(dtype, search, monkeypatch):
    """A codec-sized vocabulary (the rounds search's 17 rounds narrow the 32-bit range to one integer; the sort
    search reads the thresholds off the sorted row): the Triton draw gives the torch rule's codes, with ties
    (bf16 scores repeat) and with top-k at its edges (1, all but one) and beside top-p."""
    monkeypatch.setenv("VOXRT_SAMPLER_SEARCH", search)
    g = torch.Generator().manual_seed(11)
    # the sort search on the two extreme rows only: its 20 sorts of four rows took 127 s of the CI's 300 s limit on
    # an idle 2-core machine and timed out on a loaded one
    bsz, vocab = (2 if search == "sort" else 4), 2048
    logits = (torch.randn(bsz, vocab, generator=g) * torch.linspace(0.5, 6, bsz)[:, None]).to(dtype)
    uniform = torch.rand(bsz, vocab, generator=g)
    for top_k, top_p in [(50, 1.0), (1, 1.0), (vocab - 1, 1.0), (0, 0.9), (50, 0.5)]:
        params = _params(bsz, 0.9, top_k, top_p, False)
        want = torch.empty(bsz, dtype=torch.int64)
        sample_codes(logits, uniform, *params, out=want, impl="torch")
        got = torch.full((bsz,), -1, dtype=torch.int64)
        sample_codes(logits, uniform, *params, out=got, impl="triton")
        assert torch.equal(got, want), (top_k, top_p)


@pytest.mark.parametrize("search", SEARCHES)
def test_sampler_keeps_every_tie_at_the_thresholds(search):
    """Scores on a few levels (each repeated a hundred times or so), with top-k and top-p boundaries that fall
    inside a group of equal scores: the whole group stays, as in the torch rule."""
    g = torch.Generator().manual_seed(13)
    bsz, vocab = 2, 2048
    logits = torch.randint(0, 16, (bsz, vocab), generator=g).float() * 0.25
    uniform = torch.rand(bsz, vocab, generator=g)
    for top_k, top_p in [(50, 1.0), (300, 1.0), (0, 0.5), (200, 0.7)]:
        params = _params(bsz, 1.0, top_k, top_p, False)
        want = torch.empty(bsz, dtype=torch.int64)
        sample_codes(logits, uniform, *params, out=want, impl="torch")
        got = torch.full((bsz,), -1, dtype=torch.int64)
        sample_codes(logits, uniform, *params, out=got, impl="triton", search=search)
        assert torch.equal(got, want), (top_k, top_p)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("search", ["rounds", "rounds16", "radix"])
def test_sampler_top_k_boundary_is_exact(search, dtype):
    """The top-k threshold itself, not only a draw: uniforms that give one code a noise no score gap here can
    beat (u = 1 - 1e-7 against 0.5 elsewhere) make that code the draw iff the rule keeps it. Aimed at the k-th
    largest score (kept, with all its ties) and at the first score below it (dropped), for k from 1 to all but
    one of a codec vocabulary, on rows with and without ties: the kernel's draw equals the torch rule's, and the
    aimed-at code wins exactly when it is kept."""
    g = torch.Generator().manual_seed(23)
    vocab = 2048
    rows = [torch.randn(vocab, generator=g) * 0.5,  # distinct in float32, tied in bf16
            torch.randint(0, 40, (vocab,), generator=g).float() * 0.05,  # ~50 copies of each level
            -torch.rand(vocab, generator=g) * 1e-3]  # negative, narrow: the keys' low bits decide
    logits = torch.stack(rows).to(dtype)
    bsz = logits.shape[0]
    for top_k in (1, 2, 50, 300, vocab - 1):
        scores = logits.float()
        kth = scores.topk(top_k, dim=-1).values[:, -1]
        below = torch.where(scores < kth[:, None], scores, float("-inf")).max(-1).values
        for aim_at, kept in ((kth, True), (below, False)):
            uniform = torch.full((bsz, vocab), 0.5)
            target = (scores == aim_at[:, None]).float().argmax(-1)  # the first code with that score
            uniform[torch.arange(bsz), target] = 1.0 - 1e-7
            params = _params(bsz, 1.0, top_k, 1.0, False)
            want = torch.empty(bsz, dtype=torch.int64)
            sample_codes(logits, uniform, *params, out=want, impl="torch")
            got = torch.full((bsz,), -1, dtype=torch.int64)
            sample_codes(logits, uniform, *params, out=got, impl="triton", search=search)
            assert torch.equal(got, want), (top_k, kept, got, want)
            has_target = aim_at > float("-inf")
            assert torch.equal((want == target)[has_target], torch.full_like(want, kept, dtype=torch.bool)[has_target])


@pytest.mark.parametrize("search", ["rounds16", "radix"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_rounds16_keeps_every_tie_and_scaling_keeps_the_order(temperature, search):
    """The 16-bit search runs on the bfloat16 logits while the torch rule ranks the scaled float32 scores (rstd of
    the rows, then the temperature): ties on a few levels and boundaries inside a group stay exact, with and
    without the rows' scaling."""
    g = torch.Generator().manual_seed(17)
    bsz, vocab, hidden = 3, 2048, 64
    logits = (torch.randint(-24, 24, (bsz, vocab), generator=g).float() * 0.37).to(torch.bfloat16)
    rows = torch.randn(bsz, hidden, generator=g) * torch.tensor([0.01, 1.0, 30.0])[:, None]
    uniform = torch.rand(bsz, vocab, generator=g)
    for top_k in (50, 300, 1, vocab - 1):
        for x in (None, rows):
            params = _params(bsz, temperature, top_k, 1.0, False)
            want = torch.empty(bsz, dtype=torch.int64)
            sample_codes(logits, uniform, *params, out=want, impl="torch", x=x)
            got = torch.full((bsz,), -1, dtype=torch.int64)
            sample_codes(logits, uniform, *params, out=got, impl="triton", x=x, search=search)
            assert torch.equal(got, want), (top_k, x is None)


@pytest.mark.parametrize("search", ["rounds16", "radix"])
def test_sampler_rounds16_falls_back_where_scaling_could_merge_values(search):
    """Rows whose scores leave the normal float range (a huge logit over a small temperature overflows to inf;
    tiny ones become subnormal) take the 32-bit search: the codes still equal the torch rule's."""
    g = torch.Generator().manual_seed(19)
    bsz, vocab = 2, 512
    logits = torch.randn(bsz, vocab, generator=g) * 3
    logits[0, :5] = 3.0e38  # / 0.5 -> inf: five equal scores that were five equal logits (the rule keeps them)
    logits[1] = logits[1] * 1e-38  # subnormal scores
    logits = logits.to(torch.bfloat16)
    uniform = torch.rand(bsz, vocab, generator=g)
    for top_k in (3, 50):
        params = _params(bsz, 0.5, top_k, 1.0, False)
        want = torch.empty(bsz, dtype=torch.int64)
        sample_codes(logits, uniform, *params, out=want, impl="torch")
        got = torch.full((bsz,), -1, dtype=torch.int64)
        sample_codes(logits, uniform, *params, out=got, impl="triton", search=search)
        assert torch.equal(got, want), top_k


def test_sampler_search_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("VOXRT_SAMPLER_SEARCH", raising=False)
    assert sampler_search() == "radix"  # the default: fastest on the H100 (bench/results/2026-12-05-h100/)
    monkeypatch.setenv("VOXRT_SAMPLER_SEARCH", " Sort ")
    assert sampler_search() == "sort"
    monkeypatch.setenv("VOXRT_SAMPLER_SEARCH", "bisect")
    with pytest.raises(ValueError, match="VOXRT_SAMPLER_SEARCH"):
        sampler_search()


def test_sampler_warps_default_by_vocabulary_and_from_the_environment(monkeypatch):
    from voxrt.engine.runtime.kernels.sampling import default_warps  # noqa: PLC0415

    monkeypatch.delenv("VOXRT_SAMPLER_WARPS", raising=False)
    assert [default_warps(v) for v in (1024, 2047, 2048, 3072)] == [4, 4, 8, 8]  # the H100 sweep's (its docstring)
    monkeypatch.setenv("VOXRT_SAMPLER_WARPS", " 4 ")
    assert default_warps(2048) == 4 and default_warps(3072) == 4
    for bad in ("3", "32", "many", "-4"):
        monkeypatch.setenv("VOXRT_SAMPLER_WARPS", bad)
        with pytest.raises(ValueError, match="VOXRT_SAMPLER_WARPS"):
            default_warps(2048)


def test_sampler_distribution_follows_temperature_top_k_and_top_p():
    """Many draws of one row: frequencies match the filtered, tempered softmax (a chi-square bound)."""
    vocab, draws = 12, 20000
    logits = torch.linspace(2.0, -2.0, vocab)[None].expand(draws, vocab).contiguous()
    g = torch.Generator().manual_seed(3)
    uniform = torch.rand(draws, vocab, generator=g)
    for top_k, top_p, temperature in [(0, 1.0, 0.7), (4, 1.0, 1.0), (0, 0.6, 1.0)]:
        out = torch.empty(draws, dtype=torch.int64)
        sample_codes(logits, uniform, *_params(draws, temperature, top_k, top_p, False), out=out, impl="torch")
        probs = torch.softmax(logits[0] / temperature, -1)
        if top_k:
            probs[top_k:] = 0
        if top_p < 1.0:
            before = probs.cumsum(0) - probs
            probs[before >= top_p] = 0
        probs = probs / probs.sum()
        counts = torch.bincount(out, minlength=vocab).float()
        support = probs > 0
        assert counts[~support].sum() == 0
        expected = probs[support] * draws
        chi2 = (((counts[support] - expected) ** 2) / expected).sum().item()
        assert chi2 < 3 * support.sum().item() + 30, (top_k, top_p, chi2)


def test_folded_norm_scales_equal_an_explicit_rms_norm():
    """With the RMSNorm weight folded into the projection, each consumer applies the row's rstd(x): the same
    as norming x first (silu_mul on gate/up, v in the attention kernels, the logits in the sampler)."""
    g = torch.Generator().manual_seed(5)
    n, h, inter = 4, 48, 40
    x = torch.randn(n, h, generator=g) * 3
    w = torch.rand(h, generator=g) + 0.5
    normed = F.rms_norm(x, (h,), w, 1e-6)
    wgu = torch.randn(2 * inter, h, generator=g)
    ref = silu_mul(F.linear(normed, wgu))
    folded = F.linear(x, wgu * w[None, :])
    for impl in ("torch", "triton"):
        torch.testing.assert_close(silu_mul(folded, impl=impl, x=x, eps=1e-6), ref, atol=1e-4, rtol=1e-4)
    # attention inputs: q/k per-head norms cancel the row scale; v takes it
    hq, hkv, d = 2, 1, 64
    wqkv = torch.randn((hq + 2 * hkv) * d, h, generator=g) * 0.2
    qw, kw = torch.rand(d, generator=g) + 0.5, torch.rand(d, generator=g) + 0.5
    inv = rope_inv_freq(d, 1e4, torch.device("cpu"))
    pos, pages, offs = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])
    for impl in ("torch", "triton"):
        c_ref, c_fold = torch.zeros(3, 2, 2, hkv, d), torch.zeros(3, 2, 2, hkv, d)
        q_ref = qk_norm_rope_paged(F.linear(normed, wqkv), hq, hkv, d, qw, kw, inv, 1e-6, pos, pages, offs, c_ref,
                                   impl=impl)
        q_fold = qk_norm_rope_paged(F.linear(x, wqkv * w[None, :]), hq, hkv, d, qw, kw, inv, 1e-6, pos, pages, offs,
                                    c_fold, impl=impl, x=x)
        torch.testing.assert_close(q_fold, q_ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(c_fold, c_ref, atol=1e-4, rtol=1e-4)
        kv_ref = (torch.zeros(2, hkv, 16, d), torch.zeros(2, hkv, 16, d))
        kv_fold = (torch.zeros(2, hkv, 16, d), torch.zeros(2, hkv, 16, d))
        a_ref = depth_attention(F.linear(normed, wqkv), hq, hkv, d, qw, kw, inv, 1e-6, *kv_ref, 0, 2, impl=impl)
        a_fold = depth_attention(F.linear(x, wqkv * w[None, :]), hq, hkv, d, qw, kw, inv, 1e-6, *kv_fold, 0, 2,
                                 impl=impl, x=x)
        torch.testing.assert_close(a_fold, a_ref, atol=1e-4, rtol=1e-4)
    # the sampler's logits
    vocab = 80
    head = torch.randn(vocab, h, generator=g)
    uniform = torch.rand(n, vocab, generator=g)
    params = _params(n, 0.8, 10, 0.9, False)
    for impl in ("torch", "triton"):
        a, b = torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64)
        sample_codes(F.linear(normed, head), uniform, *params, out=a, impl=impl)
        sample_codes(F.linear(x, head * w[None, :]), uniform, *params, out=b, impl=impl, x=x)
        assert torch.equal(a, b), impl


@pytest.mark.parametrize("m,n,k", [(1, 96, 64), (3, 40, 300), (4, 64, 512), (2, 70, 256)])
def test_gemv_equals_f_linear(m, n, k):
    """Plain and residual products, rows strided or not; more rows than MAX_ROWS fall back to cuBLAS. Every
    n < 2048 plans BLOCK_N 4: n = 70 ends in a partial block (masked columns) in 18 programs, where n = 1030
    took 258 (the interpreter runs them one by one); k = 300 ends in a partial K tile, k = 512 takes two."""
    from voxrt.engine.runtime.kernels.gemv import add_linear_, linear  # noqa: PLC0415

    g = torch.Generator().manual_seed(m * 7 + n)
    x = torch.randn(2 * m, k, generator=g)[::2]  # strided rows
    w = torch.randn(n, k, generator=g) / math.sqrt(k)
    ref = F.linear(x, w)
    for impl in ("torch", "triton"):
        torch.testing.assert_close(linear(x, w, impl=impl, force=True), ref, atol=1e-4, rtol=1e-4)
        res = torch.randn(m, n, generator=torch.Generator().manual_seed(1))
        expected = res + ref
        add_linear_(res, x, w, impl=impl, force=True)
        torch.testing.assert_close(res, expected, atol=1e-4, rtol=1e-4)
    many = torch.randn(9, k, generator=g)
    torch.testing.assert_close(linear(many, w, impl="triton", force=True), F.linear(many, w))


def test_gemv_takes_the_products_it_measured_faster_on():
    from voxrt.engine.runtime.kernels.gemv import prefers_gemv  # noqa: PLC0415

    assert prefers_gemv(1, 12288, 2048) and prefers_gemv(1, 4096, 1024)
    assert prefers_gemv(2, 1024, 2048) and prefers_gemv(2, 1024, 3072) and not prefers_gemv(2, 4096, 1024)
    assert prefers_gemv(4, 1024, 2048) and not prefers_gemv(4, 1024, 3072) and not prefers_gemv(8, 1024, 2048)


@pytest.mark.parametrize("dtype", DTYPES)
def test_snake_beta_equals_the_codec_layers_math(dtype):
    from voxrt.engine.runtime.kernels.snake import snake_beta  # noqa: PLC0415
    from voxrt.models.qwen3_tts.codec_layers import SnakeBeta  # noqa: PLC0415

    g = torch.Generator().manual_seed(3)
    layer = SnakeBeta(6)
    with torch.no_grad():
        layer.alpha.copy_(torch.randn(6, generator=g) * 0.5)
        layer.beta.copy_(torch.randn(6, generator=g) * 0.5)
    x = (torch.randn(3, 6, 1500, generator=g) * 2).to(dtype)  # more than one 1024-sample block a row
    with torch.no_grad():
        expected = layer(x.float()).to(dtype)  # float32 math, rounded once: what the kernel computes
    alpha, inv_beta = layer.alpha.float().exp(), 1.0 / (layer.beta.float().exp() + 1e-9)
    # the torch ops round after each of five ops in bfloat16 (loose); the kernel once (an ulp: the interpreter
    # truncates where the GPU rounds)
    torch.testing.assert_close(snake_beta(x, alpha, inv_beta, "torch"), expected, **_tol(dtype, loose=True))
    torch.testing.assert_close(snake_beta(x, alpha, inv_beta, "triton"), expected, **_tol(dtype))
    # into a strided view: a conv's padded input, behind 4 columns of context that stay untouched
    padded = torch.full((3, 6, 4 + 1500), 7.0, dtype=dtype)
    out = snake_beta(x, alpha, inv_beta, "triton", out=padded[..., 4:])
    assert out.data_ptr() == padded[..., 4:].data_ptr()
    torch.testing.assert_close(padded[..., 4:], expected, **_tol(dtype))
    assert bool((padded[..., :4] == 7.0).all())
    with pytest.raises(ValueError, match="alpha"):
        snake_beta(x, alpha[:3], inv_beta, "triton")
