"""How an adapter speaks another API on top of the native session: it runs the same `RealtimeSession` (protocol
state machine, `ContextRunner`s, pacing, cancel, alignment) over a `NativeLink`, a stand-in for the WebSocket
that takes native client messages from the adapter and hands the native server messages back to it. So every
adapter is a translator at the edge (foreign message in -> native message; native event or frame out -> foreign
message) and none has its own copy of the audio path.

`Outbox` is the adapter's writer: one task sends the foreign messages in order; consecutive audio frames of one
context that were queued in the same event-loop turn (a chunk's frames in burst pacing) go out as one message
when the adapter asks for it (`coalesce`), the way other APIs send a chunk per message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from typing import Awaitable, Callable

from starlette.websockets import WebSocket

from voxrt.gateway.realtime import RealtimeSession
from voxrt.protocol.frames import AudioFrameHeader, decode_audio_frame
from voxrt.protocol.server_events import ServerEvent

log = logging.getLogger("voxrt.gateway.compat")

OnEvent = Callable[[dict], Awaitable[None]]
OnFrame = Callable[[AudioFrameHeader, bytes], Awaitable[None]]
OnClose = Callable[[int, str], Awaitable[None]]


class NativeLink:
    """What `RealtimeSession` needs of a WebSocket: `receive()`, `send_text()`, `send_bytes()`, `close()`, and
    `send_event()`, which takes the typed server events (protocol/server_events.py) as they are, so the adapter
    reads their `to_wire()` dicts without the JSON text being written and parsed again."""

    def __init__(self, on_event: OnEvent, on_frame: OnFrame, on_close: OnClose) -> None:
        self._inbox: asyncio.Queue[dict] = asyncio.Queue()
        self._on_event, self._on_frame, self._on_close = on_event, on_frame, on_close
        self.is_closed = False

    # adapter -> native session
    def send(self, message: dict) -> None:
        """One native client message (protocol.md's shapes)."""
        self._inbox.put_nowait({"type": "websocket.receive", "text": json.dumps(message)})

    def send_text_raw(self, data: str) -> None:
        """A client text frame as received (the native session parses it and answers bad input itself)."""
        self._inbox.put_nowait({"type": "websocket.receive", "text": data})

    def disconnect(self) -> None:
        self._inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})

    # native session -> adapter
    async def receive(self) -> dict:
        return await self._inbox.get()

    async def send_event(self, event: ServerEvent) -> None:
        await self._on_event(event.to_wire())

    async def send_text(self, data: str) -> None:
        await self._on_event(json.loads(data))

    async def send_bytes(self, data: bytes) -> None:
        header, payload = decode_audio_frame(data)
        await self._on_frame(header, payload)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        if not self.is_closed:
            self.is_closed = True
            await self._on_close(code, reason or "")


