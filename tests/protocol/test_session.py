"""The protocol session state machine: the start flow, every client message, every bad input of protocol.md's
"Errors and limits", and the engine's answers. After each non-fatal error the session still works."""

from __future__ import annotations

import json
import random

import pytest

from voxrt.protocol.actions import (AppendText, CancelContext, CloseConnection, EndContext, EndSession, FlushContext,
                                    OpenContext, ReportPlayback, SendText, StartSession)
from voxrt.protocol.config import Limits, OutputFormat, Pacing, SessionConfig
from voxrt.protocol.context import Context, ContextState
from voxrt.protocol.errors import InvalidTransition
from voxrt.protocol.session import Session, SessionState

VOICES = ("default", "alice")
MODELS = ("tiny", "big")


def make(limits: Limits = Limits(), now_ms: float = 0.0) -> Session:
    return Session("s1", limits, VOICES, "default", MODELS, "tiny", now_ms)


def send(session: Session, message, now_ms: float = 1.0) -> list:
    return session.receive_text(message if isinstance(message, str) else json.dumps(message), now_ms)


def started(limits: Limits = Limits(), **start) -> Session:
    session = make(limits)
    actions = send(session, {"type": "session.start", **start})
    assert session.state is SessionState.ACTIVE, actions
    return session


def text(session: Session, context_id: str, value: str = "hi", now_ms: float = 1.0, **extra) -> list:
    return send(session, {"type": "text", "context_id": context_id, "text": value, **extra}, now_ms)


def wire(actions: list) -> list[dict]:
    """The JSON messages among the actions, decoded; every other action must not be in between."""
    return [json.loads(a.data) for a in actions if isinstance(a, SendText)]


def only_error(actions: list, code: str, *, context_id: str | None = None) -> dict:
    """The actions are exactly one non-fatal error with this code."""
    assert len(actions) == 1 and isinstance(actions[0], SendText), actions
    message = json.loads(actions[0].data)
    assert message["type"] == "error" and message["code"] == code and message["fatal"] is False, message
    assert message.get("context_id") == context_id
    return message


def fatal(actions: list, code: str, close_code: int) -> dict:
    """The actions are the fatal error message, then the close."""
    assert len(actions) == 2 and isinstance(actions[0], SendText) and actions[1] == CloseConnection(close_code, code)
    message = json.loads(actions[0].data)
    assert message["type"] == "error" and message["code"] == code and message["fatal"] is True, message
    return message


def still_works(session: Session) -> None:
    assert session.state is SessionState.ACTIVE
    assert wire(send(session, {"type": "ping", "id": "alive"}, 2.0)) == [
        {"type": "pong", "id": "alive", "server_time_ms": 2}]


def is_dead(session: Session) -> None:
    assert session.state is SessionState.CLOSED
    assert send(session, {"type": "ping"}) == []
    assert session.receive_bytes(b"x", 5.0) == []
    assert session.poll(1e12) == []
    for call in (lambda: session.on_flushed("t1"), lambda: session.on_context_error("t1", "x", "y"),
                 lambda: session.on_context_done("t1", "completed", 0, {}),
                 lambda: session.on_context_cancelled("t1", 0, "", 0, {}), lambda: session.fail("x", "y", 4400)):
        assert call() == []


# ---- construction -----------------------------------------------------------------------------------------------


def test_defaults_must_be_served():
    with pytest.raises(ValueError, match="default_voice"):
        Session("s", Limits(), VOICES, "bob", MODELS, "tiny", 0)
    with pytest.raises(ValueError, match="default_model"):
        Session("s", Limits(), VOICES, "default", MODELS, "huge", 0)


# ---- the start flow ---------------------------------------------------------------------------------------------


def test_start_with_defaults():
    session = make()
    assert session.state is SessionState.AWAITING_START and session.config is None
    actions = send(session, {"type": "session.start"})
    config = SessionConfig("default", "tiny", OutputFormat(), Pacing(), "auto")
    assert actions[0] == StartSession(config) and len(actions) == 2
    assert wire(actions) == [{"type": "session.started", "session_id": "s1", "model": "tiny", "voice": "default",
                              "output": {"codec": "opus", "sample_rate": 48000, "frame_ms": 20},
                              "limits": {"max_contexts": 8, "max_text_chars": 20000, "max_message_bytes": 65536,
                                         "inactivity_timeout_s": 60.0}}]
    assert session.state is SessionState.ACTIVE and session.config == config


