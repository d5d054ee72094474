"""sample() and apply_repetition_penalty() on CPU: greedy, top-k, top-p, suppress, per-row mixing,
the penalty's transformers semantics, and the SamplingTensors helpers. Seeded, so deterministic."""

from __future__ import annotations

import pytest
import torch

from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.sampling import SamplingTensors, apply_repetition_penalty, sample

CPU = torch.device("cpu")
VOCAB = 32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


def tensors(*params: SamplingParams, pad_to: int | None = None) -> SamplingTensors:
    return SamplingTensors.from_params(list(params), CPU, pad_to=pad_to)


def repeat(params: SamplingParams, n: int) -> SamplingTensors:
    return tensors(*([params] * n))


def random_logits(rows: int, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randn(rows, vocab) * 3.0


# --- greedy -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1e-3, 0.5, 1.0, 5.0, 100.0])
def test_greedy_returns_argmax_regardless_of_temperature(temperature):
    logits = random_logits(16)
    st = repeat(SamplingParams(greedy=True, temperature=temperature, top_k=7, top_p=0.3), 16)
    for _ in range(5):
        assert torch.equal(sample(logits, st), logits.argmax(-1))


def test_greedy_on_empty_tensors_defaults():
    logits = random_logits(4)
    assert torch.equal(sample(logits, SamplingTensors.empty(4, CPU)), logits.argmax(-1))


def test_output_shape_and_dtype():
    logits = random_logits(5)
    out = sample(logits, repeat(SamplingParams(), 5))
    assert out.shape == (5,)
    assert out.dtype == torch.int64
    assert ((out >= 0) & (out < VOCAB)).all()


def test_low_precision_logits_are_accepted():
    logits = random_logits(6).to(torch.bfloat16)
    out = sample(logits, repeat(SamplingParams(greedy=True), 6))
    assert torch.equal(out, logits.float().argmax(-1))


# --- top-k / top-p ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.5, 1.0, 10.0])
def test_top_k_1_equals_argmax(temperature):
    logits = random_logits(64)
    st = repeat(SamplingParams(top_k=1, top_p=1.0, temperature=temperature), 64)
    for _ in range(10):
        assert torch.equal(sample(logits, st), logits.argmax(-1))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 10.0])
def test_tiny_top_p_keeps_only_the_top_token(temperature):
    logits = random_logits(64)
    st = repeat(SamplingParams(top_k=0, top_p=1e-6, temperature=temperature), 64)
    for _ in range(10):
        assert torch.equal(sample(logits, st), logits.argmax(-1))


def test_top_k_3_never_leaves_the_top_3():
    rows, draws = 8, 250
    # Close logits, so that tokens ranked 4+ would be drawn often if the filter leaked; high temperature too.
    logits = torch.randn(rows, VOCAB) * 0.1
    top3 = logits.topk(3, dim=-1).indices
    st = repeat(SamplingParams(top_k=3, top_p=1.0, temperature=5.0), rows)
    seen = [set() for _ in range(rows)]
    for _ in range(draws):
        out = sample(logits, st)
        assert (out[:, None] == top3).any(-1).all(), (out, top3)
        for r, t in enumerate(out.tolist()):
            seen[r].add(t)
    # and it really samples among all three
    assert all(s == set(top3[r].tolist()) for r, s in enumerate(seen))


def test_top_p_keeps_the_nucleus_including_the_crossing_token():
    # probs 0.4, 0.3, 0.2, 0.1 (in shuffled vocab order): top_p 0.5 keeps the 0.4 and 0.3 tokens only
    # (transformers' TopPLogitsWarper: the token whose cumulative crosses top_p is kept).
    probs = torch.tensor([0.2, 0.4, 0.1, 0.3])
    logits = probs.log().expand(4000, 4).contiguous()
    out = sample(logits, repeat(SamplingParams(top_k=0, top_p=0.5, temperature=1.0), 4000))
    assert set(out.tolist()) == {1, 3}
    frac_top = (out == 1).float().mean().item()
    assert abs(frac_top - 0.4 / 0.7) < 0.04


