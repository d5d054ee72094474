"""Audio frames straight onto a session's connection: the gateway's per-frame send path.

A binary frame sent through Starlette's `WebSocket.send_bytes` went through Starlette's state checks, its
exception-handling wrapper, the ASGI `send` of uvicorn's WebSocket protocol, websockets' framing and one
`transport.write` (one `send()` system call, which on this machine's loopback also pays for waking the
client): ~80 us a frame beside libopus's ~150 (py-spy, bench/results/2026-12-02-gateway/). Here:

- `RawSendMiddleware` keeps the server's own ASGI `send` in the WebSocket scope (`RAW_SEND_KEY`), below
  Starlette's wrappers;
- `FrameWriter.write_now` writes binary messages synchronously, several of a session's frames in one
  `transport.write` when they are due together (a lead fill), on the connection of uvicorn's
  `websockets-sansio` implementation. Each is still one WebSocket message with its own frame header: the wire
  does not change (protocol.md, "Binary audio frames"). The frame header is written here (`binary_frame`,
  RFC 6455 §5.2: FIN, opcode 2, unmasked from a server), not by websockets' `send_binary`, whose `Frame`
  object, checks, extension pass and BytesIO cost ~5 us a frame; the state websockets keeps for sending is
  read, not bypassed: a write happens only while its connection is OPEN and no fragmented message of its own
  is under way, and uvicorn writes every message websockets frames at once (whole frames interleave safely).
  The RSV1 bit stays clear, so where permessage-deflate was negotiated (`--per-message-deflate`) the frame is
  an uncompressed message, which RFC 7692 §6 allows beside compressed ones (and audio does not compress).
  It does so only when nothing would wait: the connection open, its transport not paused (uvicorn pauses
  writing when the transport's buffer is over its high-water mark). Otherwise it returns False and the caller
  takes the ordinary awaitable path (`RealtimeSession.send_bytes`), which waits for the transport.

Any other server (Starlette's TestClient, another ASGI server or uvicorn implementation) has no such protocol
object: `write_now` is then always False and every frame takes the ordinary path.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from websockets.protocol import State

RAW_SEND_KEY = "voxrt.asgi_send"

# the attributes of uvicorn's WebSocketsSansIOProtocol (uvicorn >= 0.30) that a direct write reads
_PROTOCOL_ATTRIBUTES = ("conn", "transport", "writable", "disconnected", "close_sent", "handshake_complete",
                        "initial_response")


_HEAD_SHORT = struct.Struct("!BB")  # RFC 6455 §5.2: FIN | opcode, then the 7-bit length (MASK clear)
_HEAD_16 = struct.Struct("!BBH")  # length 126..65535: 126, then 16 bits
_HEAD_64 = struct.Struct("!BBQ")  # longer: 127, then 64 bits
_FIN_BINARY = 0x82


def binary_frame(data: bytes) -> bytes:
    """One unmasked, unfragmented binary WebSocket frame (a whole message) carrying `data`."""
    length = len(data)
    if length < 126:
        return _HEAD_SHORT.pack(_FIN_BINARY, length) + data
    if length < 65536:
        return _HEAD_16.pack(_FIN_BINARY, 126, length) + data
    return _HEAD_64.pack(_FIN_BINARY, 127, length) + data


class RawSendMiddleware:
    """Pure ASGI: puts the server's `send` of a WebSocket connection into its scope, untouched, for as long as
    the app serves the connection. Taken out again when the app returns: uvicorn's protocol holds the scope,
    and the scope holding the protocol's bound `send` made a reference cycle per connection, which left every
    closed connection's objects (~70: the protocol, websockets' connection, its reader, queue, events,
    headers) to the garbage collector instead of freeing them at close; at 100+ sessions a second they fed
    full collections of tens of ms, each holding the gateway's event loop (bench/results/2026-12-05-h100-opentext/)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        scope[RAW_SEND_KEY] = send
        try:
            await self.app(scope, receive, send)
        finally:
            scope.pop(RAW_SEND_KEY, None)


def _direct_protocol(send: Callable | None) -> Any | None:
    """uvicorn's sansio WebSocket protocol behind `send` (its bound `send` method), or None."""
    protocol = getattr(send, "__self__", None)
    if protocol is None or not any(cls.__name__ == "WebSocketsSansIOProtocol" and cls.__module__.startswith("uvicorn.")
                                   for cls in type(protocol).__mro__):  # it, or a subclass (gateway/server.py's)
        return None
    if not all(hasattr(protocol, name) for name in _PROTOCOL_ATTRIBUTES):
        return None
    return protocol


class FrameWriter:
    """Synchronous binary writes on one WebSocket, where the server allows them (see the module docstring)."""

    def __init__(self, raw_send: Callable | None) -> None:
        self._protocol = _direct_protocol(raw_send)

    @property
    def is_direct(self) -> bool:
        return self._protocol is not None

    def write_now(self, messages: list[bytes]) -> bool:
        """Sends each of `messages` as one binary WebSocket message, all in one transport write, now; False
        (nothing sent) when that is not possible without waiting. ConnectionError when the connection is
        closed or closing."""
        protocol = self._protocol
        if protocol is None or not protocol.writable.is_set():
            return False
        if protocol.disconnected or protocol.close_sent or not protocol.handshake_complete or \
                protocol.initial_response is not None:
            raise ConnectionError("the connection is closed")
        conn = protocol.conn
        if conn.state is not State.OPEN:  # the client started closing (websockets' send_binary would refuse)
            raise ConnectionError(f"the connection is {conn.state.name.lower()}")
        if conn.expect_continuation_frame:  # never in uvicorn (it sends whole messages); websockets' rule
            return False
        if len(messages) == 1:  # the common case (a steady frame): `binary_frame`, inline
            data = messages[0]
            length = len(data)
            protocol.transport.write((_HEAD_SHORT.pack(_FIN_BINARY, length) if length < 126 else
                                      _HEAD_16.pack(_FIN_BINARY, 126, length) if length < 65536 else
                                      _HEAD_64.pack(_FIN_BINARY, 127, length)) + data)
        else:  # a pair of steady frames (audio_out.py's EARLY_FRAMES) or a lead fill: the same, in one write
            parts = []
            for data in messages:
                length = len(data)
                parts.append(_HEAD_SHORT.pack(_FIN_BINARY, length) if length < 126 else
                             _HEAD_16.pack(_FIN_BINARY, 126, length) if length < 65536 else
                             _HEAD_64.pack(_FIN_BINARY, 127, length))
                parts.append(data)
            protocol.transport.write(b"".join(parts))
        return True