def test_start_with_every_option_resolves_them():
    session = make()
    actions = send(session, {"type": "session.start", "voice": "alice", "model": "big", "segmentation": "sentence",
                             "output": {"codec": "mulaw", "sample_rate": 8000}, "pacing": {"lead_ms": 500}})
    config = SessionConfig("alice", "big", OutputFormat("mulaw", 8000, 20), Pacing("realtime", 500), "sentence")
    assert actions[0] == StartSession(config)
    assert wire(actions)[0]["output"] == {"codec": "mulaw", "sample_rate": 8000, "frame_ms": 20}
    assert wire(actions)[0]["voice"] == "alice" and wire(actions)[0]["model"] == "big"


def test_unknown_voice_lists_the_voices_and_the_client_may_retry():
    session = make()
    message = only_error(send(session, {"type": "session.start", "voice": "bob"}), "unknown_voice")
    assert "bob" in message["message"] and "default, alice" in message["message"]
    assert session.state is SessionState.AWAITING_START
    assert isinstance(send(session, {"type": "session.start", "voice": "alice"})[0], StartSession)
    still_works(session)


def test_unknown_model():
    session = make()
    message = only_error(send(session, {"type": "session.start", "model": "huge"}), "unknown_model")
    assert "tiny, big" in message["message"]
    assert session.state is SessionState.AWAITING_START
    send(session, {"type": "session.start"})
    still_works(session)


@pytest.mark.parametrize(("start", "named"), [
    ({"output": {"codec": "mp3"}}, ["output.codec", "opus, pcm16, mulaw, alaw"]),
    ({"output": {"sample_rate": 44100}}, ["output.sample_rate", "8000, 16000, 24000, 48000"]),
    ({"output": {"frame_ms": 25}}, ["output.frame_ms", "10, 20, 40, 60"]),
    ({"output": "opus"}, ["output"]),
    ({"pacing": {"mode": "fast"}}, ["pacing.mode", "realtime, burst"]),
    ({"pacing": {"lead_ms": 0}}, ["pacing.lead_ms"]),
    ({"pacing": 5}, ["pacing"]),
    ({"segmentation": "words"}, ["segmentation", "auto, sentence, none"]),
    ({"voice": 5}, ["voice"]),
])
def test_bad_start_fields_are_non_fatal_and_named(start, named):
    session = make()
    message = only_error(send(session, {"type": "session.start", **start}), "invalid_message")
    for words in named:
        assert words in message["message"]
    assert session.state is SessionState.AWAITING_START
    send(session, {"type": "session.start"})
    still_works(session)


def test_session_start_again_is_a_non_fatal_error():
    session = started()
    only_error(send(session, {"type": "session.start"}), "invalid_message")
    assert session.config == SessionConfig("default", "tiny", OutputFormat(), Pacing())
    still_works(session)


@pytest.mark.parametrize("message", [{"type": "text", "context_id": "t1", "text": "hi"}, {"type": "ping"},
                                     {"type": "session.end"}, {"type": "cancel", "context_id": "*"},
                                     {"type": "text", "context_id": "t1"}, {"type": "playback", "context_id": 3}])
def test_first_message_not_session_start_is_fatal(message):
    session = make()
    fatal(send(session, message), "session_not_started", 4400)
    is_dead(session)


@pytest.mark.parametrize(("data", "code"), [("hello", "invalid_json"), ("[1]", "invalid_json"),
                                            ('{"no": "type"}', "invalid_message"),
                                            ('{"type": "hello"}', "unknown_type")])
def test_garbage_before_start_is_non_fatal(data, code):
    session = make()
    only_error(send(session, data), code)
    assert session.state is SessionState.AWAITING_START
    send(session, {"type": "session.start"})
    still_works(session)


def test_binary_before_start_is_non_fatal():
    session = make()
    only_error(session.receive_bytes(b"\x01\x02", 1.0), "unexpected_binary")
    send(session, {"type": "session.start"})
    still_works(session)


# ---- text and contexts -----------------------------------------------------------------------------------------