class Outbox:
    """Foreign messages to one WebSocket, in order, from one writer task. Items are ("json", obj), ("bytes", b)
    or ("frame", key, payload, make): consecutive frames with the same key are joined and `make(key, payloads)`
    builds the one message (a dict) that carries them."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self._items: collections.deque = collections.deque()
        self._wake = asyncio.Event()
        self.is_closed = False
        self._task = asyncio.create_task(self._run(), name="voxrt-compat-outbox")

    def json(self, obj: dict) -> None:
        self._put(("json", obj))

    def frame(self, key, payload, make: Callable[[object, list, list[dict]], dict | None]) -> None:
        self._put(("frame", key, payload, make))

    def attach(self, key, fields: dict, alone: dict | None) -> None:
        """Fields that ride on the message of the frames just queued for `key` (an alignment on its chunk's
        audio); when no such message is being built, `alone` is sent instead (None: nothing)."""
        self._put(("attach", key, fields, alone))

    def call(self, fn: Callable[[], None]) -> None:
        """Runs `fn` once everything queued before it was sent (bookkeeping in step with the wire)."""
        self._put(("call", fn))

    def close(self, code: int, reason: str = "") -> None:
        self._put(("close", code, reason))

    def _put(self, item) -> None:
        if not self.is_closed:
            self._items.append(item)
            self._wake.set()

    def discard(self) -> None:
        """Nothing more goes out, not even what is queued (the peer said it is gone)."""
        self.is_closed = True
        for item in self._items:
            if item[0] == "marker" and not item[1].done():
                item[1].set_result(None)
        self._items.clear()

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Waits until everything queued so far was sent (or the socket is gone)."""
        done = asyncio.get_running_loop().create_future()
        self._put(("marker", done))
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(done), timeout_s)

    async def stop(self) -> None:
        self.is_closed = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

    async def _run(self) -> None:
        try:
            while True:
                while not self._items:
                    self._wake.clear()
                    await self._wake.wait()
                if self.is_closed and self._items[0][0] != "close":
                    self._items.clear()
                    continue
                item = self._items.popleft()
                kind = item[0]
                if kind == "json":
                    await self.ws.send_text(json.dumps(item[1], separators=(",", ":")))
                elif kind == "frame":
                    _, key, payload, make = item
                    payloads, extras = [payload], []
                    while self._items and self._items[0][0] in ("frame", "attach") and self._items[0][1] == key:
                        nxt = self._items.popleft()
                        if nxt[0] == "frame":
                            payloads.append(nxt[2])
                        else:
                            extras.append(nxt[2])
                    message = make(key, payloads, extras)
                    if message is not None:
                        await self.ws.send_text(json.dumps(message, separators=(",", ":")))
                elif kind == "attach":
                    if item[3] is not None:
                        await self.ws.send_text(json.dumps(item[3], separators=(",", ":")))
                elif kind == "call":
                    item[1]()
                elif kind == "marker":
                    if not item[1].done():
                        item[1].set_result(None)
                elif kind == "close":
                    self.is_closed = True
                    await self.ws.close(item[1], item[2][:120])
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 (the peer is gone; the reader notices and ends the session)
            self.is_closed = True
        finally:
            for item in self._items:  # nobody waits forever on a drain
                if item[0] == "marker" and not item[1].done():
                    item[1].set_result(None)


@contextlib.asynccontextmanager
async def session_slot(state):
    """Counts an adapter's session like a native one (the sessions gauge) under the native rule
    (`AppState.can_open_session`): yields False when the server is at capacity, the engine is not serving
    (starting or restarting) or the server is draining."""
    if not state.can_open_session():
        yield False
        return
    state.num_sessions += 1
    state.metrics.sessions.inc()
    try:
        yield True
    finally:
        state.num_sessions -= 1
        state.metrics.sessions.dec()


def check_auth(state, ws: WebSocket, *extra_keys: str | None) -> bool:
    """The native checks (Bearer key or token, `?token=`) or another API's key field (`xi-api-key`,
    `X-API-Key`, ...) given as `extra_keys`, compared as API keys."""
    auth = state.auth
    if auth.check(ws.headers.get("authorization"), ws.query_params.get("token")):
        return True
    return any(key and (auth.check_key(key) or auth.check_token(key)) for key in extra_keys)


async def run_adapter(ws: WebSocket, state, link: NativeLink, reader: Callable[[], Awaitable[None]],
                      outbox: Outbox) -> None:
    """Runs the native session over `link` while `reader` translates the peer's messages into it; when either
    ends, the other is stopped, the session's contexts are cancelled (pages and slots return) and what was
    queued for the peer is sent."""
    session = asyncio.create_task(RealtimeSession(link, state).run(), name="voxrt-compat-session")
    read = asyncio.create_task(reader(), name="voxrt-compat-reader")
    try:
        await asyncio.wait({session, read}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not session.done():
            link.disconnect()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(session), 10)
            if not session.done():
                session.cancel()
        if read.done() and not read.cancelled() and read.exception() is not None:
            log.warning("adapter reader failed: %r", read.exception())
        read.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await read
        await outbox.drain()
        await outbox.stop()
