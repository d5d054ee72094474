"""The async Python client of the voxrt.v1 realtime protocol (docs/protocol.md).

    from voxrt.client import OutputFormat, connect

    async with connect("ws://127.0.0.1:8000/v1/realtime", output=OutputFormat("pcm16", 24000, 20)) as session:
        ctx = session.context()
        await ctx.send("Hello ")
        await ctx.send("world.")
        await ctx.end()
        async for frame in ctx.frames():  # AudioFrame(seq, pts_ms, payload, is_first, is_last, ...)
            play(frame.payload)
        done = await ctx.done()  # ContextDone(reason, audio_ms, metrics)

- `connect`: `connect()`, which opens a `Session`.
- `session`: `Session`, one WebSocket; its reader task demultiplexes frames and events to contexts.
- `context`: `Context`, one agent turn: send / flush / end / cancel / playback; frames() / events() / done().
- `events`: a typed record for every server message.
- `errors`: `VoxrtError(code, message, fatal, context_id, close_code)` and its subclasses.

Depends on `websockets` and voxrt's sans-I/O `protocol` package only (no torch, no gateway).
"""

from voxrt.client.context import Context, ContextState
from voxrt.client.errors import (AuthenticationError, ClientStateError, ConnectError, ConnectionClosedError,
                                 ServerBusyError, VoxrtError)
from voxrt.client.events import (AlignedSpan, Alignment, AudioFrame, Cancelled, ContextDone, ContextEvent,
                                 ContextStarted, ErrorEvent, Flushed, Pong, ServerEvent, SessionStarted,
                                 UnknownEvent, parse_server_message)
from voxrt.client.connect import SUBPROTOCOL, connect
from voxrt.client.session import Session
from voxrt.protocol.config import Limits, OutputFormat, Pacing

__all__ = [
    "SUBPROTOCOL",
    "AlignedSpan",
    "Alignment",
    "AudioFrame",
    "AuthenticationError",
    "Cancelled",
    "ClientStateError",
    "ConnectError",
    "ConnectionClosedError",
    "Context",
    "ContextDone",
    "ContextEvent",
    "ContextStarted",
    "ContextState",
    "ErrorEvent",
    "Flushed",
    "Limits",
    "OutputFormat",
    "Pacing",
    "Pong",
    "ServerBusyError",
    "ServerEvent",
    "Session",
    "SessionStarted",
    "UnknownEvent",
    "VoxrtError",
    "connect",
    "parse_server_message",
]