def test_top_k_and_top_p_combined():
    # top_k=3 renormalizes to 0.4/0.9, 0.3/0.9, 0.2/0.9; top_p 0.7 then keeps 0.444 and 0.333 (crossing).
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    logits = probs.log().expand(2000, 4).contiguous()
    out = sample(logits, repeat(SamplingParams(top_k=3, top_p=0.7, temperature=1.0), 2000))
    assert set(out.tolist()) == {2, 3}


def test_sampled_frequencies_follow_softmax_over_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    temperature = 2.0
    n = 20000
    out = sample(logits.expand(n, 4).contiguous(), repeat(SamplingParams(top_k=0, top_p=1.0, temperature=temperature), n))
    freq = torch.bincount(out, minlength=4).float() / n
    expected = torch.softmax(logits / temperature, dim=-1)
    assert torch.allclose(freq, expected, atol=0.015), (freq, expected)


def test_flat_distribution_varies():
    logits = torch.zeros(1, VOCAB)
    st = repeat(SamplingParams(top_k=0, top_p=1.0, temperature=1.0), 1)
    draws = [sample(logits, st).item() for _ in range(200)]
    assert len(set(draws)) >= 25  # 32 equally likely tokens, 200 draws: essentially all appear
    assert max(draws.count(t) for t in set(draws)) < 30  # no token dominates (mean is 6.25)


def test_rows_of_one_call_are_independent():
    n = 200
    out = sample(torch.zeros(n, VOCAB), repeat(SamplingParams(top_k=0, top_p=1.0, temperature=1.0), n))
    assert len(set(out.tolist())) >= 25


# --- suppress -----------------------------------------------------------------------------------------------------


def test_suppressed_tokens_are_never_sampled_nor_greedy():
    rows = 16
    logits = random_logits(rows)
    top = logits.argmax(-1)
    suppress = torch.zeros(VOCAB, dtype=torch.bool)
    suppress[top] = True  # every row's argmax is suppressed
    suppress[:4] = True
    allowed_logits = logits.masked_fill(suppress, float("-inf"))

    greedy = repeat(SamplingParams(greedy=True), rows)
    out = sample(logits, greedy, suppress)
    assert not suppress[out].any()
    assert torch.equal(out, allowed_logits.argmax(-1))

    st = repeat(SamplingParams(top_k=0, top_p=1.0, temperature=50.0), rows)  # nearly flat
    for _ in range(100):
        out = sample(logits, st, suppress)
        assert not suppress[out].any()


def test_suppress_with_top_k_larger_than_allowed_set():
    # only tokens 5 and 9 allowed; top_k=10 would include suppressed ones if they were not -inf
    suppress = torch.ones(VOCAB, dtype=torch.bool)
    suppress[[5, 9]] = False
    logits = random_logits(50)
    st = repeat(SamplingParams(top_k=10, top_p=1.0, temperature=3.0), 50)
    seen = set()
    for _ in range(10):
        out = sample(logits, st, suppress)
        seen |= set(out.tolist())
    assert seen <= {5, 9}
    assert seen == {5, 9}


def test_suppress_does_not_modify_input_logits():
    logits = random_logits(3)
    before = logits.clone()
    suppress = torch.zeros(VOCAB, dtype=torch.bool)
    suppress[::2] = True
    sample(logits, repeat(SamplingParams(), 3), suppress)
    assert torch.equal(logits, before)


# --- per-row parameters -------------------------------------------------------------------------------------------


def test_mixed_batch_greedy_and_sampled_rows():
    logits = torch.zeros(2, VOCAB)
    logits[0, 7] = 1.0  # greedy row: argmax 7, but near-flat, so a sampled row would vary
    st = tensors(SamplingParams(greedy=True), SamplingParams(top_k=0, top_p=1.0, temperature=1.0))
    firsts, seconds = set(), set()
    for _ in range(200):
        out = sample(logits, st)
        firsts.add(out[0].item())
        seconds.add(out[1].item())
    assert firsts == {7}
    assert len(seconds) >= 20