def test_pinned_length_goes_with_the_opening_text_only():
    session = started()
    session.pinned_lengths = True  # `voxrt serve --allow-pinned-lengths`
    actions = send(session, {"type": "text", "context_id": "p", "text": "Hi", "num_frames": 40})
    assert actions[0] == OpenContext("p", 1, 40, "Hi")
    later = send(session, {"type": "text", "context_id": "p", "text": " there", "num_frames": 7})
    assert later == [AppendText("p", " there")]  # an open context keeps its length


def test_pinned_length_is_an_unknown_field_where_the_server_does_not_honour_it():
    """protocol.md: unknown fields are ignored. A server without --allow-pinned-lengths neither honours nor checks
    `num_frames` (a bad value once dropped the text with an invalid_message)."""
    session = started()
    for bad in ("lots", 0, -1, 1.5, True, [], 10**9):
        context_id = f"p{bad!r}"
        actions = send(session, {"type": "text", "context_id": context_id, "text": "Hi", "num_frames": bad})
        assert actions[0] == OpenContext(context_id, actions[0].index, None, "Hi")
    session.pinned_lengths = True
    only_error(send(session, {"type": "text", "context_id": "q", "text": "Hi", "num_frames": "lots"}),
               "invalid_message", context_id="q")


def test_text_opens_a_context_with_its_text_then_appends():
    """The opening text goes with the OpenContext (the gateway submits it with the engine request), not in an
    AppendText after it."""
    session = started()
    actions = text(session, "t1", "Sure, Dr. Smith's")
    assert actions[0] == OpenContext("t1", 1, None, "Sure, Dr. Smith's")
    assert wire(actions[1:2]) == [{"type": "context.started", "context_id": "t1", "index": 1}]
    assert actions[2:] == []
    assert text(session, "t1", " balance is $3.50.") == [AppendText("t1", " balance is $3.50.")]
    assert session.context_state("t1") is ContextState.OPEN and session.open_context_ids() == ["t1"]


def test_text_with_flush_and_empty_text():
    session = started()
    actions = text(session, "t1", "", flush=True)
    assert [type(a) for a in actions] == [OpenContext, SendText, FlushContext]  # no empty AppendText
    assert text(session, "t1", "") == []
    assert text(session, "t1", "go", flush=True) == [AppendText("t1", "go"), FlushContext("t1")]
    assert text(session, "t2", "")[0] == OpenContext("t2", 2)  # empty text still opens
    opened = text(session, "t3", "now", flush=True)
    assert opened[0] == OpenContext("t3", 3, None, "now") and opened[2:] == [FlushContext("t3")]


def test_indexes_start_at_1_and_are_unique_within_the_session():
    session = started(Limits(max_contexts=2))
    seen = []
    for i in range(6):
        context_id = f"t{i}"
        seen.append(text(session, context_id)[0].index)
        assert session.context_index(context_id) == seen[-1]
        send(session, {"type": "context.end", "context_id": context_id})
        session.on_context_done(context_id, "completed", 100, {})
    assert seen == [1, 2, 3, 4, 5, 6]


def test_a_long_session_walks_only_its_live_contexts():
    """Every context id stays known (ids are not reused), but opening, polling and cancelling walk only the
    contexts not done: a session of thousands of turns pays for its live ones, not for its history."""
    session = started(Limits(max_contexts=2))
    for i in range(3000):
        text(session, f"t{i}")
        send(session, {"type": "context.end", "context_id": f"t{i}"})
        session.on_context_done(f"t{i}", "completed", 100, {})
    text(session, "a")
    text(session, "b")
    only_error(text(session, "c"), "context_limit", context_id="c")  # the limit still counts the live ones
    assert session.open_context_ids() == ["a", "b"]
    assert list(session._live) == ["a", "b"]  # the 3000 done ones left it
    assert len(session._contexts) == 3002
    only_error(text(session, "t7"), "invalid_message", context_id="t7")  # and are still not reused
    session.on_context_done("a", "completed", 100, {})
    assert session.open_context_ids() == ["b"]
    assert cancel(session, "*") == [CancelContext("b")]  # cancel-all: the live one alone
    still_works(session)


def test_indexes_run_out_at_65535():
    session = started(Limits(max_contexts=2))
    session._next_index = 0xFFFF  # as after 65534 contexts
    assert text(session, "last")[0].index == 0xFFFF
    message = only_error(text(session, "one-more"), "context_limit", context_id="one-more")
    assert "new session" in message["message"]


