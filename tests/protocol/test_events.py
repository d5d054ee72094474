"""Client messages parse into typed events (each malformed case into the right error); server messages carry
exactly the protocol's fields, with the protocol's types."""

from __future__ import annotations

import json

import pytest

from voxrt.protocol.config import Limits, OutputFormat
from voxrt.protocol.errors import ProtocolError
from voxrt.protocol.events import (CancelEvent, ContextEndEvent, FlushEvent, PingEvent, PlaybackEvent,
                                   SessionEndEvent, SessionStartEvent, TextEvent, encode_alignment,
                                   encode_cancelled, encode_context_done, encode_context_started, encode_error,
                                   encode_flushed, encode_pong, encode_session_started, parse_client_message)


def parse(message: dict):
    return parse_client_message(json.dumps(message))


def parse_error(data: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_client_message(data)
    assert not info.value.fatal and info.value.close_code is None
    return info.value


# ---- parsing: each type -------------------------------------------------------------------------------------


def test_session_start_full_and_empty():
    event = parse({"type": "session.start", "voice": "v", "model": "m", "output": {"codec": "pcm16"},
                   "pacing": {"mode": "burst"}, "segmentation": "none"})
    assert event == SessionStartEvent("v", "m", {"codec": "pcm16"}, {"mode": "burst"}, "none")
    assert parse({"type": "session.start"}) == SessionStartEvent(None, None, None, None, None)


def test_text_with_and_without_flush():
    assert parse({"type": "text", "context_id": "t1", "text": "Sure, "}) == TextEvent("t1", "Sure, ", False)
    assert parse({"type": "text", "context_id": "t1", "text": "", "flush": True}) == TextEvent("t1", "", True)
    assert parse({"type": "text", "context_id": "t1", "text": "x", "flush": None}).flush is False


def test_text_num_frames_extension():
    assert parse({"type": "text", "context_id": "t", "text": "Hi", "num_frames": 25}) == TextEvent("t", "Hi", False, 25)
    assert parse({"type": "text", "context_id": "t", "text": "Hi", "num_frames": None}).num_frames is None
    for bad in (0, -3, 2.5, "25", True, 10**7):
        error = parse_error(json.dumps({"type": "text", "context_id": "t", "text": "Hi", "num_frames": bad}))
        assert error.code == "invalid_message" and error.field == "num_frames" and error.context_id == "t"


@pytest.mark.parametrize(("message", "event"), [
    ({"type": "flush", "context_id": "a"}, FlushEvent("a")),
    ({"type": "context.end", "context_id": "a"}, ContextEndEvent("a")),
    ({"type": "cancel", "context_id": "a"}, CancelEvent("a")),
    ({"type": "cancel", "context_id": "*"}, CancelEvent("*")),
    ({"type": "playback", "context_id": "a", "played_ms": 820}, PlaybackEvent("a", 820.0)),
    ({"type": "playback", "context_id": "a", "played_ms": 0.5}, PlaybackEvent("a", 0.5)),
    ({"type": "ping", "id": "p1"}, PingEvent("p1")),
    ({"type": "ping", "id": 7}, PingEvent(7)),
    ({"type": "ping"}, PingEvent(None)),
    ({"type": "session.end"}, SessionEndEvent()),
])
def test_each_type_parses(message, event):
    assert parse(message) == event


def test_cancel_all_flag_and_unknown_fields_ignored():
    assert parse({"type": "cancel", "context_id": "*"}).is_all
    assert not parse({"type": "cancel", "context_id": "a"}).is_all
    assert parse({"type": "flush", "context_id": "a", "extra": {"x": 1}, "v": 2}) == FlushEvent("a")


def test_context_id_of_256_chars_is_fine():
    assert parse({"type": "flush", "context_id": "x" * 256}).context_id == "x" * 256


# ---- parsing: each malformed case -----------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["", "not json", "{", '{"type": "text",}', "[" * 5000 + "]" * 5000, "1" * 5000])
def test_invalid_json(data):
    assert parse_error(data).code == "invalid_json"


@pytest.mark.parametrize("data", ["[]", '"session.start"', "3", "null", "true"])
def test_non_object_is_invalid_json(data):
    error = parse_error(data)
    assert error.code == "invalid_json" and "object" in error.message


@pytest.mark.parametrize("message", [{}, {"type": None}, {"type": 3}, {"type": ["text"]}, {"kind": "text"}])
def test_missing_or_non_string_type(message):
    error = parse_error(json.dumps(message))
    assert error.code == "invalid_message" and error.field == "type" and "type" in error.message


@pytest.mark.parametrize("kind", ["bogus", "Text", "session.begin", "x" * 5000])
def test_unknown_type(kind):
    error = parse_error(json.dumps({"type": kind, "context_id": "a"}))
    assert error.code == "unknown_type"
    assert len(error.message) < 300  # a client's string is clipped before it is echoed back


@pytest.mark.parametrize(("message", "field", "context_id"), [
    ({"type": "text", "text": "hi"}, "context_id", None),
    ({"type": "text", "context_id": "", "text": "hi"}, "context_id", None),
    ({"type": "text", "context_id": 5, "text": "hi"}, "context_id", None),
    ({"type": "text", "context_id": "x" * 257, "text": "hi"}, "context_id", None),
    ({"type": "text", "context_id": "*", "text": "hi"}, "context_id", None),
    ({"type": "text", "context_id": "a"}, "text", "a"),
    ({"type": "text", "context_id": "a", "text": None}, "text", "a"),
    ({"type": "text", "context_id": "a", "text": 5}, "text", "a"),
    ({"type": "text", "context_id": "a", "text": "x", "flush": "yes"}, "flush", "a"),
    ({"type": "text", "context_id": "a", "text": "x", "flush": 1}, "flush", "a"),
    ({"type": "flush"}, "context_id", None),
    ({"type": "context.end", "context_id": None}, "context_id", None),
    ({"type": "cancel", "context_id": ""}, "context_id", None),
    ({"type": "playback", "context_id": "a"}, "played_ms", "a"),
    ({"type": "playback", "context_id": "a", "played_ms": -1}, "played_ms", "a"),
    ({"type": "playback", "context_id": "a", "played_ms": "820"}, "played_ms", "a"),
    ({"type": "playback", "context_id": "a", "played_ms": True}, "played_ms", "a"),
    ({"type": "ping", "id": 1.5}, "id", None),
    ({"type": "ping", "id": {"a": 1}}, "id", None),
    ({"type": "ping", "id": False}, "id", None),
    ({"type": "session.start", "voice": 3}, "voice", None),
    ({"type": "session.start", "model": ["m"]}, "model", None),
    ({"type": "session.start", "output": "opus"}, "output", None),
    ({"type": "session.start", "pacing": []}, "pacing", None),
    ({"type": "session.start", "segmentation": 1}, "segmentation", None),
])
def test_field_errors_name_the_field(message, field, context_id):
    error = parse_error(json.dumps(message))
    assert error.code == "invalid_message"
    assert error.field == field and f"'{field}'" in error.message
    assert error.context_id == context_id
    assert error.message_type == message["type"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_played_ms_must_be_finite(value):
    error = parse_error('{"type":"playback","context_id":"a","played_ms":%s}' % value)
    assert error.code == "invalid_message" and error.field == "played_ms"


# ---- encoders ------------------------------------------------------------------------------------------------


def decode(data: str) -> dict:
    assert isinstance(data, str)
    message = json.loads(data)
    assert data == json.dumps(message, separators=(",", ":"), ensure_ascii=False)  # compact
    return message


def test_session_started():
    message = decode(encode_session_started("s1", "tiny", "default", OutputFormat("mulaw", 8000, 20), Limits()))
    assert message == {"type": "session.started", "session_id": "s1", "model": "tiny", "voice": "default",
                       "output": {"codec": "mulaw", "sample_rate": 8000, "frame_ms": 20},
                       "limits": {"max_contexts": 8, "max_text_chars": 20000, "max_message_bytes": 65536,
                                  "inactivity_timeout_s": 60.0}}


def test_context_started_and_flushed():
    assert decode(encode_context_started("t1", 1)) == {"type": "context.started", "context_id": "t1", "index": 1}
    assert decode(encode_flushed("t1")) == {"type": "flushed", "context_id": "t1"}


def test_alignment_exact_keys_rounded_ms_and_optional_words():
    segments = [{"text": "Sure,", "char_start": 0, "char_end": 5, "start_ms": 0.4, "end_ms": 310.6, "x": 1}]
    words = [{"word": "Sure", "char_start": 0, "char_end": 4, "start_ms": 0, "end_ms": 250.2, "p": 0.9}]
    message = decode(encode_alignment("t1", segments, words, True))
    assert message == {"type": "alignment", "context_id": "t1",
                       "segments": [{"text": "Sure,", "char_start": 0, "char_end": 5, "start_ms": 0, "end_ms": 311}],
                       "words": [{"word": "Sure", "char_start": 0, "char_end": 4, "start_ms": 0, "end_ms": 250}],
                       "estimated": True}
    message = decode(encode_alignment("t1", segments, None, False))
    assert set(message) == {"type", "context_id", "segments", "estimated"} and message["estimated"] is False


def test_cancelled_rounds_played_ms():
    message = decode(encode_cancelled("t1", 819.7, "Sure, Dr. Smith's balance"))
    assert message == {"type": "cancelled", "context_id": "t1", "played_ms": 820,
                       "spoken_text": "Sure, Dr. Smith's balance"}
    assert isinstance(message["played_ms"], int)


def test_context_done():
    message = decode(encode_context_done("t1", "completed", 2040.4, {"ttfa_ms": 41.6, "num_stalls": 0,
                                                                       "stall_ms": float("nan")}))
    assert message == {"type": "context.done", "context_id": "t1", "reason": "completed", "audio_ms": 2040,
                       "metrics": {"ttfa_ms": 42, "num_stalls": 0, "stall_ms": None}}
    assert decode(encode_context_done("t1", "cancelled", 0, {}))["metrics"] == {"ttfa_ms": None}
    assert decode(encode_context_done("t1", "error", 0, {}))["reason"] == "error"
    with pytest.raises(ValueError, match="reason"):
        encode_context_done("t1", "finished", 0, {})


def test_error_with_and_without_context_and_extra():
    assert decode(encode_error("invalid_json", "bad", False)) == {"type": "error", "code": "invalid_json",
                                                                  "message": "bad", "fatal": False}
    assert decode(encode_error("text_too_long", "long", False, "t1")) == {
        "type": "error", "code": "text_too_long", "message": "long", "fatal": False, "context_id": "t1"}
    assert decode(encode_error("server_busy", "busy", True, retry_after_ms=1500.4)) == {
        "type": "error", "code": "server_busy", "message": "busy", "fatal": True, "retry_after_ms": 1500}


def test_pong():
    assert decode(encode_pong("p1", 12345.6)) == {"type": "pong", "id": "p1", "server_time_ms": 12346}
    assert decode(encode_pong(None, 1)) == {"type": "pong", "id": None, "server_time_ms": 1}


def test_non_ascii_text_is_sent_as_is_and_ms_must_be_finite():
    assert "Grüße" in encode_cancelled("t1", 0, "Grüße")
    with pytest.raises(ValueError):
        encode_cancelled("t1", float("inf"), "")


def test_protocol_error_defaults_fatal_and_close_code_from_the_code():
    from voxrt.protocol.errors import CLOSE_INACTIVE, CLOSE_PROTOCOL, CLOSE_TOO_LARGE

    assert (ProtocolError("inactivity_timeout", "m").fatal, ProtocolError("inactivity_timeout", "m").close_code) == (
        True, CLOSE_INACTIVE)
    assert ProtocolError("message_too_large", "m").close_code == CLOSE_TOO_LARGE
    assert ProtocolError("session_not_started", "m").close_code == CLOSE_PROTOCOL
    error = ProtocolError("text_too_long", "m", context_id="t1")
    assert (error.code, error.message, error.fatal, error.close_code, error.context_id) == (
        "text_too_long", "m", False, None, "t1")
    assert ProtocolError("custom", "m", True, 4400).close_code == 4400
    with pytest.raises(ValueError):
        ProtocolError("custom", "m", fatal=True)
