"""The client's sans-I/O parts: server messages into typed events, error mapping, text splitting."""

from __future__ import annotations

import json

import pytest

from voxrt.client import (AlignedSpan, Alignment, AudioFrame, AuthenticationError, Cancelled, ContextDone,
                          ContextStarted, ErrorEvent, Flushed, Limits, OutputFormat, Pong, ServerBusyError,
                          SessionStarted, UnknownEvent, VoxrtError, parse_server_message)
from voxrt.client.context import _split_utf8
from voxrt.client.errors import ConnectionClosedError, closed_error
from voxrt.protocol.config import Limits as ServerLimits
from voxrt.protocol.events import (encode_alignment, encode_cancelled, encode_context_done, encode_context_started,
                                   encode_error, encode_flushed, encode_pong, encode_session_started)
from voxrt.protocol.frames import decode_audio_frame, encode_audio_frame


def test_every_server_message_the_gateway_encodes_parses():
    """The server's own encoders (voxrt.protocol.events) are the reference for the wire shapes."""
    output, limits = OutputFormat("pcm16", 24000, 20), ServerLimits(max_contexts=3)
    assert parse_server_message(encode_session_started("s1", "tiny", "default", output, limits)) == SessionStarted(
        "s1", "tiny", "default", output, Limits(max_contexts=3))
    assert parse_server_message(encode_context_started("t1", 7)) == ContextStarted("t1", 7)
    assert parse_server_message(encode_flushed("t1")) == Flushed("t1")
    assert parse_server_message(encode_cancelled("t1", 820.4, "Sure")) == Cancelled("t1", 820, "Sure")
    done = parse_server_message(encode_context_done("t1", "completed", 1000, {"ttfa_ms": 41.6, "frames": 50}))
    assert done == ContextDone("t1", "completed", 1000, {"ttfa_ms": 42, "frames": 50}) and done.ttfa_ms == 42
    assert parse_server_message(encode_pong("p1", 12.0)) == Pong("p1", 12)
    busy = parse_server_message(encode_error("server_busy", "full", True, retry_after_ms=1000))
    assert busy == ErrorEvent("server_busy", "full", True, None, 1000)
    assert parse_server_message(encode_error("text_too_long", "long", False, "t1")).context_id == "t1"


def test_alignment_segments_and_words():
    wire = encode_alignment("t1", [{"text": "Hi there.", "char_start": 0, "char_end": 9, "start_ms": 0,
                                    "end_ms": 600}],
                            [{"word": "Hi", "char_start": 0, "char_end": 2, "start_ms": 0, "end_ms": 200}], True)
    assert parse_server_message(wire) == Alignment("t1", (AlignedSpan("Hi there.", 0, 9, 0, 600),),
                                                   (AlignedSpan("Hi", 0, 2, 0, 200),), True)
    no_words = parse_server_message(encode_alignment("t1", [], None, False))
    assert no_words.words is None and not no_words.is_estimated


def test_unknown_types_and_fields_are_tolerated():
    event = parse_server_message(json.dumps({"type": "future.thing", "x": 1}))
    assert isinstance(event, UnknownEvent) and event.type == "future.thing" and event.data["x"] == 1
    assert parse_server_message('{"type":"flushed","context_id":"a","new_field":true}') == Flushed("a")


@pytest.mark.parametrize("data", ["not json", "[]", '{"no":"type"}', '{"type":"context.started","context_id":"a"}',
                                  '{"type":"context.started","context_id":"a","index":true}',
                                  '{"type":"cancelled","context_id":"a","played_ms":"1","spoken_text":""}'])
def test_broken_server_messages_raise_a_fatal_error(data):
    with pytest.raises(VoxrtError) as caught:
        parse_server_message(data)
    assert caught.value.code == "invalid_server_message" and caught.value.fatal


def test_audio_frame_from_the_wire_header():
    header, payload = decode_audio_frame(encode_audio_frame(3, 5, 100, b"\x01\x02", is_first=False, is_last=True))
    frame = AudioFrame.from_wire("t1", header, payload)
    assert frame == AudioFrame("t1", 3, 5, 100, b"\x01\x02", False, True)
    assert "num_payload_bytes=2" in repr(frame)


def test_error_events_map_to_exception_types():
    assert type(ErrorEvent("unauthorized", "no", True).to_exception()) is AuthenticationError
    busy = ErrorEvent("server_busy", "full", True, retry_after_ms=500).to_exception()
    assert type(busy) is ServerBusyError and busy.retry_after_ms == 500
    plain = ErrorEvent("text_too_long", "long", False, "t1").to_exception()
    assert type(plain) is VoxrtError and plain.context_id == "t1" and str(plain) == "text_too_long: long"


def test_closed_error_prefers_the_fatal_error_and_keeps_the_close_code():
    fatal = VoxrtError("inactivity_timeout", "idle", fatal=True)
    assert closed_error(4008, "inactivity_timeout", fatal) is fatal and fatal.close_code == 4008
    assert type(closed_error(4001, "")) is AuthenticationError
    assert type(closed_error(4029, "")) is ServerBusyError
    plain = closed_error(1006, "")
    assert type(plain) is ConnectionClosedError and plain.code == "connection_closed" and plain.close_code == 1006


@pytest.mark.parametrize("text", ["", "short", "x" * 1000, "\u00e9\u4e2d\U0001F600" * 300, "\n\t\"" * 400])
def test_split_keeps_text_and_bounds_each_message(text):
    max_bytes = 256
    parts = _split_utf8(text, max_bytes)
    assert "".join(parts) == text
    assert all(len(json.dumps(p, ensure_ascii=False).encode()) <= max_bytes for p in parts)