def test_context_ids_are_not_reused():
    session = started()
    text(session, "t1")
    send(session, {"type": "context.end", "context_id": "t1"})
    only_error(text(session, "t1"), "invalid_message", context_id="t1")  # ENDED
    session.on_context_done("t1", "completed", 100, {})
    message = only_error(text(session, "t1"), "invalid_message", context_id="t1")  # DONE
    assert "not reused" in message["message"]
    still_works(session)


def test_context_limit_counts_contexts_not_done():
    session = started(Limits(max_contexts=2))
    text(session, "a")
    text(session, "b")
    only_error(text(session, "c"), "context_limit", context_id="c")
    assert session.open_context_ids() == ["a", "b"]
    assert AppendText("a", "more") in text(session, "a", "more")  # open contexts go on
    send(session, {"type": "cancel", "context_id": "a"})
    only_error(text(session, "c"), "context_limit", context_id="c")  # CANCELLING still holds resources
    session.on_context_cancelled("a", 0, "", 0, {})
    assert text(session, "c")[0].index == 3
    still_works(session)


def test_text_too_long():
    session = started(Limits(max_text_chars=10))
    only_error(text(session, "t1", "x" * 11), "text_too_long", context_id="t1")
    assert session.context_state("t1") is None  # not opened by a dropped text
    assert text(session, "t1", "x" * 6)[0] == OpenContext("t1", 1, None, "x" * 6)
    only_error(text(session, "t1", "é" * 5), "text_too_long", context_id="t1")  # counted in characters
    assert text(session, "t1", "é" * 4) == [AppendText("t1", "é" * 4)]  # exactly at the limit: fine
    only_error(text(session, "t1", "y", flush=True), "text_too_long", context_id="t1")  # the whole message drops
    assert session.context_state("t1") is ContextState.OPEN
    assert text(session, "t2", "z" * 10)[0].text == "z" * 10  # per context
    still_works(session)


def test_flush():
    session = started()
    only_error(send(session, {"type": "flush", "context_id": "t1"}), "unknown_context", context_id="t1")
    text(session, "t1")
    assert send(session, {"type": "flush", "context_id": "t1"}) == [FlushContext("t1")]
    send(session, {"type": "context.end", "context_id": "t1"})
    assert send(session, {"type": "flush", "context_id": "t1"}) == [FlushContext("t1")]  # ENDED: still answered
    assert wire(session.on_flushed("t1")) == [{"type": "flushed", "context_id": "t1"}]
    session.on_context_done("t1", "completed", 100, {})
    assert send(session, {"type": "flush", "context_id": "t1"}) == []  # moot: context.done was sent
    assert session.on_flushed("t1") == []
    still_works(session)


def test_context_end_and_done():
    session = started()
    only_error(send(session, {"type": "context.end", "context_id": "t1"}), "unknown_context", context_id="t1")
    text(session, "t1")
    assert send(session, {"type": "context.end", "context_id": "t1"}) == [EndContext("t1")]
    assert session.context_state("t1") is ContextState.ENDED and session.is_audio_allowed("t1")
    assert send(session, {"type": "context.end", "context_id": "t1"}) == []  # already ended: ignored
    actions = session.on_context_done("t1", "completed", 2040.4, {"ttfa_ms": 61.7})
    assert wire(actions) == [{"type": "context.done", "context_id": "t1", "reason": "completed", "audio_ms": 2040,
                              "metrics": {"ttfa_ms": 62}}]
    assert session.context_state("t1") is ContextState.DONE and session.open_context_ids() == []
    assert session.on_context_done("t1", "completed", 2040, {}) == []  # already done: ignored
    assert session.on_context_done("nope", "completed", 0, {}) == []
    assert send(session, {"type": "context.end", "context_id": "t1"}) == []
    still_works(session)


def test_engine_error_on_an_open_context():
    session = started()
    text(session, "t1")
    assert wire(session.on_context_error("t1", "request_failed", "synthesis failed")) == [
        {"type": "error", "code": "request_failed", "message": "synthesis failed", "fatal": False, "context_id": "t1"}]
    assert session.context_state("t1") is ContextState.OPEN
    assert wire(session.on_context_done("t1", "error", 0, {}))[0]["reason"] == "error"
    still_works(session)


