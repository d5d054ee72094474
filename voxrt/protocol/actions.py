"""What the session asks the I/O layer to do, as data (the sans-I/O pattern of python-websockets: the core
returns what to send and what to run; the gateway does it, in list order).

Two kinds: wire actions (`SendText`, `CloseConnection`) and engine actions (the rest), which the gateway
turns into engine calls and later answers through `Session.on_*`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from voxrt.protocol.config import SessionConfig
from voxrt.protocol.server_events import ServerEvent, encode_event


@dataclass(frozen=True)
class SendText:
    """Send one JSON text frame to the client: `data`, the encoding of `event` (server_events.py). An I/O
    layer with an in-process peer (a compat adapter) hands over `event` itself; a socket sends `data`."""

    data: str
    event: ServerEvent | None = field(default=None, compare=False)

    @classmethod
    def of(cls, event: ServerEvent) -> "SendText":
        return cls(encode_event(event), event)


@dataclass(frozen=True)
class CloseConnection:
    """Close the WebSocket with this code. Always the last action of its list; nothing is sent after it."""

    code: int
    reason: str


@dataclass(frozen=True)
class StartSession:
    """The client's configuration is valid. A gateway that cannot serve it (capacity) calls
    `Session.fail("server_busy", ...)` instead of sending the `session.started` that follows this action."""

    config: SessionConfig


@dataclass(frozen=True)
class OpenContext:
    """A new context (one agent turn): submit it to the engine. `index` goes into its audio frame headers.
    `num_frames`: the pinned output length the first `text` asked for (a benchmark extension the gateway
    honours only when configured to), else None. `text`: the opening message's text, which goes to the engine
    with the request itself (no `AppendText` follows for it): the engine has the first words in the message that
    starts the request, not in a second one after the gateway's other work of that turn."""

    context_id: str
    index: int
    num_frames: int | None = None
    text: str = ""


@dataclass(frozen=True)
class AppendText:
    context_id: str
    text: str  # never empty


@dataclass(frozen=True)
class FlushContext:
    """Synthesize the text received so far without waiting for a segment boundary; answer with
    `Session.on_flushed` once that text's audio has been sent."""

    context_id: str


@dataclass(frozen=True)
class EndContext:
    """No more text: finish speaking, then answer with `Session.on_context_done`."""

    context_id: str


@dataclass(frozen=True)
class CancelContext:
    """Stop generation and audio at once and free the context's resources; answer with
    `Session.on_context_cancelled` once no more audio of it will be sent (even if it finished meanwhile).
    `at_ms`: when the cancel was received (the session's clock), the instant whose playback position `cancelled`
    reports: the listener stopped hearing the context then, not once the I/O layer has stopped it (None: when
    the I/O layer handles it)."""

    context_id: str
    at_ms: float | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ReportPlayback:
    """The client's playback position: feed it to the context's PlaybackClock."""

    context_id: str
    played_ms: float


@dataclass(frozen=True)
class EndSession:
    """The client sent `session.end`. The session has already ended every open context (EndContext) and
    closes by itself (CloseConnection 1000) once the last one is done."""


Action = Union[SendText, CloseConnection, StartSession, OpenContext, AppendText, FlushContext, EndContext,
               CancelContext, ReportPlayback, EndSession]
