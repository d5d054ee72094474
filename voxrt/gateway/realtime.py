"""`/v1/realtime`: one WebSocket session. The protocol's sans-I/O `Session` decides; this module does the
I/O: it feeds received messages in, executes the actions that come out, and runs a `ContextRunner` per
context. Sends go through one lock, so frames and JSON messages never interleave mid-message.

Before the session: the Origin check (a browser page of another origin may not open a session unless
`--allow-origin` lists it; same-origin pages and non-browser clients may) and auth. At `session.start` the
session takes an admission slot (gateway/admission.py), waiting in the bounded queue if need be; refused, it
gets `server_busy` with `retry_after_ms` and close 4029. Each message first takes a token of the session's
rate limit. A client that goes away mid-session is one info line in the log, not a traceback.

Playback reports (~10 a second a session) are the bulk of what clients send. Under `voxrt serve` (uvicorn's
sansio protocol, server.py) a text message is offered to `_receive_now` as it is read; while the receive loop
waits with nothing queued ahead and a rate token is there, a report is parsed by the `Session` and fed to its
context there and then, instead of through uvicorn's queue, a wake-up of the session's task (through every
middleware's frame) and Starlette's receive (bench/results/2026-12-03-gateway-9/). Anything else it parsed is
queued with its actions for the loop, in order; under any other server every message takes the loop.

A client that stops reading is inactive too (gateway/stall.py, the compat adapters' rule): a send waits while
the connection cannot take more (uvicorn pauses writing while its transport's buffer is over its high-water
mark) and the context's AudioOut waits behind it, so the idle timer, which counts a context that owes audio as
activity, would never fire. So one send (a frame, an event, the close) that waits longer than the session's
`limits.inactivity_timeout_s` ends it: nothing more is sent, the fatal `inactivity_timeout` error and close 4008
are written after what the connection holds (`close_stalled`), the receive loop stops at once and the
session's teardown runs (every context cancelled: engine requests, pages and slots return; the admission slot
is freed), and the connection is dropped `CLOSE_GRACE_S` later if the client has not read to the close."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from urllib.parse import urlsplit

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxrt.engine.errors import EngineError
from voxrt.gateway.admission import Busy, TokenBucket
from voxrt.gateway.context import ContextRunner, now_ms
from voxrt.gateway.stall import CLOSE_STALLED, close_stalled
from voxrt.gateway.wire import RAW_SEND_KEY, FrameWriter, _direct_protocol
from voxrt.logs import access
from voxrt.protocol.actions import (AppendText, CancelContext, CloseConnection, EndContext, EndSession, FlushContext,
                                    OpenContext, ReportPlayback, SendText, StartSession)
from voxrt.protocol.errors import (CLOSE_AUTH, CLOSE_CAPACITY, CLOSE_GOING_AWAY, INACTIVITY_TIMEOUT, SERVER_BUSY,
                                   SERVER_SHUTTING_DOWN, close_reason)
from voxrt.protocol.config import Limits
from voxrt.protocol.events import encode_error
from voxrt.protocol.server_events import Error, ServerEvent, encode_event
from voxrt.protocol.session import Session

log = logging.getLogger("voxrt.gateway.realtime")

SUBPROTOCOL = "voxrt.v1"
POLL_INTERVAL_S = 1.0
PARSED_KEY = "voxrt.actions"  # a received message already parsed by `_receive_now`: its actions


async def realtime_endpoint(ws: WebSocket) -> None:
    state = ws.app.state.voxrt
    subprotocol = SUBPROTOCOL if SUBPROTOCOL in ws.scope.get("subprotocols", []) else None
    start_ns = time.monotonic_ns()
    if not origin_allowed(ws.headers.get("origin"), ws.headers.get("host"), state.config.allowed_origins):
        state.metrics.errors.labels("origin_not_allowed").inc()
        log.info("refused a WebSocket from origin %r (not same-origin, not in --allow-origin)",
                 ws.headers.get("origin"))
        await ws.close(1008)  # before accept: the handshake is answered with HTTP 403
        _access(ws, None, start_ns, 1008)
        return
    if not state.auth.check(ws.headers.get("authorization"), ws.query_params.get("token")):
        await _refuse(ws, state, subprotocol, CLOSE_AUTH, "unauthorized", "missing or invalid API key or token")
        _access(ws, None, start_ns, CLOSE_AUTH)
        return
    # sockets beyond what the slots and the queue can ever serve are refused at once; draining (SIGTERM,
    # gateway/drain.py) refuses new sessions like a full server, so clients retry elsewhere
    if not state.can_open_session():
        await _refuse(ws, state, subprotocol, CLOSE_CAPACITY, SERVER_BUSY, "server at capacity, retry later"
                      if state.engine_is_ready else "the engine is restarting, retry later",
                      retry_after_ms=state.admission.retry_after_ms)
        _access(ws, None, start_ns, CLOSE_CAPACITY)
        return
    await ws.accept(subprotocol=subprotocol)
    state.num_sessions += 1
    state.metrics.sessions.inc()
    session = RealtimeSession(ws, state)
    state.sessions.add(session)
    try:
        await session.run()
    finally:
        state.sessions.discard(session)
        state.num_sessions -= 1
        state.metrics.sessions.dec()
        _access(ws, session, start_ns, session.close_code)


def _access(ws: WebSocket, session: "RealtimeSession | None", start_ns: int, close_code: int | None) -> None:
    """The session's access line (voxrt/logs.py): id, duration, contexts, frames sent, close code."""
    client = ws.scope.get("client")
    duration_ms = round((time.monotonic_ns() - start_ns) / 1e6, 1)
    access(f"ws {ws.scope.get('path', '')} closed", in_message=("kind",), kind="ws",
           id=session.session.session_id if session else None, duration_ms=duration_ms,
           contexts=session.num_contexts if session else 0, frames=session.num_frames if session else 0,
           close_code=close_code, client=f"{client[0]}:{client[1]}" if client else None)