def test_text_still_streaming_into_a_context_the_server_ended_is_dropped_quietly():
    """An agent streams tokens into a context the engine refused (`server_busy`) or failed: it has the error and
    context.done, but its tokens in flight (and its LLM's stream) keep coming. They are dropped without a reply,
    so they never add up to `max_invalid_messages` and close the session; flush and context.end for it are no-ops
    too. A context the client ended itself keeps its `invalid_message` for later text."""
    session = started(Limits(max_invalid_messages=3))
    text(session, "t1")
    session.on_context_error("t1", "server_busy", "server at capacity, retry later")
    session.on_context_done("t1", "error", 0, {})
    for i in range(50):
        assert text(session, "t1", f" token{i}", flush=i % 10 == 0) == []
    assert send(session, {"type": "flush", "context_id": "t1"}) == []
    assert send(session, {"type": "context.end", "context_id": "t1"}) == []
    assert session.state is SessionState.ACTIVE and session.context_state("t1") is ContextState.DONE
    # ended by the client, then done: later text is still the client's mistake
    text(session, "t2")
    send(session, {"type": "context.end", "context_id": "t2"})
    session.on_context_done("t2", "error", 0, {})
    only_error(text(session, "t2"), "invalid_message", context_id="t2")
    still_works(session)


def test_late_text_for_a_context_the_client_ended_is_an_error_that_never_closes_the_session():
    """Tokens in flight after the client's own cancel (barge-in) or context.end are each an `invalid_message`
    (context ids are not reused), but a well-formed message that came too late is not garbage: any number of
    them leave the session open, where real garbage still closes it after `max_invalid_messages`."""
    session = started(Limits(max_invalid_messages=3))
    text(session, "t1")
    send(session, {"type": "cancel", "context_id": "t1"})
    session.on_context_cancelled("t1", 0, "", 0, {})
    text(session, "t2")
    send(session, {"type": "context.end", "context_id": "t2"})
    for i in range(20):
        only_error(text(session, "t1" if i % 2 else "t2", f" token{i}"), "invalid_message",
                   context_id="t1" if i % 2 else "t2")
    assert session.state is SessionState.ACTIVE
    for _ in range(3):
        only_error(send(session, "not json"), "invalid_json")
    fatal(send(session, "not json"), "too_many_invalid_messages", 4400)


# ---- playback and ping -------------------------------------------------------------------------------------------


def test_playback():
    session = started()
    only_error(send(session, {"type": "playback", "context_id": "t1", "played_ms": 5}), "unknown_context",
               context_id="t1")
    text(session, "t1")
    assert send(session, {"type": "playback", "context_id": "t1", "played_ms": 820}) == [ReportPlayback("t1", 820.0)]
    session.on_context_done("t1", "completed", 1000, {})
    # a report that crossed context.done in flight is ignored, not an error
    assert send(session, {"type": "playback", "context_id": "t1", "played_ms": 900}) == []
    still_works(session)


def test_ping_answers_with_the_same_id_and_rounded_time():
    session = started()
    assert wire(send(session, {"type": "ping", "id": 7}, 1234.56)) == [
        {"type": "pong", "id": 7, "server_time_ms": 1235}]
    assert wire(send(session, {"type": "ping"}, 10)) == [{"type": "pong", "id": None, "server_time_ms": 10}]


# ---- cancel ------------------------------------------------------------------------------------------------------


def cancel(session: Session, context_id: str) -> list:
    return send(session, {"type": "cancel", "context_id": context_id})


def test_cancel_is_answered_after_the_stop_is_confirmed():
    session = started()
    text(session, "t1")
    assert cancel(session, "t1") == [CancelContext("t1")]  # nothing on the wire yet
    assert session.context_state("t1") is ContextState.CANCELLING and not session.is_audio_allowed("t1")
    only_error(text(session, "t1"), "invalid_message", context_id="t1")
    assert send(session, {"type": "playback", "context_id": "t1", "played_ms": 300}) == [ReportPlayback("t1", 300.0)]
    assert session.on_context_done("t1", "completed", 900, {}) == []  # a cancelled context ends by on_context_cancelled
    actions = session.on_context_cancelled("t1", 820.2, "Sure, Dr. Smith's balance", 1500, {"ttfa_ms": 40})
    assert wire(actions) == [
        {"type": "cancelled", "context_id": "t1", "played_ms": 820, "spoken_text": "Sure, Dr. Smith's balance"},
        {"type": "context.done", "context_id": "t1", "reason": "cancelled", "audio_ms": 1500,
         "metrics": {"ttfa_ms": 40}}]
    assert session.context_state("t1") is ContextState.DONE
    assert session.on_context_cancelled("t1", 0, "", 0, {}) == []
    still_works(session)


