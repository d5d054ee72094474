"""Typed server -> client events (protocol/server_events.py): one encoder, exactly the wire text protocol.md
specifies, and `to_wire()` equal to what a client parses from it."""

from __future__ import annotations

import json

import pytest

from voxrt.protocol.actions import SendText
from voxrt.protocol.config import Limits, OutputFormat
from voxrt.protocol.events import encode_alignment, encode_cancelled, encode_context_done, encode_error
from voxrt.protocol.server_events import (SERVER_EVENT_TYPES, Alignment, Cancelled, ContextDone, ContextStarted,
                                          Error, Flushed, Pong, SessionStarted, encode_event)

SEGMENTS = [{"text": "Hi there.", "char_start": 0, "char_end": 9, "start_ms": 0.4, "end_ms": 512.6, "extra": 1}]
WORDS = [{"word": "Hi", "char_start": 0, "char_end": 2, "start_ms": 0, "end_ms": 200.5}]

EVENTS = [
    SessionStarted("s1", "tiny", "default", OutputFormat("mulaw", 8000, 20), Limits()),
    ContextStarted("t1", 1),
    Alignment("t1", SEGMENTS, WORDS, True),
    Alignment("t1", SEGMENTS, None, False),
    Flushed("t1"),
    Cancelled("t1", 819.7, "Grüße"),
    ContextDone("t1", "completed", 2040.4, {"ttfa_ms": 41.6, "stalls": 0, "x": float("nan")}),
    Error("server_busy", "busy", True, None, {"retry_after_ms": 1500.4}),
    Error("text_too_long", "long", False, "t1"),
    Pong("p1", 12345.6),
]


def test_exact_wire_text():
    assert encode_event(Flushed("t1")) == '{"type":"flushed","context_id":"t1"}'
    assert encode_event(Cancelled("t1", 819.7, "Grüße")) == \
        '{"type":"cancelled","context_id":"t1","played_ms":820,"spoken_text":"Grüße"}'
    assert encode_event(Alignment("t1", SEGMENTS, WORDS, True)) == (
        '{"type":"alignment","context_id":"t1","segments":[{"text":"Hi there.","char_start":0,"char_end":9,'
        '"start_ms":0,"end_ms":513}],"words":[{"word":"Hi","char_start":0,"char_end":2,"start_ms":0,"end_ms":200}],'
        '"estimated":true}')
    assert encode_event(ContextDone("t1", "cancelled", 0, {})) == \
        '{"type":"context.done","context_id":"t1","reason":"cancelled","audio_ms":0,"metrics":{"ttfa_ms":null}}'
    assert encode_event(Error("server_busy", "busy", True, None, {"retry_after_ms": 1500.4})) == \
        '{"type":"error","code":"server_busy","message":"busy","fatal":true,"retry_after_ms":1500}'
    assert encode_event(Pong(None, 1)) == '{"type":"pong","id":null,"server_time_ms":1}'


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.TYPE)
def test_to_wire_is_what_a_client_parses(event):
    wire = event.to_wire()
    assert json.loads(encode_event(event)) == wire
    assert wire["type"] == event.TYPE in SERVER_EVENT_TYPES


def test_the_encode_functions_write_the_events_text():
    assert encode_alignment("t1", SEGMENTS, WORDS, True) == encode_event(Alignment("t1", SEGMENTS, WORDS, True))
    assert encode_cancelled("t1", 1.2, "a") == encode_event(Cancelled("t1", 1.2, "a"))
    assert encode_context_done("t1", "error", 3, {"a_ms": 1.6}) == encode_event(ContextDone("t1", "error", 3, {"a_ms": 1.6}))
    assert encode_error("c", "m", False, "t1", n=1) == encode_event(Error("c", "m", False, "t1", {"n": 1}))


def test_bad_values_fail_where_the_event_is_built():
    with pytest.raises(ValueError):
        ContextDone("t1", "finished", 0)
    with pytest.raises(ValueError):
        Cancelled("t1", float("inf"), "")
    with pytest.raises(ValueError):
        Pong(1, float("nan"))


def test_to_wire_hands_out_fresh_containers():
    event = Alignment("t1", SEGMENTS, WORDS, True)
    event.to_wire()["segments"][0]["text"] = "changed"
    assert event.to_wire()["segments"][0]["text"] == "Hi there."


def test_send_text_carries_the_event_and_its_text():
    action = SendText.of(Flushed("t1"))
    assert action.data == '{"type":"flushed","context_id":"t1"}' and action.event == Flushed("t1")
    assert action == SendText('{"type":"flushed","context_id":"t1"}')  # compared by its wire text
