"""The stall rule, one copy for the native session (realtime.py) and the compat adapters (compat/bridge.py).

A peer whose connection takes nothing for the session's `limits.inactivity_timeout_s` while a send waits for it
(uvicorn pauses writing while the transport's buffer is over its high-water mark, and every send waits for it)
is inactive, as a client that sends nothing is: nothing more is sent to it, its fatal error (code
`inactivity_timeout`) and a close frame with code 4008 are written after what its connection holds already
(`close_stalled`), its session ends at once, and the connection is dropped `CLOSE_GRACE_S` later if the peer
has not read its way to the close by then."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.websockets import WebSocket
from websockets.protocol import State

from voxrt.gateway.wire import RAW_SEND_KEY, _direct_protocol
from voxrt.protocol.errors import FATAL_CLOSE_CODES, INACTIVITY_TIMEOUT, close_reason

CLOSE_GRACE_S = 5.0  # a stalled peer's connection is dropped this long after its close frame was written
CLOSE_STALLED = FATAL_CLOSE_CODES[INACTIVITY_TIMEOUT]  # 4008, protocol/errors.py


def close_stalled(ws: WebSocket, code: int, reason: str, text: str | None) -> None:
    """Closes a connection whose transport cannot take more, without waiting for it (a WebSocket close would
    wait for the transport like any send): on uvicorn's sansio protocol (gateway/wire.py) `text` and the close
    frame are framed by its websockets connection and written after what the transport holds, the transport
    is closed (it ends once the peer read them) and aborted CLOSE_GRACE_S later if it has not; that is what
    uvicorn's own keepalive timeout does, but for the abort. Any other server: its close, in a task, given up
    after CLOSE_GRACE_S."""
    reason = close_reason(reason)
    protocol = _direct_protocol(getattr(ws, "scope", {}).get(RAW_SEND_KEY))
    if protocol is None:
        async def bounded_close() -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code, reason), CLOSE_GRACE_S)

        asyncio.ensure_future(bounded_close())
        return
    if protocol.disconnected or protocol.close_sent:
        return
    conn = protocol.conn
    if conn.state is State.OPEN and not conn.expect_continuation_frame:
        if text is not None:
            conn.send_text(text.encode())
        conn.send_close(code, reason)
        protocol.transport.write(b"".join(conn.data_to_send()))
    protocol.close_sent = True
    protocol.transport.close()
    def abort() -> None:  # (once the connection is lost its transport has no loop to abort on)
        if not protocol.disconnected:
            protocol.transport.abort()

    protocol.loop.call_later(CLOSE_GRACE_S, abort)