def test_cancel_carries_the_time_it_arrived():
    """The position `cancelled` reports is the one when the cancel arrived (CancelContext.at_ms), not after the
    I/O layer's stop (gateway/context.py)."""
    session = started()
    text(session, "t1")
    text(session, "t2")
    assert [a.at_ms for a in send(session, {"type": "cancel", "context_id": "t1"}, now_ms=1234.5)] == [1234.5]
    assert [(a.context_id, a.at_ms) for a in send(session, {"type": "cancel", "context_id": "*"}, now_ms=2000.0)] == \
        [("t2", 2000.0)]  # t1 is cancelling already


def test_cancel_twice_gives_two_cancelled_after_the_stop_then_one_done():
    session = started()
    text(session, "t1")
    assert cancel(session, "t1") == [CancelContext("t1")]
    assert cancel(session, "t1") == []  # answered later, with the first
    messages = wire(session.on_context_cancelled("t1", 100, "hi", 200, {}))
    assert [m["type"] for m in messages] == ["cancelled", "cancelled", "context.done"]
    assert messages[0] == messages[1]


@pytest.mark.parametrize("context_id", ["never", "done"])
def test_cancel_unknown_or_done_is_answered_at_once(context_id):
    session = started()
    text(session, "done")
    session.on_context_done("done", "completed", 100, {})
    assert wire(cancel(session, context_id)) == [
        {"type": "cancelled", "context_id": context_id, "played_ms": 0, "spoken_text": ""}]
    assert wire(cancel(session, context_id))[0]["type"] == "cancelled"  # idempotent
    still_works(session)


def test_cancel_all():
    session = started()
    assert wire(cancel(session, "*")) == [  # nothing open: still answered, like any cancel
        {"type": "cancelled", "context_id": "*", "played_ms": 0, "spoken_text": ""}]
    for context_id in ("a", "b", "c", "d"):
        text(session, context_id)
    send(session, {"type": "context.end", "context_id": "b"})
    cancel(session, "c")
    session.on_context_done("d", "completed", 100, {})
    assert cancel(session, "*") == [CancelContext("a"), CancelContext("b")]  # c already CANCELLING, d DONE
    assert {session.context_state(c) for c in "abc"} == {ContextState.CANCELLING}
    assert [m["type"] for m in wire(session.on_context_cancelled("c", 0, "", 0, {}))] == [
        "cancelled", "cancelled", "context.done"]  # its own cancel and the "*"
    assert [m["type"] for m in wire(session.on_context_cancelled("a", 0, "", 0, {}))] == ["cancelled", "context.done"]
    assert session.open_context_ids() == ["b"]


def test_cancel_by_the_gateway_itself_sends_only_context_done():
    session = started()
    text(session, "t1")
    assert [m["type"] for m in wire(session.on_context_cancelled("t1", 0, "", 0, {}))] == ["context.done"]


# ---- session.end ------------------------------------------------------------------------------------------------


def test_session_end_with_nothing_open_closes_at_once():
    session = started()
    assert send(session, {"type": "session.end"}) == [EndSession(), CloseConnection(1000, "session ended")]
    is_dead(session)


def test_session_end_finishes_open_contexts_then_closes():
    session = started()
    text(session, "a")
    text(session, "b")
    text(session, "c")
    send(session, {"type": "context.end", "context_id": "b"})
    cancel(session, "c")
    assert send(session, {"type": "session.end"}) == [EndContext("a"), EndSession()]
    assert session.state is SessionState.ENDING
    assert send(session, {"type": "session.end"}) == []
    only_error(text(session, "new"), "invalid_message", context_id="new")  # no new contexts
    only_error(text(session, "a"), "invalid_message", context_id="a")  # a is ended
    assert wire(send(session, {"type": "ping", "id": 1}))[0]["type"] == "pong"
    assert wire(session.on_context_done("a", "completed", 100, {}))[0]["type"] == "context.done"
    assert wire(session.on_context_cancelled("c", 0, "", 0, {}))[-1]["type"] == "context.done"
    actions = session.on_context_done("b", "completed", 100, {})
    assert wire(actions)[0]["type"] == "context.done" and actions[-1] == CloseConnection(1000, "session ended")
    is_dead(session)


