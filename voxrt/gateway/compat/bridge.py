"""How an adapter speaks another API on top of the native session: it runs the same `RealtimeSession` (protocol
state machine, `ContextRunner`s, pacing, cancel, alignment) over a `NativeLink`, a stand-in for the WebSocket
that takes native client messages from the adapter and hands the native server messages back to it. So every
adapter is a translator at the edge (foreign message in -> native message; native event or frame out -> foreign
message) and none has its own copy of the audio path.

Events reach an adapter as the typed events of protocol/server_events.py, and an adapter dispatches on their
classes (`match`), so a renamed or new event cannot fall through a string comparison unnoticed: whatever an
adapter has no case for goes to `unknown_event`, which logs it (once per adapter and class).

`Outbox` is the adapter's writer: one task sends the foreign messages in order; consecutive audio frames of one
context that were queued in the same event-loop turn (a chunk's frames in burst pacing) go out as one message
when the adapter asks for it (`coalesce`), the way other APIs send a chunk per message.

Slow and stalled peers, under the native rule. A native session's send waits while its connection cannot take
more (uvicorn pauses writing when the transport's buffer is over its high-water mark), and the context's
`AudioOut` is paused until that send is done (pacer.py, audio_out.py): the backpressure reaches the context,
which takes no further chunk from the engine, so the gateway holds about one chunk per context however slowly
the client reads (what the engine generates meanwhile waits in the engine client's stream, up to the request's
length, as for any native session). An adapter keeps that rule by making the link's sends wait the same way: a frame or event queued
in an `Outbox` holding more than `MAX_QUEUED_BYTES` waits until the writer has sent it below that (`room`), so
the native session's send is the one that waits, as on a paused transport. Reads are bounded the same way: the
adapter's reader takes the peer's next message only once the native session has read all but
`MAX_INBOX_MESSAGES` of the ones before (server.py's `MAX_QUEUED_MESSAGES`) and its replies have room, so a peer
that writes without reading meets TCP backpressure. A peer that takes nothing at all for the session's
`inactivity_timeout_s` while messages wait for it is inactive, as a client that sends nothing is: the writer
gives up, the adapter's error (code `inactivity_timeout`) and a close frame with code 4008 are written after
what the connection holds already, the session ends at once (its contexts are cancelled: engine requests, KV
pages and codec slots return; its admission slot is freed) and the connection is dropped `CLOSE_GRACE_S`
later if the peer has not read its way to the close by then (the rule and `close_stalled`: gateway/stall.py,
shared with the native session).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from starlette.websockets import WebSocket

from voxrt.gateway.realtime import RealtimeSession
from voxrt.gateway.stall import CLOSE_GRACE_S, CLOSE_STALLED, close_stalled  # noqa: F401 (also bridge's names)
from voxrt.protocol.config import Limits
from voxrt.protocol.errors import INACTIVITY_TIMEOUT, close_reason
from voxrt.protocol.frames import AudioFrameHeader, decode_audio_frame
from voxrt.protocol.server_events import ServerEvent

log = logging.getLogger("voxrt.gateway.compat")

# Bytes an Outbox may hold (queued or being sent) before the link's sends wait: above one chunk of the largest
# output (a 2 s chunk of 48 kHz PCM16 is 192 kB), so a peer that keeps up gets a chunk per message as before,
# and about one chunk per socket is all a slow peer can make the server hold (the native AudioOut holds one).
MAX_QUEUED_BYTES = 256 * 1024
MAX_INBOX_MESSAGES = 16  # the peer's messages waiting for the native session: as server.MAX_QUEUED_MESSAGES

OnEvent = Callable[[ServerEvent], Awaitable[None]]
OnFrame = Callable[[AudioFrameHeader, bytes], Awaitable[None]]
OnClose = Callable[[int, str], Awaitable[None]]
StallMessage = Callable[[str, str], "dict | None"]  # (code, message) -> the adapter's error body, or None


@dataclass(frozen=True)
class UntypedEvent:
    """A native server message that reached the link as JSON text instead of a typed event (every message the
    session builds is typed, protocol/server_events.py; this is for one that is not): no adapter has a case for
    it, so it takes the logged `unknown_event` path."""
    wire: dict

    @property
    def TYPE(self) -> str:  # noqa: N802 - as the typed events' class attribute
        return str(self.wire.get("type"))

    def to_wire(self) -> dict:
        return self.wire


_UNKNOWN_LOGGED: set[tuple[str, str]] = set()


def unknown_event(adapter: str, event: object, what: str = "dropped") -> None:
    """An event an adapter has no case for: a warning the first time per adapter and event class, then debug
    lines (a new server event must be given a translation, or an explicit case saying it has none)."""
    name = type(event).__name__ if not isinstance(event, UntypedEvent) else f"untyped {event.TYPE!r}"
    key = (adapter, name)
    level = logging.DEBUG if key in _UNKNOWN_LOGGED else logging.WARNING
    _UNKNOWN_LOGGED.add(key)
    log.log(level, "%s adapter: no case for the native event %s; %s", adapter, name, what)


class NativeLink:
    """What `RealtimeSession` needs of a WebSocket: `receive()`, `send_text()`, `send_bytes()`, `close()`, and
    `send_event()`, which takes the typed server events (protocol/server_events.py) and hands them to the
    adapter as they are (no JSON written and parsed again). Every send returns once the `outboxes` it may have
    queued into have room (see the module docstring): the native session waits on it as on a socket."""

    def __init__(self, on_event: OnEvent, on_frame: OnFrame, on_close: OnClose,
                 outboxes: "tuple[Outbox, ...]" = ()) -> None:
        self._inbox: asyncio.Queue[dict] = asyncio.Queue()
        self._inbox_room = asyncio.Event()
        self._inbox_room.set()
        self._on_event, self._on_frame, self._on_close = on_event, on_frame, on_close
        self.outboxes = outboxes
        self.is_closed = False

    # adapter -> native session
    def send(self, message: dict) -> None:
        """One native client message (protocol.md's shapes)."""
        self._put({"type": "websocket.receive", "text": json.dumps(message)})

    def send_text_raw(self, data: str) -> None:
        """A client text frame as received (the native session parses it and answers bad input itself)."""
        self._put({"type": "websocket.receive", "text": data})

    def disconnect(self) -> None:
        self._put({"type": "websocket.disconnect", "code": 1000})

    def _put(self, message: dict) -> None:
        self._inbox.put_nowait(message)
        if self._inbox.qsize() >= MAX_INBOX_MESSAGES:
            self._inbox_room.clear()

    async def wait_room(self) -> None:
        """The adapter's reader calls this before it reads the peer's next message: it returns once the native
        session has read all but MAX_INBOX_MESSAGES of the messages before and the outboxes have room."""
        await self._inbox_room.wait()
        await self._room()

    async def _room(self) -> None:
        for outbox in self.outboxes:
            await outbox.room()

    # native session -> adapter
    async def receive(self) -> dict:
        message = await self._inbox.get()
        if self._inbox.qsize() < MAX_INBOX_MESSAGES:
            self._inbox_room.set()
        return message

    async def send_event(self, event: ServerEvent) -> None:
        await self._on_event(event)
        await self._room()

    async def send_text(self, data: str) -> None:
        await self._on_event(UntypedEvent(json.loads(data)))
        await self._room()

    async def send_bytes(self, data: bytes) -> None:
        header, payload = decode_audio_frame(data)
        await self._on_frame(header, payload)
        await self._room()

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        if not self.is_closed:
            self.is_closed = True
            await self._on_close(code, reason or "")


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Outbox:
    """Foreign messages to one WebSocket, in order, from one writer task. Items are ("text", str), ("frame",
    key, payload, make), ("attach", ...), ("call", fn), ("marker", future), ("close", code, reason), each
    after its kind with the bytes it holds last: consecutive frames with the same key are joined and
    `make(key, payloads, extras)` builds the one message (a dict) that carries them.

    `room()` waits while more than `max_queued_bytes` are queued or being sent. `stall_timeout_s` (None: no
    limit) is how long one send may wait for the connection before the peer counts as stalled: then nothing
    more is sent, `stall_message(code, message)` (the adapter's error body, None: none) and a close frame
    with code 4008 are written after what the connection holds, and `gone` is set. `gone` is also set when
    a send fails (the peer left), after a close and on `discard`."""

    def __init__(self, ws: WebSocket, *, stall_timeout_s: float | None = None,
                 stall_message: StallMessage | None = None, max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self.ws = ws
        self.stall_timeout_s, self._stall_message, self.max_queued_bytes = stall_timeout_s, stall_message, \
            max_queued_bytes
        self._items: collections.deque = collections.deque()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.gone = asyncio.Event()
        self.num_queued_bytes = 0  # queued or being sent
        self.max_num_queued_bytes = 0  # the most it held (tests, and the stall's log line)
        self.is_closed = False
        self.is_stalled = False
        self._task = asyncio.create_task(self._run(), name="voxrt-compat-outbox")

    def json(self, obj: dict) -> None:
        text = _dumps(obj)
        self._put(("text", text, len(text)))

    def frame(self, key, payload, make: Callable[[object, list, list[dict]], dict | None],
              num_bytes: int = 0) -> None:
        """`num_bytes`: the audio it carries (what the bound counts)."""
        self._put(("frame", key, payload, make, num_bytes))

    def attach(self, key, fields: dict, alone: dict | None) -> None:
        """Fields that ride on the message of the frames just queued for `key` (an alignment on its chunk's
        audio); when no such message is being built, `alone` is sent instead (None: nothing)."""
        self._put(("attach", key, fields, alone, 0))

    def call(self, fn: Callable[[], None]) -> None:
        """Runs `fn` once everything queued before it was sent (bookkeeping in step with the wire)."""
        self._put(("call", fn, 0))

    def close(self, code: int, reason: str = "") -> None:
        self._put(("close", code, reason, 0))

    def _put(self, item) -> None:
        if not self.is_closed:
            self._items.append(item)
            self.num_queued_bytes += item[-1]
            if self.num_queued_bytes > self.max_num_queued_bytes:
                self.max_num_queued_bytes = self.num_queued_bytes
            if self.num_queued_bytes > self.max_queued_bytes:
                self._room.clear()
            self._wake.set()

    def _sent(self, num_bytes: int) -> None:
        self.num_queued_bytes -= num_bytes
        if self.num_queued_bytes <= self.max_queued_bytes:
            self._room.set()

    async def room(self) -> None:
        """Returns once at most `max_queued_bytes` are queued or being sent, or nothing more can be sent."""
        while not self._room.is_set() and not self.is_closed:
            await self._room.wait()

    def _end(self) -> None:
        """Nothing more goes out: the queue is dropped, nobody waits on a drain or for room."""
        self.is_closed = True
        for item in self._items:
            if item[0] == "marker" and not item[1].done():
                item[1].set_result(None)
        self._items.clear()
        self.num_queued_bytes = 0
        self._room.set()
        self.gone.set()

    def discard(self) -> None:
        """Nothing more goes out, not even what is queued (the peer said it is gone)."""
        self._end()

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Waits until everything queued so far was sent (or the socket is gone)."""
        done = asyncio.get_running_loop().create_future()
        self._put(("marker", done, 0))
        if self.is_closed:
            return
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(done), timeout_s)

    async def stop(self) -> None:
        self.is_closed = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self._end()

    async def _send(self, send: Awaitable[None]) -> None:
        """One send, given up as stalled after `stall_timeout_s` (the writer task is cancelled by the timer)."""
        if self.stall_timeout_s is None:
            await send
            return
        handle = asyncio.get_running_loop().call_later(self.stall_timeout_s, self._on_stall)
        try:
            await send
        finally:
            handle.cancel()

    def _on_stall(self) -> None:
        self.is_stalled = True
        self._task.cancel()

    async def _run(self) -> None:
        try:
            while True:
                while not self._items:
                    self._wake.clear()
                    await self._wake.wait()
                if self.is_closed and self._items[0][0] != "close":
                    self._end()
                    continue
                item = self._items.popleft()
                kind = item[0]
                if kind == "text":
                    await self._send(self.ws.send_text(item[1]))
                    self._sent(item[2])
                elif kind == "frame":
                    _, key, payload, make, num_bytes = item
                    payloads, extras = [payload], []
                    while self._items and self._items[0][0] in ("frame", "attach") and self._items[0][1] == key:
                        nxt = self._items.popleft()
                        if nxt[0] == "frame":
                            payloads.append(nxt[2])
                        else:
                            extras.append(nxt[2])
                        num_bytes += nxt[-1]
                    message = make(key, payloads, extras)
                    if message is not None:
                        await self._send(self.ws.send_text(_dumps(message)))
                    self._sent(num_bytes)
                elif kind == "attach":
                    if item[3] is not None:
                        await self._send(self.ws.send_text(_dumps(item[3])))
                elif kind == "call":
                    item[1]()
                elif kind == "marker":
                    if not item[1].done():
                        item[1].set_result(None)
                elif kind == "close":
                    self.is_closed = True
                    await self._send(self.ws.close(item[1], close_reason(item[2])))
                    return
        except asyncio.CancelledError:
            if not self.is_stalled:
                raise
            self._give_up()
        except Exception:  # noqa: BLE001 (the peer is gone; the reader notices and ends the session)
            self.is_closed = True
        finally:
            self._end()

    def _give_up(self) -> None:
        """The peer took nothing for stall_timeout_s: its error and the close go after what its connection holds
        already, and the connection is dropped CLOSE_GRACE_S later if it has not read them by then."""
        log.info("a compat peer read nothing for %g s with %d bytes waiting for it; closing it (%d, %s)",
                 self.stall_timeout_s, self.num_queued_bytes, CLOSE_STALLED, INACTIVITY_TIMEOUT)
        message = f"the client read nothing for {self.stall_timeout_s:g} s while audio waited for it"
        body = self._stall_message(INACTIVITY_TIMEOUT, message) if self._stall_message is not None else None
        self._end()
        close_stalled(self.ws, CLOSE_STALLED, "inactivity timeout", None if body is None else _dumps(body))


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
                      outbox: Outbox, limits: Limits | None = None) -> None:
    """Runs the native session over `link` while `reader` translates the peer's messages into it; when either
    ends, or the peer can take nothing more (`outbox.gone`: it stalled, or a send failed), the other is
    stopped, the session's contexts are cancelled (pages and slots return) and what was queued for the peer is
    sent. `limits`: the session's (None: the server's), e.g. the API's own idle timeouts."""
    session = asyncio.create_task(RealtimeSession(link, state, limits).run(), name="voxrt-compat-session")
    read = asyncio.create_task(reader(), name="voxrt-compat-reader")
    gone = asyncio.create_task(outbox.gone.wait(), name="voxrt-compat-gone")
    try:
        await asyncio.wait({session, read, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
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
        if outbox.is_stalled:
            state.metrics.errors.labels(INACTIVITY_TIMEOUT).inc()
