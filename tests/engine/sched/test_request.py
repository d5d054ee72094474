"""Request states: the allowed transitions succeed, every other one raises InvalidTransition."""

from __future__ import annotations

import itertools

import pytest

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.request import TERMINAL, InvalidTransition, PromptTokens, Request, RequestState

S = RequestState

ALLOWED = {
    (S.WAITING, S.RUNNING), (S.WAITING, S.DRAINING), (S.WAITING, S.CANCELLED), (S.WAITING, S.FAILED),
    (S.RUNNING, S.STARVED), (S.RUNNING, S.DRAINING), (S.RUNNING, S.CANCELLED), (S.RUNNING, S.FAILED),
    (S.STARVED, S.RUNNING), (S.STARVED, S.CANCELLED), (S.STARVED, S.FAILED),
    (S.DRAINING, S.FINISHED), (S.DRAINING, S.CANCELLED), (S.DRAINING, S.FAILED),
}
ALL_PAIRS = list(itertools.product(S, S))
FORBIDDEN = [pair for pair in ALL_PAIRS if pair not in ALLOWED]


def tokenize(text):
    return [], []


def make(state: RequestState = S.WAITING) -> Request:
    request = Request.create("req-1", "voice", SamplingParams(), tokenize, arrival_ns=123)
    request.state = state
    return request


def test_new_request_is_waiting_and_empty():
    request = make()
    assert request.state is S.WAITING
    assert not request.is_terminal
    assert request.num_frames == 0
    assert request.num_text_pending == 0
    assert not request.is_generation_done
    assert request.pages == [] and request.slot is None
    assert request.arrival_ns == 123


@pytest.mark.parametrize(("old", "new"), sorted(ALLOWED, key=lambda p: (p[0].value, p[1].value)),
                         ids=lambda s: s.name)
def test_allowed_transition(old, new):
    request = make(old)
    request.transition(new)
    assert request.state is new
    assert request.is_terminal == (new in TERMINAL)


@pytest.mark.parametrize(("old", "new"), FORBIDDEN, ids=lambda s: s.name)
def test_forbidden_transition_raises_naming_both_states(old, new):
    request = make(old)
    with pytest.raises(InvalidTransition) as info:
        request.transition(new)
    msg = str(info.value)
    assert old.name in msg
    assert new.name in msg
    assert "req-1" in msg
    assert request.state is old  # unchanged


def test_terminal_states_are_dead_ends():
    assert TERMINAL == {S.FINISHED, S.CANCELLED, S.FAILED}
    for state in TERMINAL:
        request = make(state)
        assert request.is_terminal
        for new in S:
            with pytest.raises(InvalidTransition):
                request.transition(new)


def test_the_happy_paths_walk():
    request = make()
    for new in (S.RUNNING, S.STARVED, S.RUNNING, S.DRAINING, S.FINISHED):
        request.transition(new)
    assert request.is_terminal
    empty = make()
    empty.transition(S.DRAINING)  # final empty text: nothing to generate
    empty.transition(S.FINISHED)


def test_invalid_transition_is_an_assertion_error():
    # A broken transition is a bug in the scheduler, not a user error.
    assert issubclass(InvalidTransition, AssertionError)


def test_text_pending_and_generation_done():
    def words(text):
        import re
        ms = list(re.finditer(r"\S+", text))
        return [len(m.group()) for m in ms], [m.span() for m in ms]

    request = Request.create("r", "v", SamplingParams(), words, 0)
    request.feed.append("one two three", is_final=True)
    assert request.num_text_pending == 3
    request.num_text_consumed = 2
    assert request.num_text_pending == 1
    request.finish_reason = "length"
    assert request.is_generation_done


def test_prompt_tokens_validation():
    p = PromptTokens((1, 2, 3), (-1, -1, 5), num_text_tokens_used=1)
    assert len(p) == 3
    with pytest.raises(ValueError):
        PromptTokens((), (), 0)
    with pytest.raises(ValueError):
        PromptTokens((1, 2), (1,), 1)