# ---- errors and limits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "code"), [("not json", "invalid_json"), ("{", "invalid_json"),
                                            ("[]", "invalid_json"), ('{"context_id": "t1"}', "invalid_message"),
                                            ('{"type": 1}', "invalid_message"), ('{"type": "speak"}', "unknown_type"),
                                            ('{"type": "text", "context_id": "t1", "text": 3}', "invalid_message")])
def test_bad_messages_are_non_fatal(data, code):
    session = started()
    text(session, "open")
    only_error(send(session, data), code, context_id="t1" if '"t1", "text": 3' in data else None)
    still_works(session)
    assert text(session, "open", "more") == [AppendText("open", "more")]


def test_binary_frame_is_unexpected():
    session = started()
    message = only_error(session.receive_bytes(b"\x01" * 100, 1.0), "unexpected_binary")
    assert "binary" in message["message"]
    still_works(session)


def test_message_over_max_message_bytes_is_fatal():
    limits = Limits(max_message_bytes=100)
    session = started(limits)
    padded = json.dumps({"type": "ping", "id": ""})
    assert len(send(session, padded[:-2] + "x" * (100 - len(padded)) + '"}')) == 1  # exactly 100 bytes: fine
    fatal(send(session, {"type": "text", "context_id": "t1", "text": "x" * 100}), "message_too_large", 1009)
    is_dead(session)


def test_message_size_is_counted_in_utf8_bytes():
    session = started(Limits(max_message_bytes=100))
    data = json.dumps({"type": "text", "context_id": "t1", "text": "é" * 30}, ensure_ascii=False)
    assert len(data) < 100 < len(data.encode())
    fatal(send(session, data), "message_too_large", 1009)


def test_message_too_large_before_start_and_in_binary():
    fatal(make(Limits(max_message_bytes=10)).receive_text("x" * 11, 1.0), "message_too_large", 1009)
    session = started(Limits(max_message_bytes=30))
    only_error(session.receive_bytes(b"x" * 30, 1.0), "unexpected_binary")
    fatal(session.receive_bytes(b"x" * 31, 1.0), "message_too_large", 1009)
    is_dead(session)


def test_too_many_invalid_messages_in_a_row():
    session = started(Limits(max_invalid_messages=3))
    for _ in range(3):
        only_error(send(session, "garbage"), "invalid_json")
    still_works(session)  # a valid message resets the count
    for _ in range(2):
        only_error(send(session, '{"type": "nope"}'), "unknown_type")
    only_error(session.receive_bytes(b"\x00", 1.0), "unexpected_binary")
    fatal(send(session, "{"), "too_many_invalid_messages", 4400)
    is_dead(session)


def test_well_formed_but_unservable_messages_do_not_count_as_garbage():
    session = started(Limits(max_invalid_messages=2))
    for _ in range(2):
        only_error(send(session, "garbage"), "invalid_json")
    only_error(send(session, {"type": "flush", "context_id": "x"}), "unknown_context", context_id="x")
    for _ in range(2):
        only_error(send(session, "garbage"), "invalid_json")
    still_works(session)


def test_inactivity_closes_via_poll():
    session = make(Limits(inactivity_timeout_s=10), now_ms=1000)
    assert session.inactivity_deadline_ms == 11_000
    assert session.poll(10_999) == []
    send(session, {"type": "session.start"}, now_ms=5000)  # any message resets the timer
    assert session.poll(14_999) == []
    send(session, "garbage", now_ms=14_000)  # even an invalid one
    session.receive_bytes(b"\x01", 20_000)  # or a binary one
    assert session.poll(29_999) == []
    fatal(session.poll(30_000), "inactivity_timeout", 4008)
    is_dead(session)


