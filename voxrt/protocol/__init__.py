"""The voxrt.v1 realtime protocol, sans I/O (protocol.md is the contract).

- `events`: client JSON messages parsed into typed events; server messages encoded.
- `server_events`: the server -> client messages as typed events, and their one encoder.
- `frames`: the 12-byte header of binary audio frames.
- `config`: session configuration and limits (frozen, validated once).
- `errors`: the wire error codes and WebSocket close codes, mapped once.
- `session`: one connection's state machine; returns `actions` for the I/O layer to carry out.
- `context`: one context's (agent turn's) state.
- `clock`: a context's playback clock, from which the engine's deadlines come.

Standard library only, and no clocks: time is an argument (`now_ms`, monotonic milliseconds).
"""

from voxrt.protocol.actions import (Action, AppendText, CancelContext, CloseConnection, EndContext, EndSession,
                                    FlushContext, OpenContext, ReportPlayback, SendText, StartSession)
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import (CODECS, FRAME_MS, PACING_MODES, SAMPLE_RATES, SEGMENTATION_MODES, Limits,
                                   OutputFormat, Pacing, SessionConfig)
from voxrt.protocol.context import ContextState
from voxrt.protocol.errors import (CLOSE_AUTH, CLOSE_CAPACITY, CLOSE_INACTIVE, CLOSE_NORMAL, CLOSE_PROTOCOL,
                                   CLOSE_TOO_LARGE, InvalidTransition, ProtocolError)
from voxrt.protocol.events import (CANCEL_ALL, CancelEvent, ClientEvent, ContextEndEvent, FlushEvent, PingEvent,
                                   PlaybackEvent, SessionEndEvent, SessionStartEvent, TextEvent, encode_alignment,
                                   encode_cancelled, encode_context_done, encode_context_started, encode_error,
                                   encode_flushed, encode_pong, encode_session_started, parse_client_message)
from voxrt.protocol.frames import (FLAG_FIRST, FLAG_LAST, HEADER_BYTES, KIND_AUDIO, AudioFrameHeader,
                                   decode_audio_frame, encode_audio_frame)
from voxrt.protocol.server_events import (SERVER_EVENT_TYPES, Alignment, Cancelled, ContextDone, ContextStarted,
                                          Error, Flushed, Pong, ServerEvent, SessionStarted, encode_event)
from voxrt.protocol.session import Session, SessionState

SUBPROTOCOL = "voxrt.v1"

__all__ = [
    "SUBPROTOCOL",
    # actions
    "Action", "AppendText", "CancelContext", "CloseConnection", "EndContext", "EndSession", "FlushContext",
    "OpenContext", "ReportPlayback", "SendText", "StartSession",
    # clock, config, context
    "PlaybackClock", "CODECS", "FRAME_MS", "PACING_MODES", "SAMPLE_RATES", "SEGMENTATION_MODES", "Limits",
    "OutputFormat", "Pacing", "SessionConfig", "ContextState",
    # errors
    "CLOSE_AUTH", "CLOSE_CAPACITY", "CLOSE_INACTIVE", "CLOSE_NORMAL", "CLOSE_PROTOCOL", "CLOSE_TOO_LARGE",
    "InvalidTransition", "ProtocolError",
    # events
    "CANCEL_ALL", "CancelEvent", "ClientEvent", "ContextEndEvent", "FlushEvent", "PingEvent", "PlaybackEvent",
    "SessionEndEvent", "SessionStartEvent", "TextEvent", "encode_alignment", "encode_cancelled",
    "encode_context_done", "encode_context_started", "encode_error", "encode_flushed", "encode_pong",
    "encode_session_started", "parse_client_message",
    # frames
    "FLAG_FIRST", "FLAG_LAST", "HEADER_BYTES", "KIND_AUDIO", "AudioFrameHeader", "decode_audio_frame",
    "encode_audio_frame",
    # server events
    "SERVER_EVENT_TYPES", "Alignment", "Cancelled", "ContextDone", "ContextStarted", "Error", "Flushed", "Pong",
    "ServerEvent", "SessionStarted", "encode_event",
    # session
    "Session", "SessionState",
]