def test_per_row_top_k_and_temperature():
    logits = torch.randn(3, VOCAB) * 0.1
    st = tensors(SamplingParams(top_k=1, temperature=5.0),
                 SamplingParams(top_k=2, temperature=5.0),
                 SamplingParams(greedy=True, top_k=0))
    top2 = logits[1].topk(2).indices.tolist()
    seen1 = set()
    for _ in range(200):
        out = sample(logits, st)
        assert out[0].item() == logits[0].argmax().item()
        assert out[1].item() in top2
        assert out[2].item() == logits[2].argmax().item()
        seen1.add(out[1].item())
    assert seen1 == set(top2)


def test_seeded_sampling_is_reproducible():
    logits = random_logits(8)
    st = repeat(SamplingParams(top_k=0, top_p=0.9, temperature=1.3), 8)
    torch.manual_seed(7)
    a = [sample(logits, st) for _ in range(5)]
    torch.manual_seed(7)
    b = [sample(logits, st) for _ in range(5)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# --- repetition penalty -------------------------------------------------------------------------------------------


def _reference_penalty(logits, history, penalty):
    """transformers' RepetitionPenaltyLogitsProcessor, element by element."""
    out = logits.clone()
    for b in range(logits.shape[0]):
        for v in range(logits.shape[1]):
            if history[b, v]:
                x = logits[b, v].item()
                out[b, v] = x * penalty[b].item() if x < 0 else x / penalty[b].item()
    return out


def test_repetition_penalty_by_hand():
    logits = torch.tensor([[2.0, -2.0, 0.0, 4.0, -1.0],
                           [3.0, -3.0, 1.5, -0.5, 0.0]])
    history = torch.tensor([[True, True, True, False, False],
                            [False, True, True, True, False]])
    penalty = torch.tensor([2.0, 1.5])
    expected = torch.tensor([[1.0, -4.0, 0.0, 4.0, -1.0],
                             [3.0, -4.5, 1.0, -0.75, 0.0]])
    out = apply_repetition_penalty(logits, history, penalty)
    assert torch.allclose(out, expected)
    assert torch.allclose(out, _reference_penalty(logits, history, penalty))


def test_repetition_penalty_random_matches_reference_and_leaves_input():
    logits = torch.randn(4, 20)
    history = torch.rand(4, 20) < 0.4
    penalty = torch.tensor([1.0, 1.05, 1.3, 0.8])  # < 1 rewards repetition, same formula
    before = logits.clone()
    out = apply_repetition_penalty(logits, history, penalty)
    assert torch.equal(logits, before)
    assert torch.allclose(out, _reference_penalty(logits, history, penalty))
    assert torch.equal(out[~history], logits[~history])
    assert torch.equal(out[0], logits[0])  # penalty 1 is the identity


def test_repetition_penalty_lowers_seen_tokens():
    logits = torch.tensor([[3.0, 2.9, -1.0, -1.1]])
    history = torch.tensor([[True, False, True, False]])
    out = apply_repetition_penalty(logits, history, torch.tensor([1.2]))
    assert out.argmax(-1).item() == 1  # the seen top token fell below the unseen one
    assert out[0, 2] < out[0, 3]  # negative seen logit pushed further down


# --- SamplingTensors ----------------------------------------------------------------------------------------------


def test_from_params_values_and_dtypes():
    p0 = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.1, greedy=False)
    p1 = SamplingParams(temperature=1.3, top_k=0, top_p=1.0, repetition_penalty=1.0, greedy=True)
    st = tensors(p0, p1)
    assert st.temperature.dtype == torch.float32 and st.top_p.dtype == torch.float32
    assert st.repetition_penalty.dtype == torch.float32
    assert st.top_k.dtype == torch.int64 and st.greedy.dtype == torch.bool
    assert torch.allclose(st.temperature, torch.tensor([0.7, 1.3]))
    assert st.top_k.tolist() == [20, 0]
    assert torch.allclose(st.top_p, torch.tensor([0.8, 1.0]))
    assert torch.allclose(st.repetition_penalty, torch.tensor([1.1, 1.0]))
    assert st.greedy.tolist() == [False, True]