def test_inactivity_waits_while_the_server_still_owes_audio():
    session = started(Limits(inactivity_timeout_s=10))
    text(session, "t1", now_ms=0)
    send(session, {"type": "context.end", "context_id": "t1"}, now_ms=0)
    assert session.poll(60_000) == []  # a long answer is playing: the quiet client is listening
    session.on_context_done("t1", "completed", 60_000, {})
    assert session.poll(69_999) == []
    assert fatal(session.poll(70_000), "inactivity_timeout", 4008)


def test_owed_audio_counts_as_activity_as_of_the_last_audio_sent():
    """An open context whose engine still holds text (the rest of a word that never comes) keeps the session as
    active as its last audio, not for ever."""
    session = started(Limits(inactivity_timeout_s=10))
    text(session, "t1", now_ms=0)
    assert session.poll(5_000, is_sending_audio=True) == []  # audio going out
    for t in range(6_000, 15_000, 1_000):
        assert session.poll(t, audio_at_ms=5_000) == []  # owed, none sent since 5 s
    fatal(session.poll(15_000, audio_at_ms=5_000), "inactivity_timeout", 4008)


def test_an_open_context_waiting_for_text_does_not_stop_the_timer():
    session = started(Limits(inactivity_timeout_s=10))
    text(session, "t1", now_ms=0)
    fatal(session.poll(10_000), "inactivity_timeout", 4008)
    assert session.open_context_ids() == ["t1"]  # for the I/O layer to free


def test_fail_for_the_gateway_sends_extra_fields_then_closes():
    session = make()
    send(session, {"type": "session.start"})
    actions = session.fail("server_busy", "the server is at capacity", retry_after_ms=1500.2)
    assert fatal(actions, "server_busy", 4029)["retry_after_ms"] == 1500
    is_dead(session)


def test_close_is_idempotent_and_silences_everything():
    session = started()
    text(session, "t1")
    session.close()
    session.close()
    assert session.open_context_ids() == ["t1"]  # what the I/O layer must still free
    assert not session.is_audio_allowed("t1")
    is_dead(session)


# ---- states ------------------------------------------------------------------------------------------------------


def test_forbidden_context_transition_names_both_states():
    context = Context("t1", 1, ContextState.DONE)
    with pytest.raises(InvalidTransition) as info:
        context.transition(ContextState.OPEN)
    assert "DONE" in str(info.value) and "OPEN" in str(info.value)


def test_whatever_a_client_sends_the_session_never_raises():
    """Deterministic fuzz: mutated valid messages, in any order, only ever produce well-formed actions."""
    rng = random.Random(1234)
    base = [{"type": "session.start", "voice": "alice"}, {"type": "text", "context_id": "a", "text": "hi"},
            {"type": "text", "context_id": "b", "text": "yo", "flush": True}, {"type": "flush", "context_id": "a"},
            {"type": "context.end", "context_id": "a"}, {"type": "cancel", "context_id": "*"},
            {"type": "cancel", "context_id": "b"}, {"type": "playback", "context_id": "a", "played_ms": 10},
            {"type": "ping", "id": 1}, {"type": "session.end"}]
    junk = [None, True, -1, 1.5, "", "*", "x" * 300, [], {}, float("nan")]
    reached = set()
    for trial in range(200):
        session = make(Limits(max_contexts=2, max_text_chars=50, max_invalid_messages=5))
        if trial % 4:  # most trials get past the start
            send(session, base[0], 0)
        for step in range(1, 30):
            message = dict(rng.choice(base))
            if rng.random() < 0.5:
                field = rng.choice(["type", "context_id", "text", "flush", "played_ms", "id", "output"])
                message[field] = rng.choice(junk)
            data = json.dumps(message) if rng.random() < 0.9 else json.dumps(message)[: rng.randrange(20)]
            actions = session.receive_text(data, step)
            for context_id in session.open_context_ids():
                if rng.random() < 0.2:
                    actions += rng.choice([
                        lambda: session.on_context_done(context_id, "completed", 10, {}),
                        lambda: session.on_context_cancelled(context_id, 5, "h", 10, {}),
                        lambda: session.on_flushed(context_id)])()
            for action in actions:
                if isinstance(action, SendText):
                    assert isinstance(json.loads(action.data)["type"], str)
            assert all(not isinstance(a, CloseConnection) for a in actions[:-1])  # a close is always last
            reached.add(session.state)
            if session.state is SessionState.CLOSED:
                assert session.receive_text(data, step) == []
                break
    assert reached == set(SessionState)
