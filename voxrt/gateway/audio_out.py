"""One context's frames on their way out: queued as the engine's chunks arrive, each encoded just before it
leaves, sent when the pacing rule lets it out, from the process's one timer (pacer.py).

Pacing `realtime`: a frame leaves once the listener's buffer, by the context's playback clock, is down to
lead_ms; `burst`: at once. `play(frames)` returns when the chunk's last frame is sent, so what follows the
chunk on the wire (its alignment, `flushed`) follows its audio. The last chunk's final frame carries the LAST
flag; a last chunk without audio gets a frame of silence to carry it.

Send jitter, every frame: its send time minus its due time, the pacing rule's earliest send (the listener's
buffer down to lead_ms) or its chunk's arrival in this process, whichever is later (the `send_lateness`
histogram; what the gateway benchmark's ceiling is judged on).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from typing import Awaitable, Callable

import numpy as np

from voxrt.audio import OpusEncoder, StreamEncoder, alaw_encode, mulaw_encode, pcm16_encode
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.pacer import Pacer, now_ms, start_eagerly
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import SessionConfig
from voxrt.protocol.frames import encode_audio_frame

SendBytes = Callable[[bytes], Awaitable[None]]


class AudioOut:
    def __init__(self, index: int, config: SessionConfig, encoder: StreamEncoder, clock: PlaybackClock,
                 metrics: GatewayMetrics, send_bytes: SendBytes, opened_ms: float, *, encode_pool=None,
                 pacer: Pacer | None = None) -> None:
        self.index, self.config, self.encoder, self.clock, self.metrics = index, config, encoder, clock, metrics
        self._send_bytes, self.opened_ms, self._encode_pool = send_bytes, opened_ms, encode_pool
        self._pacer = pacer or Pacer.for_running_loop()
        self._is_realtime = config.pacing.mode == "realtime"
        self._lead_ms = config.pacing.lead_ms
        self._frame_ms = config.output.frame_ms
        self._queue: deque[tuple[np.ndarray | bytes, bool, list]] = deque()  # frame, is_last, its chunk's trace
        self._ready_ms = 0.0  # when the chunk being sent reached this process
        self._waiter: asyncio.Future | None = None  # play()'s: resolved when the queue is sent
        self._in_flight: asyncio.Future | None = None  # a send that suspended (backpressure): paused until done
        self.num_frames_sent = 0
        self.first_frame_ms: float | None = None
        self.is_closed = False

    async def play(self, frames: list, is_last_chunk: bool, ready_ms: float, trace: list) -> None:
        """Queue one chunk's frames (from `StreamEncoder.split`, or bytes) and return once the last is sent."""
        if self.is_closed:
            raise ConnectionError("audio out closed")
        if is_last_chunk and not frames:
            frames = [self._silent_frame()]
        if self._encode_pool is not None and frames:  # libopus releases the GIL: encode beside the loop
            encode = self.encoder.encode
            frames = await asyncio.get_running_loop().run_in_executor(
                self._encode_pool, lambda: [f if isinstance(f, bytes) else encode(f) for f in frames])
        if not frames:
            return
        self._ready_ms = ready_ms
        last = len(frames) - 1
        self._queue.extend((frame, is_last_chunk and i == last, trace) for i, frame in enumerate(frames))
        self._waiter = asyncio.get_running_loop().create_future()
        if self._in_flight is None:
            self._pacer.schedule(self, now_ms() + max(0.0, self._wait_ms(now_ms())))
        try:
            await self._waiter
        finally:
            self._waiter = None

    def on_due(self, now: float) -> float | None:
        """The pacer's call: send every frame the pacing rule lets out now; the next one's due time."""
        tick_ms = self._pacer.tick_ms
        queue = self._queue
        while queue and self._in_flight is None and not self.is_closed:
            wait_ms = self._wait_ms(now)
            if wait_ms > tick_ms:
                return now + wait_ms
            frame, is_last, trace = queue.popleft()
            try:
                payload = frame if isinstance(frame, bytes) else self.encoder.encode(frame)
                data = encode_audio_frame(self.index, self.num_frames_sent, self.num_frames_sent * self._frame_ms,
                                          payload, is_first=self.num_frames_sent == 0, is_last=is_last)
                pending = start_eagerly(self._send_bytes(data))
            except Exception as exc:  # noqa: BLE001 (the session closed, or a bad frame: play() raises it)
                self._fail(exc)
                return None
            if pending is not None:  # the connection cannot take it yet: wait for this send alone
                self._in_flight = pending
                pending.add_done_callback(functools.partial(self._on_send_done, trace))
                return None
            self._on_sent(trace)
            now = now_ms()
        if not queue:
            self._resolve()
        return None

    def _on_send_done(self, trace: list, task: asyncio.Future) -> None:
        self._in_flight = None
        if task.cancelled() or self.is_closed:
            return
        if task.exception() is not None:
            self._fail(task.exception())
            return
        self._on_sent(trace)
        if self._queue:
            self._pacer.schedule(self, now_ms())
        else:
            self._resolve()

    def _wait_ms(self, now: float) -> float:
        """How long until the pacing rule lets the next frame out (<= 0: now)."""
        return self.clock.buffered_ms(now) - self._lead_ms if self._is_realtime else 0.0

    def _on_sent(self, trace: list) -> None:
        sent_ns = time.monotonic_ns()
        now = sent_ns / 1e6
        # the frame's due time: the pacing rule's earliest send, or its chunk's arrival, whichever is later
        due = self._ready_ms
        if self._is_realtime and self.clock.is_started:
            due = max(due, self.clock.play_time_ms(self.clock.sent_ms) - self._lead_ms)
        metrics = self.metrics
        metrics.send_lateness.observe(now - due)
        metrics.num_frames_sent += 1
        if self.num_frames_sent == 0:
            self.first_frame_ms = now
            metrics.ttfa.observe((now - self.opened_ms) / 1000)
        self.num_frames_sent += 1
        self.clock.on_audio_sent(self._frame_ms, now)
        metrics.frames_sent.inc()
        trace[7] = trace[7] or sent_ns
        trace[8] = sent_ns

    def _resolve(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._queue.clear()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    async def aclose(self) -> None:
        """No frame leaves after this returns: the queue is dropped and a send in flight is cancelled."""
        self.is_closed = True
        self._queue.clear()
        self._pacer.remove(self)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None and not in_flight.done():
            in_flight.cancel()
            try:
                await in_flight
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 (its end is not ours to report)
                pass

    def _silent_frame(self) -> bytes:
        """A frame of silence that carries the LAST flag when no audio frame is left to carry it."""
        out = self.config.output
        zeros = np.zeros(out.samples_per_frame, dtype=np.float32)
        if out.codec == "opus":
            return OpusEncoder(out.sample_rate, out.frame_ms).encode(zeros)
        return {"pcm16": pcm16_encode, "mulaw": mulaw_encode, "alaw": alaw_encode}[out.codec](zeros)
