"""Twilio Media Streams bridge: a phone call's audio out of the native session, the agent's text in.

Two WebSockets meet per call:
- `/v1/twilio/media`: what TwiML `<Connect><Stream url="wss://HOST/v1/twilio/media">` reaches. Twilio sends
  `connected`, `start` (streamSid, callSid, customParameters), `media` (the caller's audio), `mark` (echoed
  when the audio before it has played), `dtmf`, `stop`. The bridge sends `media` (20 ms of 8 kHz mu-law,
  base64, paced in real time by the native pacing rule), a `mark` every `MARK_EVERY_FRAMES` frames and on
  each context's last frame, and `clear` on barge-in. Auth: Twilio sets no headers and its Stream URL takes
  no query, so the key or a minted token goes in `<Parameter name="token" value="..."/>` (customParameters).
- `/v1/twilio/calls/{call_id}`: the control API, the native voxrt.v1 protocol (docs/protocol.md) on which
  the agent sends `session.start`, `text`, `flush`, `context.end`, `cancel`, ... and gets every native event
  back (`context.started`, `alignment`, `cancelled`, `context.done`, ...) but no audio frames: the audio goes
  to the call. `call_id` is the `call_id` custom parameter, else Twilio's callSid. The output format is the
  call's (mulaw 8000 Hz, 20 ms; pacing realtime), whatever session.start asks. Extra events on it:
  `call.started`, `call.dtmf` {digit}, `call.stopped`. The Python client and the Pipecat adapter drive it as
  they drive /v1/realtime.

Marks are the listener's playback clock: each echoed mark becomes a native `playback` report
(`played_ms` = the end of the frame the mark followed), so the engine's deadlines follow the phone's real
playout rather than the send clock. A `cancel` from the agent sends `clear` at once and drops the context's
frames at this edge while the native cancel completes; nothing at all is sent to Twilio after `stop`.

Both sockets are bounded as every adapter's are (bridge.py): a media stream or control connection that reads
nothing for the session's inactivity timeout while messages wait for it is closed with 4008 (the control
connection after an `inactivity_timeout` error); a stalled media stream ends the call as `stop` does (the
agent gets `call.stopped`, then close 1000), a stalled control connection ends its session (the call gets
`clear`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from dataclasses import dataclass, field

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxrt.gateway.compat.bridge import NativeLink, Outbox, check_auth, run_adapter, session_slot, unknown_event
from voxrt.protocol.errors import INACTIVITY_TIMEOUT, close_reason
from voxrt.protocol.frames import AudioFrameHeader
from voxrt.protocol.server_events import (Alignment, Cancelled, ContextDone, ContextStarted, Error, Flushed, Pong,
                                          ServerEvent, SessionStarted)

log = logging.getLogger("voxrt.gateway.compat.twilio")

MARK_EVERY_FRAMES = 5  # a mark per 100 ms of audio: playback reports at the rate a client would send them
START_TIMEOUT_S = 10.0  # Twilio sends `connected` and `start` at once
CALL_WAIT_S = 30.0  # how long a control connection waits for its call's media stream
CALL_OUTPUT = {"codec": "mulaw", "sample_rate": 8000, "frame_ms": 20}
CLOSE_NO_CALL, CLOSE_CALL_TAKEN = 4404, 4409


@dataclass
class Call:
    call_id: str
    stream_sid: str
    call_sid: str
    custom_parameters: dict
    outbox: Outbox
    is_stopped: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    bridge: "CallBridge | None" = None  # the control connection driving it now
    num_media_in: int = 0
    num_media_out: int = 0
    num_marks_in: int = 0

    def send(self, message: dict) -> None:
        if not self.is_stopped:
            self.outbox.json({**message, "streamSid": self.stream_sid})


class CallRegistry:
    """Calls by call_id, and the control connections waiting for theirs."""

    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}
        self._arrived: dict[str, asyncio.Event] = {}

    def add(self, call: Call) -> None:
        self.calls[call.call_id] = call
        self._arrived.setdefault(call.call_id, asyncio.Event()).set()

    def remove(self, call: Call) -> None:
        if self.calls.get(call.call_id) is call:
            del self.calls[call.call_id]
            self._arrived.pop(call.call_id, None)

    async def wait(self, call_id: str, timeout_s: float) -> Call | None:
        if call_id not in self.calls:
            event = self._arrived.setdefault(call_id, asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), timeout_s)
            except asyncio.TimeoutError:
                if not event.is_set():
                    self._arrived.pop(call_id, None)
                return None
        return self.calls.get(call_id)


def registry(app) -> CallRegistry:
    calls = getattr(app.state, "twilio_calls", None)
    if calls is None:
        calls = app.state.twilio_calls = CallRegistry()
    return calls


# ---- the media stream (Twilio's side) ----------------------------------------------------------------------


async def media_endpoint(ws: WebSocket) -> None:
    state = ws.app.state.voxrt
    await ws.accept()
    start = await _read_start(ws)
    if start is None:
        await _close(ws, 1008, "expected Twilio's connected and start messages")
        return
    params = start.get("customParameters")
    params = params if isinstance(params, dict) else {}
    if not check_auth(state, ws, params.get("token"), params.get("key")):
        state.metrics.errors.labels("unauthorized").inc()
        await _close(ws, 1008, "missing or invalid token (customParameters.token)")
        return
    call_id = str(params.get("call_id") or start.get("callSid") or start.get("streamSid"))
    calls = registry(ws.app)
    if call_id in calls.calls:  # before any task is made for it (its outbox's writer would be left pending)
        await _close(ws, 1008, f"call {call_id} already has a media stream")
        return
    # Twilio takes no error messages: a stalled media stream just gets its close (4008, bridge.py)
    outbox = Outbox(ws, stall_timeout_s=state.config.limits.inactivity_timeout_s)
    call = Call(call_id, str(start.get("streamSid")), str(start.get("callSid")), params, outbox)
    calls.add(call)
    reader = asyncio.create_task(_read_call(ws, call), name="voxrt-twilio-media")
    gone = asyncio.create_task(call.outbox.gone.wait(), name="voxrt-twilio-gone")
    try:  # until Twilio's stop or disconnect, or the stream stalled (then the call ends as at stop)
        await asyncio.wait({reader, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reader, gone):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        call.is_stopped = True
        call.stopped.set()
        calls.remove(call)
        await call.outbox.stop()  # nothing more to Twilio after stop (or its disconnect)
        if call.outbox.is_stalled:
            state.metrics.errors.labels(INACTIVITY_TIMEOUT).inc()
        else:  # a stalled stream's close is written already (its transport would make this wait)
            await _close(ws, 1000, "call stopped")


async def _read_start(ws: WebSocket) -> dict | None:
    async def until_start() -> dict:
        while True:
            message = json.loads(await ws.receive_text())
            if isinstance(message, dict) and message.get("event") == "start":
                start = message.get("start")
                if not isinstance(start, dict):
                    raise ValueError("start is not an object")  # not Twilio's: the stream is refused (1008)
                start.setdefault("streamSid", message.get("streamSid"))
                return start

    try:
        return await asyncio.wait_for(until_start(), START_TIMEOUT_S)
    except (asyncio.TimeoutError, WebSocketDisconnect, RuntimeError, ValueError, RecursionError, KeyError):
        return None


def _field(message: dict, name: str, key: str):
    """message[name][key], or None where the message lacks it or has another shape there."""
    inner = message.get(name)
    return inner.get(key) if isinstance(inner, dict) else None


async def _read_call(ws: WebSocket, call: Call) -> None:
    """Twilio's messages during the call. What Twilio never sends (binary frames, text that is not a JSON object,
    a `mark` or `dtmf` of another shape) is ignored: it must not end the call."""
    while True:
        try:
            frame = await ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if frame.get("type") == "websocket.disconnect":
            return
        try:
            message = json.loads(frame["text"]) if frame.get("text") is not None else None
        except (ValueError, RecursionError):  # RecursionError: '[[[[...' nested past the parser
            continue  # not JSON
        if not isinstance(message, dict):
            continue
        event = message.get("event")
        if event == "media":
            call.num_media_in += 1  # the caller's audio: the agent's speech recognition has its own stream
        elif event == "mark":
            call.num_marks_in += 1
            name = _field(message, "mark", "name")
            if call.bridge is not None and isinstance(name, str):
                call.bridge.on_mark(name)
        elif event == "dtmf":
            digit = _field(message, "dtmf", "digit")
            if call.bridge is not None and isinstance(digit, str) and digit:
                call.bridge.notify({"type": "call.dtmf", "call_id": call.call_id, "digit": digit})
        elif event == "stop":
            call.is_stopped = True
            call.outbox.discard()  # not one more message to Twilio, queued ones included
            return


# ---- the control API (the agent's side) --------------------------------------------------------------------


class CallBridge:
    """One control connection driving one call: the native session's frames go to the call as media + marks,
    its events to the control socket; marks come back as playback reports."""

    def __init__(self, ws: WebSocket, call: Call) -> None:
        self.ws, self.call = ws, call
        self.control = Outbox(ws, stall_timeout_s=call.outbox.stall_timeout_s,
                              stall_message=lambda code, message: Error(code, message, True).to_wire())
        self.link = NativeLink(self._on_event, self._on_frame, self._on_close, (self.control, call.outbox))
        self.by_index: dict[int, str] = {}
        self.live: set[str] = set()  # contexts whose marks still matter: until done, and its last mark came back
        self.muted: set[str] = set()  # cancelled here: their frames are dropped, clear was sent
        # the mark after a context's last frame, until Twilio echoes it: the phone still plays the context's tail
        # (up to the pacing lead) after the native context is done, and a barge-in then must still `clear` it
        self.last_marks: dict[str, str] = {}
        self.done: set[str] = set()  # natively done, still live while its last mark is out

    def notify(self, event: dict) -> None:
        self.control.json(event)

    def on_mark(self, name: str) -> None:
        context_id, sep, played = name.rpartition("|")
        if sep and context_id in self.live and context_id not in self.muted and played.isdigit() \
                and context_id not in self.done:
            self.link.send({"type": "playback", "context_id": context_id, "played_ms": int(played)})
        if self.last_marks.get(context_id) == name:  # its tail has played
            del self.last_marks[context_id]
            if context_id in self.done:
                self._forget(context_id)

    def _forget(self, context_id: str) -> None:
        self.live.discard(context_id)
        self.muted.discard(context_id)
        self.done.discard(context_id)
        self.last_marks.pop(context_id, None)

    async def read(self) -> None:
        stopped = asyncio.create_task(self.call.stopped.wait())
        try:
            while True:
                await self.link.wait_room()  # backpressure: the agent's next message once the last ones are taken
                receive = asyncio.create_task(self.ws.receive())
                done, _ = await asyncio.wait({receive, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if stopped in done:
                    receive.cancel()
                    self.notify({"type": "call.stopped", "call_id": self.call.call_id})
                    self.control.close(1000, "call ended")
                    return
                message = receive.result()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") is not None:
                    self._from_agent(message["text"])
        except (WebSocketDisconnect, RuntimeError):
            return
        finally:
            stopped.cancel()

    def _from_agent(self, data: str) -> None:
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: '[[[[...' nested past the parser
            message = None
        if isinstance(message, dict):
            kind = message.get("type")
            if kind == "session.start":  # the call fixes the audio format; pacing is real time
                lead = (message.get("pacing") or {}).get("lead_ms") if isinstance(message.get("pacing"), dict) else None
                message = {**message, "output": CALL_OUTPUT,
                           "pacing": {"mode": "realtime", **({"lead_ms": lead} if lead is not None else {})}}
            elif kind == "playback":  # the phone's marks are the playback clock, not the agent's guess
                return
            elif kind == "cancel":  # barge-in: silence the call now, the native cancel follows
                target = message.get("context_id")
                targets = list(self.live) if target == "*" else [target] if isinstance(target, str) else []
                if any(t in self.live and t not in self.muted for t in targets):
                    self.muted.update(t for t in targets if t in self.live)
                    self.call.send({"event": "clear"})
            data = json.dumps(message)
        self.link.send_text_raw(data)  # as received, otherwise: the native session answers bad input

    async def _on_event(self, event: ServerEvent) -> None:
        """Every native event goes to the agent as it is (the control API is the native protocol); some act on
        the call first."""
        match event:
            case ContextStarted(context_id=context_id, index=index):
                self.by_index[index] = context_id
                self.live.add(context_id)
            case Cancelled(context_id=context_id):
                if context_id in self.live and context_id not in self.muted:
                    self.muted.add(context_id)
                    self.call.send({"event": "clear"})
            case ContextDone(context_id=context_id):
                if context_id in self.last_marks and context_id not in self.muted:
                    self.done.add(context_id)  # live until the phone has played its tail (on_mark)
                else:
                    self._forget(context_id)
            case SessionStarted() | Alignment() | Flushed() | Error() | Pong():
                pass  # nothing for the call to do
            case _:
                if not hasattr(event, "to_wire"):
                    unknown_event("twilio", event)
                    return
                unknown_event("twilio", event, "passed to the agent as it is")
        self.control.json(event.to_wire())

    async def _on_frame(self, header: AudioFrameHeader, payload: bytes) -> None:
        context_id = self.by_index.get(header.index)
        if context_id is None or context_id in self.muted or self.call.is_stopped:
            return
        self.call.send({"event": "media", "media": {"payload": base64.b64encode(payload).decode()}})
        self.call.num_media_out += 1
        if header.is_last or (header.seq + 1) % MARK_EVERY_FRAMES == 0:
            end_ms = header.pts_ms + CALL_OUTPUT["frame_ms"]
            name = f"{context_id}|{end_ms}"
            self.call.send({"event": "mark", "mark": {"name": name}})
            if header.is_last:
                self.last_marks[context_id] = name

    async def _on_close(self, code: int, reason: str) -> None:
        self.control.close(code, reason)


async def control_endpoint(ws: WebSocket) -> None:
    state = ws.app.state.voxrt
    subprotocol = "voxrt.v1" if "voxrt.v1" in ws.scope.get("subprotocols", []) else None
    await ws.accept(subprotocol=subprotocol)
    if not check_auth(state, ws):
        state.metrics.errors.labels("unauthorized").inc()
        await _refuse(ws, 4001, "unauthorized", "missing or invalid API key or token")
        return
    call_id = ws.path_params["call_id"]
    call = await registry(ws.app).wait(call_id, CALL_WAIT_S)
    if call is None or call.is_stopped:
        await _refuse(ws, CLOSE_NO_CALL, "unknown_call", f"no media stream for call {call_id[:64]!r} arrived")
        return
    if call.bridge is not None:
        await _refuse(ws, CLOSE_CALL_TAKEN, "call_taken", f"call {call_id[:64]!r} already has a control connection")
        return
    async with session_slot(state) as admitted:
        if not admitted:
            await _refuse(ws, 4029, "server_busy", "server at capacity, retry later", retry_after_ms=1000)
            return
        bridge = CallBridge(ws, call)
        call.bridge = bridge
        bridge.notify({"type": "call.started", "call_id": call.call_id, "stream_sid": call.stream_sid,
                       "call_sid": call.call_sid, "custom_parameters": {k: v for k, v in call.custom_parameters.items()
                                                                        if k not in ("token", "key")}})
        try:
            await run_adapter(ws, state, bridge.link, bridge.read, bridge.control)
        finally:
            call.bridge = None
            if bridge.live - bridge.muted:  # the agent left mid-speech: the call goes quiet at once
                call.send({"event": "clear"})


async def _refuse(ws: WebSocket, close_code: int, code: str, message: str, **extra) -> None:
    try:
        await ws.send_text(json.dumps({"type": "error", "code": code, "message": message, "fatal": True, **extra}))
        await ws.close(close_code, close_reason(message))
    except Exception:  # noqa: BLE001 (already gone)
        pass


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    try:
        await ws.close(code, close_reason(reason))
    except Exception:  # noqa: BLE001
        pass