def test_from_params_pads_with_greedy_rows():
    p = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.1)
    st = tensors(p, p, pad_to=5)
    pad = SamplingParams(greedy=True)
    for t in (st.temperature, st.top_k, st.top_p, st.repetition_penalty, st.greedy):
        assert t.shape == (5,)
    assert st.greedy.tolist() == [False, False, True, True, True]
    assert torch.allclose(st.temperature[2:], torch.full((3,), pad.temperature))
    assert st.top_k[2:].tolist() == [pad.top_k] * 3
    assert torch.allclose(st.repetition_penalty[2:], torch.full((3,), pad.repetition_penalty))
    logits = random_logits(5)
    assert torch.equal(sample(logits, st)[2:], logits[2:].argmax(-1))


def test_from_params_without_pad_and_empty():
    assert tensors(SamplingParams(), SamplingParams()).greedy.shape == (2,)
    assert tensors(SamplingParams(), pad_to=1).greedy.shape == (1,)
    st = tensors(pad_to=3)
    assert st.greedy.tolist() == [True, True, True]


def test_empty_defaults():
    st = SamplingTensors.empty(3, CPU)
    assert st.greedy.all() and (st.top_k == 0).all()
    assert (st.temperature == 1).all() and (st.top_p == 1).all() and (st.repetition_penalty == 1).all()


def test_copy_fills_prefix_in_place_and_keeps_the_rest():
    static = SamplingTensors.empty(4, CPU)
    ptrs = [t.data_ptr() for t in (static.temperature, static.top_k, static.top_p, static.repetition_penalty,
                                   static.greedy)]
    static.copy_(tensors(SamplingParams(temperature=0.5, top_k=3, top_p=0.9, repetition_penalty=1.2),
                         SamplingParams(temperature=2.0, top_k=0, top_p=0.5, repetition_penalty=0.9)))
    assert [t.data_ptr() for t in (static.temperature, static.top_k, static.top_p, static.repetition_penalty,
                                   static.greedy)] == ptrs
    assert torch.allclose(static.temperature, torch.tensor([0.5, 2.0, 1.0, 1.0]))
    assert static.top_k.tolist() == [3, 0, 0, 0]
    assert torch.allclose(static.top_p, torch.tensor([0.9, 0.5, 1.0, 1.0]))
    assert torch.allclose(static.repetition_penalty, torch.tensor([1.2, 0.9, 1.0, 1.0]))
    assert static.greedy.tolist() == [False, False, True, True]

    # a later, shorter copy leaves row 1 as the previous step set it
    static.copy_(tensors(SamplingParams(greedy=True, top_k=7)))
    assert static.greedy.tolist() == [True, False, True, True]
    assert static.top_k.tolist() == [7, 0, 0, 0]


def test_narrow_is_a_view_of_the_first_rows():
    st = tensors(SamplingParams(top_k=1), SamplingParams(top_k=2), SamplingParams(top_k=3))
    n = st.narrow(2)
    for t in (n.temperature, n.top_k, n.top_p, n.repetition_penalty, n.greedy):
        assert t.shape == (2,)
    assert n.top_k.tolist() == [1, 2]
    n.top_k[0] = 9  # a view: writes show through
    assert st.top_k.tolist() == [9, 2, 3]
    st.top_k[:] = 1  # and writes to the parent show in the view: both rows now argmax
    logits = random_logits(2)
    assert torch.equal(sample(logits, n), logits.argmax(-1))
