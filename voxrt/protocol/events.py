"""The JSON control messages of voxrt.v1: client messages parsed into typed events, server messages encoded
(server_events.py types them).

Parsing checks shapes and types only (a `text` has a string `context_id` ...); whether a value is allowed
now (a known voice, an open context) is the session's business. Unknown fields are ignored (protocol.md,
Connection). Encoders emit exactly the protocol's fields, compact, with millisecond values as ints.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Union

from voxrt.protocol.config import Limits, OutputFormat
from voxrt.protocol.errors import INVALID_JSON, INVALID_MESSAGE, UNKNOWN_TYPE, ProtocolError, clip
from voxrt.protocol.server_events import (DONE_REASONS, Alignment, Cancelled, ContextDone, ContextStarted, Error,
                                          Flushed, Pong, SessionStarted, encode_event)

MAX_CONTEXT_ID_CHARS = 256
MAX_PINNED_FRAMES = 1_000_000  # shape bound of the `num_frames` extension; the engine checks its own limit
CANCEL_ALL = "*"  # `cancel`'s context_id for every context of the session; reserved, never a context's id
# A JSON string may hold a lone UTF-16 surrogate ("\ud800" is valid JSON, RFC 8259 section 8.2) that no UTF-8
# encoder takes: such text would break the tokenizer and every reply that echoes it. In a str, any surrogate
# is a lone one (json.loads joins escaped pairs into one code point).
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89abAB]|\\u[dD][c-fC-F]")

# ---- client -> server events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionStartEvent:
    TYPE: ClassVar[str] = "session.start"
    voice: str | None = None
    model: str | None = None
    output: dict | None = None
    pacing: dict | None = None
    segmentation: str | None = None


@dataclass(frozen=True)
class TextEvent:
    TYPE: ClassVar[str] = "text"
    context_id: str
    text: str
    flush: bool = False
    num_frames: int | None = None  # voxrt benchmark extension: pinned output length (docs/protocol.md)


@dataclass(frozen=True)
class FlushEvent:
    TYPE: ClassVar[str] = "flush"
    context_id: str


@dataclass(frozen=True)
class ContextEndEvent:
    TYPE: ClassVar[str] = "context.end"
    context_id: str


@dataclass(frozen=True)
class CancelEvent:
    TYPE: ClassVar[str] = "cancel"
    context_id: str  # or CANCEL_ALL

    @property
    def is_all(self) -> bool:
        return self.context_id == CANCEL_ALL


@dataclass(frozen=True)
class PlaybackEvent:
    TYPE: ClassVar[str] = "playback"
    context_id: str
    played_ms: float


@dataclass(frozen=True)
class PingEvent:
    TYPE: ClassVar[str] = "ping"
    id: str | int | None = None


@dataclass(frozen=True)
class SessionEndEvent:
    TYPE: ClassVar[str] = "session.end"


ClientEvent = Union[SessionStartEvent, TextEvent, FlushEvent, ContextEndEvent, CancelEvent, PlaybackEvent,
                    PingEvent, SessionEndEvent]


class _Fields:
    """Reads one message's fields; each failure is an `invalid_message` naming the field. The context_id is
    read first so that later failures can carry it."""

    def __init__(self, obj: dict, message_type: str) -> None:
        self.obj = obj
        self.message_type = message_type
        self.context_id: str | None = None

    def fail(self, name: str, must: str) -> ProtocolError:
        return ProtocolError(INVALID_MESSAGE, f"{self.message_type}: field '{name}' {must}", field=name,
                             context_id=self.context_id, message_type=self.message_type)

    def read_context_id(self, *, allow_all: bool = False) -> str:
        value = self.obj.get("context_id")
        if not isinstance(value, str) or not 0 < len(value) <= MAX_CONTEXT_ID_CHARS:
            raise self.fail("context_id", f"must be a non-empty string of at most {MAX_CONTEXT_ID_CHARS} "
                                          f"characters")
        if _SURROGATE.search(value):  # refused, not repaired: an id must come back exactly as it was sent
            raise self.fail("context_id", "must be valid Unicode (it holds a lone UTF-16 surrogate)")
        if value == CANCEL_ALL and not allow_all:
            raise self.fail("context_id", f"must not be {CANCEL_ALL!r}: it means every context in a cancel")
        self.context_id = value
        return value

    def read_string(self, name: str, *, required: bool) -> str | None:
        value = self.obj.get(name)
        if value is None and not required:  # null is absent: clients that dump None-valued fields are common
            return None
        if not isinstance(value, str):
            raise self.fail(name, "must be a string")
        return value

    def read_flag(self, name: str) -> bool:
        value = self.obj.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(name, "must be a boolean")
        return value

    def read_ms(self, name: str) -> float:
        value = self.obj.get(name)
        # json.loads accepts NaN and Infinity; neither is a playback position. An integer past float's range
        # (json.loads reads 400 digits as an int) is not finite either: isfinite raised OverflowError for it
        # (out of receive_text, which must not raise) until round 12.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _is_finite(value) or value < 0:
            raise self.fail(name, "must be a finite number >= 0")
        return float(value)

    def read_count(self, name: str, maximum: int) -> int | None:
        value = self.obj.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= maximum:
            raise self.fail(name, f"must be an integer from 1 to {maximum}")
        return value

    def read_object(self, name: str) -> dict | None:
        value = self.obj.get(name)
        if value is not None and not isinstance(value, dict):
            raise self.fail(name, "must be an object")
        return value


def _is_finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _session_start(f: _Fields) -> SessionStartEvent:
    return SessionStartEvent(voice=f.read_string("voice", required=False), model=f.read_string("model", required=False),
                             output=f.read_object("output"), pacing=f.read_object("pacing"),
                             segmentation=f.read_string("segmentation", required=False))


def _ping(f: _Fields) -> PingEvent:
    value = f.obj.get("id")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
        raise f.fail("id", "must be a string or an integer")
    return PingEvent(id=value)


_PARSERS: dict[str, Callable[[_Fields], ClientEvent]] = {
    "session.start": _session_start,
    "text": lambda f: TextEvent(f.read_context_id(), f.read_string("text", required=True), f.read_flag("flush"),
                                f.read_count("num_frames", MAX_PINNED_FRAMES)),
    "flush": lambda f: FlushEvent(f.read_context_id()),
    "context.end": lambda f: ContextEndEvent(f.read_context_id()),
    "cancel": lambda f: CancelEvent(f.read_context_id(allow_all=True)),
    "playback": lambda f: PlaybackEvent(f.read_context_id(), f.read_ms("played_ms")),
    "ping": _ping,
    "session.end": lambda f: SessionEndEvent(),
}
CLIENT_MESSAGE_TYPES = tuple(_PARSERS)


def parse_client_message(data: str, pinned_lengths: bool = True) -> ClientEvent:
    """One text frame -> one event, or a non-fatal ProtocolError (invalid_json, invalid_message, unknown_type).
    `pinned_lengths` False: `text`'s `num_frames` extension is an unknown field like any other (ignored,
    unchecked: protocol.md), for a server that does not honour it."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested deeper than the parser recurses
        raise ProtocolError(INVALID_JSON, "message is not valid JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError(INVALID_JSON, f"message must be a JSON object, got {_json_kind(obj)}")
    message_type = obj.get("type")
    if not isinstance(message_type, str):
        raise ProtocolError(INVALID_MESSAGE, "field 'type' must be a string", field="type")
    parser = _PARSERS.get(message_type)
    if parser is None:
        raise ProtocolError(UNKNOWN_TYPE, f"unknown message type {clip(message_type)!r}; known types: "
                                          f"{', '.join(CLIENT_MESSAGE_TYPES)}")
    if not pinned_lengths and message_type == "text" and "num_frames" in obj:
        obj = {name: value for name, value in obj.items() if name != "num_frames"}
    if "\\u" in data and _ESCAPED_SURROGATE.search(data):  # rare: only then walk the message
        obj = _without_lone_surrogates(obj, message_type)
    return parser(_Fields(obj, message_type))


# A playback report exactly as the clients here write it (voxrt.client, the browser page, the load generators:
# `{"type": "playback", "context_id": ..., "played_ms": ...}` in that order, any JSON whitespace between
# tokens): ~10 a second a session, most of what a server reads. Only shapes whose parse is certain to give a
# valid PlaybackEvent match: a context_id of 1 to MAX_CONTEXT_ID_CHARS characters with no escape (no
# backslash), no control character (JSON forbids them raw) and no lone surrogate; a played_ms without sign or
# exponent, short enough that float() of it is json's value exactly. Anything else is left to
# `parse_client_message` (the same event, or its error).
_WS = r"[ \t\n\r]*"
_PLAYBACK_REPORT = re.compile(
    _WS + r'\{' + _WS + r'"type"' + _WS + ':' + _WS + r'"playback"' + _WS + ',' + _WS + r'"context_id"' + _WS + ':'
    + _WS + r'"([^"\\\x00-\x1f\ud800-\udfff]{1,%d})"' % MAX_CONTEXT_ID_CHARS + _WS + ',' + _WS + r'"played_ms"'
    + _WS + ':' + _WS + r'((?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,17})?)' + _WS + r'\}' + _WS + r'\Z')


def parse_playback_report(data: str) -> tuple[str, float] | None:
    """(context_id, played_ms) of a playback report in the shape clients write (above), what
    `parse_client_message` would return as a PlaybackEvent, without json.loads and the field readers; None for
    any other message (then `parse_client_message` says what it is). Session.receive_report uses it."""
    match = _PLAYBACK_REPORT.match(data)
    if match is None:
        return None
    context_id = match.group(1)
    if context_id == CANCEL_ALL:  # refused by the full parser (`read_context_id`): its error, not ours
        return None
    return context_id, float(match.group(2))


def replace_lone_surrogates(text: str) -> str:
    """Lone UTF-16 surrogates become U+FFFD, as the WHATWG UTF-8 encoder does (a browser's TextEncoder)."""
    return _SURROGATE.sub("\ufffd", text)


def _without_lone_surrogates(obj: dict, message_type: str) -> dict:
    """A message's lone surrogates: replaced by U+FFFD in `text` (speech goes on; a token stream that split
    a pair loses only that character), refused anywhere else that is read (ids, names, nested objects),
    since those are echoed back or must match exactly. The context_id check lives in `read_context_id`,
    so its error can say which field. Unknown fields are ignored, surrogates and all."""
    clean = dict(obj)
    for name, value in obj.items():
        if name == "text" and isinstance(value, str):
            clean[name] = replace_lone_surrogates(value)
        elif name != "context_id" and name in _READ_FIELDS and _has_surrogate(value):
            raise ProtocolError(INVALID_MESSAGE, f"{message_type}: field '{name}' must be valid Unicode (it "
                                                 f"holds a lone UTF-16 surrogate)", field=name,
                                message_type=message_type)
    return clean


_READ_FIELDS = frozenset({"voice", "model", "output", "pacing", "segmentation", "id", "flush", "played_ms",
                          "num_frames"})


def _has_surrogate(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if depth > 4:
        return False
    if isinstance(value, dict):
        return any(_has_surrogate(k, depth + 1) or _has_surrogate(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v, depth + 1) for v in value)
    return False


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


# ---- server -> client messages --------------------------------------------------------------------------------
# Typed in server_events.py; these build one and encode it (the text frame, byte for byte as before).


def encode_session_started(session_id: str, model: str, voice: str, output: OutputFormat, limits: Limits) -> str:
    return encode_event(SessionStarted(session_id, model, voice, output, limits))


def encode_context_started(context_id: str, index: int) -> str:
    return encode_event(ContextStarted(context_id, index))


def encode_alignment(context_id: str, segments: list[dict], words: list[dict] | None, estimated: bool) -> str:
    """Segments and words are normalised to exactly the protocol's keys (extra keys dropped, ms rounded)."""
    return encode_event(Alignment(context_id, segments, words, estimated))


def encode_flushed(context_id: str) -> str:
    return encode_event(Flushed(context_id))


def encode_cancelled(context_id: str, played_ms: float, spoken_text: str) -> str:
    return encode_event(Cancelled(context_id, played_ms, spoken_text))


def encode_context_done(context_id: str, reason: str, audio_ms: float, metrics: dict) -> str:
    """`metrics` always carries `ttfa_ms` (null when no audio was sent); `*_ms` values are rounded to ints and
    non-finite floats become null."""
    return encode_event(ContextDone(context_id, reason, audio_ms, metrics))


def encode_error(code: str, message: str, fatal: bool, context_id: str | None = None, **extra: Any) -> str:
    """`extra` adds fields such as `retry_after_ms` (rounded like every `*_ms`)."""
    return encode_event(Error(code, message, fatal, context_id, extra))


def protocol_error_event(error: ProtocolError, **extra: Any) -> Error:
    return Error(error.code, error.message, error.fatal, error.context_id, extra)


def encode_protocol_error(error: ProtocolError, **extra: Any) -> str:
    return encode_event(protocol_error_event(error, **extra))


def encode_pong(id: str | int | None, server_time_ms: float) -> str:  # noqa: A002 - the protocol's field name
    return encode_event(Pong(id, server_time_ms))
