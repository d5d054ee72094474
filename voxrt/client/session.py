"""A voxrt.v1 session over one WebSocket: `connect()` (connect.py) opens it, `Session.context()` starts turns.

One reader task per session demultiplexes what the server sends: binary frames by the context index that
`context.started` gave, JSON events by `context_id`, the rest (pongs, errors about no context) to
`Session.events()`. Sends may come from any task of the session's event loop.

    async with connect(url, output=OutputFormat("pcm16", 24000, 20)) as session:
        ctx = session.context()
        await ctx.send_all(["Hello ", "world."])
        async for frame in ctx.frames():
            play(frame.payload)

Leaving the `async with` normally ends the session cleanly (`session.end`: the server finishes the open
contexts, then closes with 1000; after `close_timeout_s` the client closes itself). Leaving it with an
exception cancels every context at once and closes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from voxrt.client.context import Context
from voxrt.client.errors import ClientStateError, VoxrtError, closed_error
from voxrt.client.events import (Alignment, AudioFrame, Cancelled, ContextDone, ContextStarted, ErrorEvent, Flushed,
                                 Pong, ServerEvent, SessionStarted, parse_server_message)
from voxrt.protocol.config import Limits, OutputFormat
from voxrt.protocol.events import CANCEL_ALL, MAX_CONTEXT_ID_CHARS
from voxrt.protocol.frames import decode_audio_frame

log = logging.getLogger("voxrt.client")

MAX_SESSION_EVENTS = 256  # session-level events kept for `events()`; the oldest go first
_KEEPALIVE_FRACTION = 1 / 3  # ping after this share of the server's inactivity timeout without a message


class Session:
    """An open voxrt.v1 session. Get one from `connect()`."""

    def __init__(self, ws: ClientConnection, started: SessionStarted, *, close_timeout_s: float,
                 keepalive: bool) -> None:
        self._ws = ws
        self.started = started
        self.close_timeout_s = close_timeout_s
        self._contexts: dict[str, Context] = {}  # contexts the server may still send something for
        self._by_index: dict[int, Context] = {}
        self._used_ids: set[str] = set()  # context ids are never reused within a session (protocol.md)
        self._events: deque[ServerEvent] = deque(maxlen=MAX_SESSION_EVENTS)
        self._events_changed = asyncio.Event()
        self._pings: dict[str, asyncio.Future[Pong]] = {}
        self._ping_ids = itertools.count(1)
        self._fatal: VoxrtError | None = None  # the fatal `error` message, until the close that follows it
        self._closed_error: VoxrtError | None = None  # set once the connection is gone
        self._is_closing = False
        self._is_aborting = False  # abort(): the open contexts fail with the close, whatever the server answers
        self._is_closed_by_client = False
        self._last_send_s = time.monotonic()
        self._reader = asyncio.create_task(self._read_forever(), name=f"voxrt-client-{started.session_id}")
        self._keepalive = asyncio.create_task(self._keep_alive()) if keepalive else None

    def __repr__(self) -> str:
        return f"Session(id={self.session_id!r}, voice={self.voice!r}, output={self.output}, closed={self.is_closed})"

    # ---- what the server resolved ------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.started.session_id

    @property
    def voice(self) -> str:
        return self.started.voice

    @property
    def model(self) -> str:
        return self.started.model

    @property
    def output(self) -> OutputFormat:
        return self.started.output

    @property
    def limits(self) -> Limits:
        return self.started.limits

    @property
    def is_closed(self) -> bool:
        return self._closed_error is not None

    @property
    def close_code(self) -> int | None:
        return self._ws.close_code

    # ---- the caller's side -------------------------------------------------------------------------------------

    def context(self, context_id: str | None = None, *, num_frames: int | None = None) -> Context:
        """A new context (one agent turn). It opens on the server with its first text.

        `num_frames` (benchmarks): ask the server to pin this context's output length to that many model
        frames. Servers honour it only when started with `--allow-pinned-lengths`; others ignore it."""
        if self._closed_error is not None:
            raise self._closed_error
        if self._is_closing:
            raise ClientStateError("cannot start a context: the session is ending")
        if context_id is None:
            context_id = f"ctx-{uuid.uuid4().hex[:12]}"
        if not isinstance(context_id, str) or not 0 < len(context_id) <= MAX_CONTEXT_ID_CHARS \
                or context_id == CANCEL_ALL:
            raise ValueError(f"context_id must be a non-empty string of at most {MAX_CONTEXT_ID_CHARS} characters, "
                             f"not {CANCEL_ALL!r}; got {context_id!r:.80}")
        if context_id in self._used_ids:
            raise ValueError(f"context id {context_id!r} was already used in this session")
        self._used_ids.add(context_id)
        if num_frames is not None and (isinstance(num_frames, bool) or not isinstance(num_frames, int)
                                       or num_frames < 1):
            raise ValueError(f"num_frames must be a positive integer or None, got {num_frames!r}")
        context = Context(self, context_id, num_frames)
        self._contexts[context_id] = context
        return context

    async def ping(self, timeout_s: float = 10.0) -> float:
        """Round trip to the server and back, in milliseconds."""
        ping_id = f"ping-{next(self._ping_ids)}"
        answer: asyncio.Future[Pong] = asyncio.get_running_loop().create_future()
        self._pings[ping_id] = answer
        try:
            start_s = time.perf_counter()
            await self._send({"type": "ping", "id": ping_id})
            await asyncio.wait_for(answer, timeout_s)
            return (time.perf_counter() - start_s) * 1000.0
        finally:
            self._pings.pop(ping_id, None)
            if answer.done() and not answer.cancelled():
                answer.exception()  # retrieved, also when the send failed first

    async def cancel_all(self) -> list[Cancelled]:
        """Barge-in on every open context at once."""
        open_contexts = [c for c in self._contexts.values() if not c.is_finished]
        return list(await asyncio.gather(*(c.cancel() for c in open_contexts)))

    async def events(self) -> AsyncIterator[ServerEvent]:
        """Session-level events: pongs nobody waited for, errors about no context (e.g. `invalid_json`), the
        fatal error before a close, and message types this client does not know. Ends when the session
        closes. Holds at most MAX_SESSION_EVENTS unread events."""
        while True:
            while self._events:
                yield self._events.popleft()
            if self._closed_error is not None:
                return
            self._events_changed.clear()
            await self._events_changed.wait()

    async def close(self, timeout_s: float | None = None) -> None:
        """End the session cleanly: `session.end` (the server finishes the open contexts and closes with 1000),
        then wait for the close, at most `timeout_s` (default `close_timeout_s`), then close from this side."""
        timeout_s = self.close_timeout_s if timeout_s is None else timeout_s
        if not self._is_closing and self._closed_error is None:
            self._is_closing = True
            try:
                await self._send({"type": "session.end"})
                await asyncio.wait_for(asyncio.shield(self._reader), timeout_s)
            except (VoxrtError, asyncio.TimeoutError):
                pass
        await self._shutdown()

    async def abort(self) -> None:
        """Stop now: cancel every context on the server (best effort), fail the local ones, close."""
        self._is_closing = True
        self._is_aborting = True
        if self._closed_error is None:
            try:
                await asyncio.wait_for(self._send({"type": "cancel", "context_id": CANCEL_ALL}), 1.0)
            except (VoxrtError, asyncio.TimeoutError):
                pass
        await self._shutdown()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.abort()

    # ---- sending -----------------------------------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        if self._closed_error is not None:
            raise self._closed_error
        try:
            await self._ws.send(json.dumps(message, ensure_ascii=False, separators=(",", ":")))
        except ConnectionClosed as error:
            await asyncio.shield(self._reader)  # it records why the connection closed
            raise self._closed_error or closed_error(error.rcvd.code if error.rcvd else None, "") from None
        self._last_send_s = time.monotonic()

    async def _keep_alive(self) -> None:
        """The server closes a session after `inactivity_timeout_s` without a message (4008); a long-lived
        agent session is quiet between turns, so ping when nothing was sent for a third of that."""
        interval_s = self.limits.inactivity_timeout_s * _KEEPALIVE_FRACTION
        while self._closed_error is None and not self._is_closing:
            await asyncio.sleep(max(0.0, self._last_send_s + interval_s - time.monotonic()))
            if time.monotonic() - self._last_send_s >= interval_s and not self._is_closing:
                try:
                    await self._send({"type": "ping", "id": "keepalive"})
                except VoxrtError:
                    return

    # ---- the reader task ---------------------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        error: VoxrtError | None = None
        try:
            async for message in self._ws:
                if isinstance(message, bytes):
                    self._on_binary(message)
                else:
                    self._on_event(parse_server_message(message))
        except ConnectionClosed:
            pass
        except VoxrtError as broken:  # the server broke the protocol: nothing it sends can be trusted now
            log.error("closing session %s: %s", self.session_id, broken)
            error = broken
            await self._ws.close()
        finally:
            code, reason = self._ws.close_code, self._ws.close_reason or ""
            if self._is_closed_by_client and not reason:
                reason = "closed by this client"
            self._on_closed(error or closed_error(code, reason, self._fatal))

    def _on_binary(self, data: bytes) -> None:
        try:
            header, payload = decode_audio_frame(data)
        except ValueError as error:
            log.warning("session %s: dropped a malformed binary frame: %s", self.session_id, error)
            return
        context = self._by_index.get(header.index)
        if context is None:
            log.debug("session %s: frame for unknown context index %d", self.session_id, header.index)
            return
        context._on_item(AudioFrame.from_wire(context.id, header, payload))

    def _on_event(self, event: ServerEvent) -> None:
        if isinstance(event, ErrorEvent):
            self._on_error(event)
            return
        if isinstance(event, Pong):
            answer = self._pings.get(event.id) if isinstance(event.id, str) else None
            if answer is not None and not answer.done():
                answer.set_result(event)
            elif event.id != "keepalive":
                self._push_event(event)
            return
        context_id = getattr(event, "context_id", None)
        context = self._contexts.get(context_id) if context_id is not None else None
        if context is None:
            if context_id is None:
                self._push_event(event)  # an unknown message type
            else:
                log.debug("session %s: %s for a context this client no longer tracks", self.session_id, event)
            return
        if isinstance(event, ContextStarted):
            context._on_started(event)
            self._by_index[event.index] = context
        elif isinstance(event, (Alignment, Flushed)):
            context._on_item(event)
        elif isinstance(event, Cancelled):
            context._on_cancelled(event)
        elif isinstance(event, ContextDone):
            if self._is_aborting and not context.is_finished:
                return  # the server's answer to the abort's cancel: the context fails with the close instead
            context._on_done(event)
        self._forget_if_finished(context)

    def _on_error(self, event: ErrorEvent) -> None:
        error = event.to_exception()
        if event.is_fatal:
            self._fatal = error  # everything fails with it when the close that follows arrives
            self._push_event(event)
            return
        context = self._contexts.get(event.context_id) if event.context_id is not None else None
        if context is None or context.is_finished:
            self._push_event(event)  # e.g. a late `unknown_context` for a playback report that crossed a done
            return
        if context._on_error(error):
            asyncio.ensure_future(self._cancel_quietly(context.id))
        self._forget_if_finished(context)

    async def _cancel_quietly(self, context_id: str) -> None:
        try:
            await self._send({"type": "cancel", "context_id": context_id})
        except VoxrtError:
            pass  # the connection is gone, and the context with it

    def _push_event(self, event: ServerEvent) -> None:
        self._events.append(event)
        self._events_changed.set()

    def _forget_if_finished(self, context: Context) -> None:
        if context._is_forgettable:
            self._contexts.pop(context.id, None)
            if context.index is not None and self._by_index.get(context.index) is context:
                del self._by_index[context.index]

    def _on_closed(self, error: VoxrtError) -> None:
        if self._closed_error is not None:
            return
        self._closed_error = error
        for context in list(self._contexts.values()):
            context._on_closed(error)
        self._contexts.clear()
        self._by_index.clear()
        for answer in self._pings.values():
            if not answer.done():
                answer.set_exception(error)
        self._events_changed.set()

    async def _shutdown(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._is_closed_by_client = self._closed_error is None
        try:
            await self._ws.close()
        except Exception:  # noqa: BLE001 (already gone)
            pass
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), self.close_timeout_s)
        except asyncio.TimeoutError:
            self._reader.cancel()
        if self._keepalive is not None:
            try:
                await self._keepalive
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