def origin_allowed(origin: str | None, host: str | None, allowed: tuple[str, ...]) -> bool:
    """Same-origin by default: a browser's `Origin` must name the host it connects to, or be listed in
    `allowed` ("*" allows any). Clients that send no Origin (not browsers) are not limited by it."""
    if origin is None:
        return True
    origin = origin.strip().rstrip("/").lower()
    if "*" in allowed or origin in (a.strip().rstrip("/").lower() for a in allowed):
        return True
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return bool(netloc) and host is not None and netloc == host.strip().lower()


async def _refuse(ws: WebSocket, state, subprotocol, close_code: int, code: str, message: str, **extra) -> None:
    await ws.accept(subprotocol=subprotocol)
    state.metrics.errors.labels(code).inc()
    try:
        await ws.send_text(encode_error(code, message, True, **extra))
        await ws.close(close_code, close_reason(message))
    except Exception:  # noqa: BLE001 (the client left already)
        pass


class RealtimeSession:
    def __init__(self, ws: WebSocket, state, limits: Limits | None = None) -> None:
        """`limits`: the session's, where not the server's (`state.config.limits`): a compatibility adapter's
        API times out idle connections on its own terms (compat/)."""
        self.ws = ws
        self.state = state
        engine = state.engine
        self.session = Session(f"s-{uuid.uuid4().hex[:12]}", limits or state.config.limits, engine.info.voices,
                               engine.info.default_voice, [engine.info.name], engine.info.name, now_ms(),
                               pinned_lengths=state.config.allow_pinned_lengths)
        self.runners: dict[str, ContextRunner] = {}
        self._send_lock = asyncio.Lock()
        # frames written at once where the server allows it (wire.py); a compat bridge's link has no scope
        raw_send = getattr(ws, "scope", {}).get(RAW_SEND_KEY)
        self._writer = FrameWriter(raw_send)
        self._protocol = _direct_protocol(raw_send)  # uvicorn's sansio protocol, where sends can be seen to wait
        self._exec_lock = asyncio.Lock()  # actions of one input are executed in order, one input at a time
        self.is_closed = False
        self.config = None
        self.has_slot = False  # an admission slot, from session.start to the end
        self.rate = TokenBucket(state.config.max_messages_per_s, 2 * state.config.max_messages_per_s)
        self._num_frames_sent = 0
        self._num_frames_at_poll = 0
        self.num_contexts = 0  # opened, for the access line
        self.num_frames = 0  # audio frames sent
        self.close_code: int | None = None  # ours when we closed, else the client's
        # the stall rule (module docstring): how long one send may wait for the connection; None for a peer
        # that takes events (a compat adapter's NativeLink: its Outbox keeps the same rule at its own socket)
        self.stall_timeout_s: float | None = None if hasattr(ws, "send_event") else \
            self.session.limits.inactivity_timeout_s
        self.is_stalled = False
        self._run_task: asyncio.Task | None = None
        self._is_receiving = False  # the receive loop waits in ws.receive() (where a stall may stop it)

    async def run(self) -> None:
        poller = asyncio.create_task(self._poll_forever())
        self._run_task = asyncio.current_task()
        close_code = None
        hooked = self._protocol is not None and hasattr(self._protocol, "on_text_now")  # server.py's protocol
        if hooked:
            self._protocol.on_text_now = self._receive_now
        try:
            while not self.is_closed:
                self._is_receiving = True
                try:
                    message = await self.ws.receive()
                except (WebSocketDisconnect, RuntimeError):
                    break
                except asyncio.CancelledError:
                    if not self.is_stalled:
                        raise
                    self._run_task.uncancel()  # the stall's stop (_on_stalled), not the server's cancel
                    break
                finally:
                    self._is_receiving = False
                if message["type"] == "websocket.disconnect":
                    close_code = message.get("code")
                    if self.close_code is None:
                        self.close_code = close_code
                    break
                actions = message.get(PARSED_KEY)
                if actions is not None:  # read and parsed by _receive_now (its token taken): its actions only
                    await self._execute(actions)
                    continue
                delay_s = self.rate.delay_s()
                if delay_s > 0:  # over the rate: read no further until a token is due (TCP pushes back)
                    await asyncio.sleep(delay_s)
                now = now_ms()
                if message.get("text") is not None:
                    actions = self.session.receive_text(message["text"], now)
                else:
                    actions = self.session.receive_bytes(message.get("bytes") or b"", now)
                if len(actions) == 1 and type(actions[0]) is ReportPlayback:
                    # a playback report (~10 a second a session) only feeds its context's clock, and awaits
                    # nothing: done here, without a turn of the exec lock (the client's inputs stay in order:
                    # this loop reads the next one only after)
                    runner = self.runners.get(actions[0].context_id)
                    if runner is not None:
                        runner.report_playback(actions[0].played_ms)
                    continue
                await self._execute(actions)
        finally:
            if hooked:
                self._protocol.on_text_now = None
            was_closed = self.is_closed
            self.is_closed = True
            poller.cancel()
            num_open = len(self.runners)
            if self.has_slot:  # the session's work is being cancelled: its slot may serve the next one
                self.has_slot = False
                self.state.admission.release()
            await self._stop_all()
            self.session.close()
            if not was_closed and close_code not in (1000, 1001):
                log.info("session %s: the client went away (close %s) with %d open contexts",
                         self.session.session_id, close_code if close_code is not None else "none", num_open)

    def _receive_now(self, text: str) -> bool:
        """uvicorn's protocol offers a text message the moment it is read, when nothing is queued ahead of it
        (server.py). A playback report (~10 a second a session) is handled here at once, as the receive loop
        would handle it, without the queue, the ASGI task's wake-up through Starlette's layers and its receive;
        only while that loop waits in `ws.receive()` (so the client's inputs stay in order) and a rate token is
        there (else it waits in the loop, as before). A message that parses to anything else goes to the
        queue with its actions, for the loop to execute in order. False: not taken (the queue's path)."""
        if not self._is_receiving or self.is_closed or '"playback"' not in text or not self.rate.try_take():
            return False
        now = now_ms()
        report = self.session.receive_report(text, now)  # the common shape, parsed directly (protocol/events.py)
        if report is not None:
            runner = self.runners.get(report[0])
            if runner is not None:
                runner.report_playback(report[1], now)
            return True
        actions = self.session.receive_text(text, now)
        if len(actions) == 1 and type(actions[0]) is ReportPlayback:
            runner = self.runners.get(actions[0].context_id)
            if runner is not None:
                runner.report_playback(actions[0].played_ms, now)
        elif actions:
            self._protocol.queue.put_nowait({"type": "websocket.receive", PARSED_KEY: actions})
        return True

    async def _poll_forever(self) -> None:
        last_audio_ms = now_ms()  # when a poll last saw frames go out (or the session began)
        while not self.is_closed:
            await asyncio.sleep(POLL_INTERVAL_S)
            now = now_ms()
            is_sending = self._num_frames_sent != self._num_frames_at_poll
            self._num_frames_at_poll = self._num_frames_sent
            if is_sending:
                last_audio_ms = now
            # audio still owed (the engine has text it has not voiced) counts as activity as of the last audio
            # sent, not as of now: a context whose engine waits for the rest of a word, or for text the client
            # never sends, no longer keeps a silent session open for ever (found by a compatibility audit: an
            # ElevenLabs socket with unflushed text stayed open past 80 s against a 60 s timeout)
            owed = not is_sending and any(runner.owes_audio for runner in self.runners.values())
            await self._execute(self.session.poll(now, is_sending_audio=is_sending,
                                                  audio_at_ms=last_audio_ms if owed else None))

    async def _execute(self, actions) -> None:
        async with self._exec_lock:
            for action in actions:
                await self._do(action)

    async def _do(self, action) -> None:
        if isinstance(action, SendText):
            await self.send_event(action.event, action.data)
        elif isinstance(action, CloseConnection):
            await self._close(action.code, action.reason)
        elif isinstance(action, StartSession):
            await self._admit()
            self.config = action.config
        elif isinstance(action, OpenContext):
            num_frames = action.num_frames if self.state.config.allow_pinned_lengths else None
            runner = ContextRunner(action.context_id, action.index, self.config, self.state.engine, self.send_event,
                                   self.send_bytes, self._on_context_done, self.state.metrics, num_frames=num_frames,
                                   encode_worker=self.state.encode_worker, opus_signal=self.state.config.opus_signal,
                                   opus_rate=self.state.config.opus_rate,
                                   trace=self.state.trace, send_now=self.send_bytes_now)
            self.runners[action.context_id] = runner
            self.num_contexts += 1
            self.state.metrics.contexts.inc()
            try:
                await runner.open(action.text)
            except EngineError as exc:  # e.g. the engine is restarting: this context fails, the session goes on
                await self.send_event(Error(exc.code, exc.message, False, action.context_id))
                if self.runners.pop(action.context_id, None) is not None:
                    self.state.metrics.contexts.dec()
                for follow in self.session.on_context_done(action.context_id, "error", 0.0, runner.context_metrics()):
                    await self._do(follow)  # inside _execute already: not through it (its lock is held)
        elif isinstance(action, (AppendText, FlushContext, EndContext)):
            runner = self.runners.get(action.context_id)
            if runner is None:  # it failed to open (reported already) or ended meanwhile
                return
            if isinstance(action, AppendText):
                await runner.append(action.text)
            elif isinstance(action, FlushContext):
                await runner.flush()
            else:
                await runner.end()
        elif isinstance(action, CancelContext):
            runner = self.runners.pop(action.context_id, None)
            played_ms, spoken, audio_ms, metrics = 0.0, "", 0.0, {"ttfa_ms": None}
            if runner is not None:
                played_ms, spoken = await runner.cancel(action.at_ms)
                audio_ms, metrics = runner.audio_ms, runner.context_metrics()
                self.state.metrics.contexts.dec()
            for follow in self.session.on_context_cancelled(action.context_id, played_ms, spoken, audio_ms, metrics):
                await self._do(follow)
        elif isinstance(action, ReportPlayback):
            runner = self.runners.get(action.context_id)
            if runner is not None:
                runner.report_playback(action.played_ms)
        elif isinstance(action, EndSession):  # finish every open context; the session closes after the last
            for runner in list(self.runners.values()):
                if not runner.is_ended:
                    await runner.end()
        else:
            log.error("unknown action %r", action)

    async def _admit(self) -> None:
        """An admission slot for this session, or `server_busy` and close 4029 (the session.started that
        follows is then not sent: the connection is closed)."""
        try:
            await self.state.admission.acquire()
        except Busy as busy:
            for action in self.session.fail(SERVER_BUSY, busy.message, retry_after_ms=busy.retry_after_ms):
                await self._do(action)
            return
        self.has_slot = True
        if self.is_closed:  # the client left while it queued
            self.has_slot = False
            self.state.admission.release()

    async def _on_context_done(self, context_id: str, reason: str, audio_ms: float, metrics: dict) -> None:
        if self.runners.pop(context_id, None) is not None:
            self.state.metrics.contexts.dec()
        await self._execute(self.session.on_context_done(context_id, reason, audio_ms, metrics))

    async def _stop_all(self) -> None:
        """Disconnect or close: every context is cancelled, so its engine pages and slot return at once."""
        runners, self.runners = list(self.runners.values()), {}
        # at once, not one after another: each cancel waits for the engine's acknowledgement
        await asyncio.gather(*(runner.cancel() for runner in runners))
        for _ in runners:
            self.state.metrics.contexts.dec()

    @property
    def has_running_contexts(self) -> bool:
        return bool(self.runners)

    async def shut_down(self, message: str) -> None:
        """Server shutdown (gateway/drain.py): a fatal `server_shutting_down` error, then close 1001 (going
        away); the receive loop's end cancels what still runs, so its pages and slots return."""
        if self.is_closed:
            return
        await self.send_event(Error(SERVER_SHUTTING_DOWN, message, True))
        await self._close(CLOSE_GOING_AWAY, "server shutting down")

    async def _close(self, code: int, reason: str) -> None:
        if self.is_closed:
            return
        self.is_closed = True
        self.close_code = code
        try:
            if self.stall_timeout_s is None:
                await self.ws.close(code, close_reason(reason))
            else:
                await asyncio.wait_for(self.ws.close(code, close_reason(reason)), self.stall_timeout_s)
        except TimeoutError:  # the client reads nothing: the close goes after what the connection holds
            if not self.is_stalled:
                self.is_stalled = True
                log.info("session %s: the client read nothing for %g s; its close (%d) was written without waiting",
                         self.session.session_id, self.stall_timeout_s, code)
                close_stalled(self.ws, code, reason, None)
                self._stop_receiving()
        except Exception:  # noqa: BLE001 (already gone)
            pass

    def _on_stalled(self) -> None:
        """One send waited `stall_timeout_s`: the client is inactive (module docstring). Nothing more is sent,
        its fatal error and close 4008 are written after what the connection holds, and the receive loop is
        stopped so that the session's teardown (run's `finally`) runs now."""
        if self.is_stalled:
            return
        self.is_stalled = True
        was_closed, self.is_closed = self.is_closed, True
        if not was_closed:
            self.close_code = CLOSE_STALLED
        message = f"the client read nothing for {self.stall_timeout_s:g} s while messages waited for it"
        actions = self.session.fail(INACTIVITY_TIMEOUT, message)  # [] when the session is closing already
        text = next((a.data for a in actions if isinstance(a, SendText)), None)
        close = next((a for a in actions if isinstance(a, CloseConnection)), None)
        if text is not None:
            self.state.metrics.errors.labels(INACTIVITY_TIMEOUT).inc()
        log.info("session %s: the client read nothing for %g s with %d open contexts; closing it (%d, %s)",
                 self.session.session_id, self.stall_timeout_s, len(self.runners), CLOSE_STALLED, INACTIVITY_TIMEOUT)
        close_stalled(self.ws, close.code if close is not None else CLOSE_STALLED,
                      close.reason if close is not None else INACTIVITY_TIMEOUT, text)
        self._stop_receiving()

    def _stop_receiving(self) -> None:
        """The receive loop stops now (its `finally` is the session's teardown), not when the dropped connection
        reports its end; when it is not waiting in receive it stops at its next check of `is_closed`."""
        if self._is_receiving and self._run_task is not None and self._run_task is not asyncio.current_task():
            self._run_task.cancel()

    async def _send(self, send) -> None:
        """One send under the stall rule: TimeoutError (the client is then stalled) if it waits longer than
        `stall_timeout_s`. Called with the send lock held. A send that cannot wait (uvicorn's transport is
        writable) is awaited as is, in the caller's task, so that `start_eagerly` (pacer.py) still finishes it
        in its first step; one that may wait runs under `wait_for`, whose timer cancels the send itself (not
        `asyncio.timeout`, which before Python 3.12 would cancel the task of an eager first step: the
        caller's, not the one that goes on with the send)."""
        if self.stall_timeout_s is None or (self._protocol is not None and self._protocol.writable.is_set()):
            await send
            return
        try:
            await asyncio.wait_for(send, self.stall_timeout_s)
        except TimeoutError:
            self._on_stalled()
            raise

    async def send_event(self, event: ServerEvent | None, data: str | None = None) -> None:
        """One server message: `data` (its encoding; `encode_event(event)` when None) on a WebSocket, the
        event itself to a peer that takes events (a compat adapter's `NativeLink`: nothing parsed again).
        Every `error` sent is counted here, once, by its code."""
        if isinstance(event, Error):
            self.state.metrics.errors.labels(event.code).inc()
        elif event is None and data is not None and data.startswith('{"type":"error"'):
            self.state.metrics.errors.labels(json.loads(data).get("code", "unknown")).inc()
        send_event = getattr(self.ws, "send_event", None) if event is not None else None
        if send_event is None and data is None:
            data = encode_event(event)
        async with self._send_lock:
            if self.is_closed:
                return
            try:
                if send_event is not None:
                    await send_event(event)
                else:
                    await self._send(self.ws.send_text(data))
            except Exception:  # noqa: BLE001 (the client is gone; the receive loop ends the session)
                pass

    async def send_text(self, data: str) -> None:
        """One JSON text frame as is (an encoded server message)."""
        await self.send_event(None, data)

    def send_bytes_now(self, frames: list[bytes]) -> bool:
        """Writes these binary frames now, in one write, if nothing would wait: no other send of this session
        holds the lock (so nothing overtakes a message already on its way) and the connection takes them
        (wire.py). False: nothing was sent, use `send_bytes`. ConnectionError when the session is closed."""
        if self.is_closed:
            raise ConnectionError("session closed")
        if self._send_lock.locked():
            return False
        try:
            if not self._writer.write_now(frames):
                return False
        except ConnectionError as exc:  # gone mid-send: the context ends quietly, the reader ends the session
            raise ConnectionError(f"the client went away: {exc}") from None
        self._num_frames_sent += len(frames)
        self.num_frames += len(frames)
        return True

    async def send_bytes(self, data: bytes) -> None:
        async with self._send_lock:
            if self.is_closed:
                raise ConnectionError("session closed")
            try:
                await self._send(self.ws.send_bytes(data))
            except TimeoutError:
                raise ConnectionError("the client read nothing: stalled") from None
            except Exception as exc:  # noqa: BLE001 (gone mid-send: the context ends quietly, the reader ends the session)
                raise ConnectionError(f"the client went away: {type(exc).__name__}") from None
            self._num_frames_sent += 1
            self.num_frames += 1
