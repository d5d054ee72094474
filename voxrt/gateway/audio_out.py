"""One context's frames on their way out: queued as the engine's chunks arrive, encoded a few at a time ahead
of their sending, sent when the pacing rule lets it out, from the process's one timer (pacer.py).

Pacing `realtime`: a frame leaves once the listener's buffer, by the context's playback clock, is down to
the rule's send lead (lead_ms, less a frame when writes go in pairs: below); `burst`: at once. `play(frames)` returns when the chunk's last frame is sent, so what follows the
chunk on the wire (its alignment, `flushed`) follows its audio. The last chunk's final frame carries the LAST
flag; a last chunk without audio gets a frame of silence to carry it.

Send jitter, every frame: its send time minus its due time, the pacing rule's earliest send (the listener's
buffer down to the send lead) or its chunk's arrival in this process, whichever is later (the `send_lateness`
histogram; what the gateway benchmark's ceiling is judged on). The same split in two: frames whose due time
the pacing rule set (`send_lateness_paced`: steady frames, each released when the listener's buffer falls to
the send lead) and frames whose due time their chunk's arrival set (`send_lateness_ready`: a context's lead fill,
up to lead_ms of audio released at once, whose last frame the listener needs up to lead_ms later; and the
frames of a chunk that came late).

Frames the pacing rule lets out together (a lead fill: up to lead_ms of audio when a context's first chunk
arrives; at most `MAX_FRAMES_PER_WRITE`) are encoded, then written in one transport write (`send_now`, the
session's `FrameWriter`, wire.py), each still its own WebSocket message; a context's first frame goes alone
so its time to first audio does not wait for the others' encoding. The playback clock counts a frame as sent
when it is queued for that write.

Steady frames go two to a write (`EARLY_FRAMES`): a realtime write takes along the next frame when that one
is encoded already and due within one frame of now, so a steady stream is served every other frame. The
protocol's bound holds (the server sends at most lead_ms ahead of the client's playback): the pacing rule
lets a write out once the listener's buffer is down to lead_ms less one frame (`PacingRule.send_lead_ms`), so
its first frame leaves at lead_ms - one frame and the one taken along at lead_ms, and the buffer just after a
write is lead_ms + one frame at most, as it was when every frame went alone at lead_ms. With lead_ms under two
frames no frame goes early. A frame never leaves more than one frame before its due time, and never ahead of
its chunk. Each write is one
`send()` system call and one turn of the pacer for the stream (~9 us and ~10 us a write at 140 sessions,
bench/results/2026-12-05-gateway-11/); bench/results/2026-12-05-gateway-12/ measured the change. The early
frame's due time, for send jitter, is when the rule let it out: its own due time less one frame (so it is as
late as the frame it went with), or its chunk's arrival, whichever is later. Where a write cannot happen at once (a paused transport, another send of
the session holding its lock, a server other than uvicorn's sansio protocol) the frames go one by one
through `send_bytes`, the ordinary awaitable path.

Encoding ahead: after a tick has sent every due frame, each stream it served encodes its next
`ENCODE_AHEAD_FRAMES` frames in one run of libopus calls (`prepare`, called by the pacer), and a chunk that
arrives while its stream is already playing is encoded that far at once, so a frame is ready when it is due
and the pacer only frames and writes it. The same libopus call costs ~125 us a frame in such a run and up to
~200 us when each stream's encoder state has gone cold in the caches between its frames, as when every frame
was encoded just before it left (bench/results/2026-12-02-gateway-5/). Not a whole chunk at once on the loop: a
25-frame chunk is 100 Opus frames, ~13 ms of libopus that would hold up every other stream's frames; a run of
8 is ~1 ms. With an `EncodeWorker` (`--encode-threads`, encode_worker.py) a chunk's frames are handed to a
worker thread as soon as the chunk is queued, and the loop encodes only a frame that is due before the worker
got to it. Either way a stream's frames pass from `_raw` (PCM frames) to `_ready` (Opus packets) in order,
one at a time under the stream's `_encode_lock`, whoever encodes them. A context's first frame is encoded and
sent alone the moment it is due (time to first audio). Encoded frames are only bytes (~150 of them a frame,
against 3.8 kB of float32 samples), and only the queued chunks': memory per context is bounded as before.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import threading
import time
from collections import deque
from typing import Awaitable, Callable

import numpy as np

from voxrt.audio import OpusEncoder, StreamEncoder, alaw_encode, mulaw_encode, pcm16_encode
from voxrt.gateway.context_core import PacingRule
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.pacer import Pacer, now_ms, start_eagerly
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import SessionConfig
from voxrt.protocol.frames import FLAG_FIRST, FLAG_LAST, KIND_AUDIO, encode_audio_frame

SendBytes = Callable[[bytes], Awaitable[None]]
SendNow = Callable[[list], bool]  # writes these frames now, or returns False (nothing written)

MAX_FRAMES_PER_WRITE = 8  # a burst-mode chunk of 100 frames is written in writes of 8, not held to its end
EARLY_FRAMES = 1  # frames a realtime write may take along before their due time (PacingRule lowers its lead by as many)
ENCODE_AHEAD_FRAMES = 8  # frames encoded in one run ahead of their sending (~1 ms of libopus)
_AUDIO_HEADER = struct.Struct(">BBHII")  # protocol/frames.py: kind, flags, index, seq, pts_ms
_monotonic_ns = time.monotonic_ns


class AudioOut:
    def __init__(self, index: int, config: SessionConfig, encoder: StreamEncoder, clock: PlaybackClock,
                 metrics: GatewayMetrics, send_bytes: SendBytes, opened_ms: float, *, encode_worker=None,
                 pacer: Pacer | None = None, send_now: SendNow | None = None) -> None:
        self.index, self.config, self.encoder, self.clock, self.metrics = index, config, encoder, clock, metrics
        self._send_bytes, self.opened_ms, self._encode_worker = send_bytes, opened_ms, encode_worker
        self._send_now = send_now
        self._pacer = pacer or Pacer.for_running_loop()
        # the pacing decision (context_core.py, sans I/O); on_due applies its send lead inline
        self._rule = PacingRule(config.pacing, clock, config.output.frame_ms, EARLY_FRAMES)
        self._is_realtime, self._lead_ms = self._rule.is_realtime, self._rule.send_lead_ms
        self._num_early = self._rule.early_frames  # frames a write may take along early (the module docstring)
        self._late_paced, self._late_ready = metrics.lateness.paced.append, metrics.lateness.ready.append
        self._frame_ms = config.output.frame_ms
        # A frame's way out: `_raw` (as split: PCM, or bytes already), then `_ready` (its wire payload), each
        # (frame, is_last, its chunk's trace). Frames move from one to the other in order, under the encode lock
        # (the loop or a worker thread; see the module docstring); only the loop takes from `_ready`.
        self._raw: deque[tuple[np.ndarray | bytes, bool, list]] = deque()
        self._ready: deque[tuple[bytes, bool, list]] = deque()
        self._encode_lock = threading.Lock()
        self._is_encode_queued = False  # submitted to the worker and not yet finished by it
        self._encode_error: BaseException | None = None  # a worker's, raised on the loop when its frame is due
        # encoded and counted on the clock: wire bytes, due time, whether the pacing rule set it, chunk trace
        self._unsent: deque[tuple[bytes, float, bool, list]] = deque()
        self._num_frames_encoded = 0  # the next frame's seq
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
        if not frames:
            return
        self._ready_ms = ready_ms
        last = len(frames) - 1
        self._raw.extend((frame, is_last_chunk and i == last, trace) for i, frame in enumerate(frames))
        self._waiter = asyncio.get_running_loop().create_future()
        lateness = self.metrics.lateness
        if lateness.num_pending >= lateness.FOLD_AT:  # nobody read them lately: folded here (bounded memory)
            lateness.fold()
        wait_ms = max(0.0, self._rule.wait_ms(now_ms()))
        if wait_ms > self._pacer.tick_ms:  # not due at once (a chunk that came ahead of its time): encode now
            if self._encode_worker is not None:
                self._submit()
            else:
                self._encode_ahead(ENCODE_AHEAD_FRAMES)
        # else the frames due now are encoded and sent on the loop first, the rest after them (`prepare`)
        if self._in_flight is None:
            self._pacer.schedule(self, now_ms() + wait_ms)
        try:
            await self._waiter
        finally:
            self._waiter = None

    @property
    def _has_frames(self) -> bool:
        return bool(self._raw or self._ready or self._unsent)

    def on_due(self, now: float) -> float | None:
        """The pacer's call: send every frame the pacing rule lets out now; the next one's due time.

        The per-frame path, kept to a few calls a frame (bench/results/2026-12-03-gateway-7/): the pacing rule
        (`PacingRule`, context_core.py) lets a frame out once the listener's buffer is down to its send lead,
        which is the instant `clock.play_time_ms(clock.sent_ms) - send_lead` (the audio sent so far finishes
        playing that much later); that one figure is both the frame's due time and when to come back, so it is computed
        once a frame. Each frame is then framed, counted on the clock and written; its lateness is one list
        append (metrics.py folds them when read)."""
        if self._in_flight is not None or self.is_closed:
            return None
        ready, raw, clock = self._ready, self._raw, self.clock
        try:
            if self._unsent and not self._write_unsent():
                return None  # a send waits for the connection: this stream is paused until it is done
            tick_ms, lead_ms, is_realtime = self._pacer.tick_ms, self._lead_ms, self._is_realtime
            pace = clock.play_time_ms(clock.sent_ms) if is_realtime else None  # None: burst, or no audio sent yet
            if pace is not None:
                pace -= lead_ms
            while ready or raw:
                if pace is not None and pace - now > tick_ms:
                    return pace
                pace = self._send_due(now, pace, tick_ms)
                if self._in_flight is not None or self.is_closed:
                    return None
                now = _monotonic_ns() / 1e6
        except Exception as exc:  # noqa: BLE001 (the session closed, or a bad frame: play() raises it)
            self._fail(exc)
            return None
        if not self._unsent:
            self._resolve()
        return None

    def _send_due(self, now: float, pace: float | None, tick_ms: float) -> float | None:
        """Frames the pacing rule lets out now (at least one; up to MAX_FRAMES_PER_WRITE; a context's first
        frame alone, for its time to first audio), each counted on the playback clock as it is framed, then
        written at once; with them, under realtime pacing, `EARLY_FRAMES` more that are encoded already and due
        within a frame of now (see the module docstring). Returns the pacing rule's time for the next frame (as
        `on_due` computes it)."""
        ready, raw, clock, frame_ms = self._ready, self._raw, self.clock, self._frame_ms
        ready_ms, index, lead_ms, is_realtime = self._ready_ms, self.index, self._lead_ms, self._is_realtime
        messages: list[bytes] = []
        marks: list[tuple[float, bool, list]] = []  # per frame: due time, whether the pacing rule set it, trace
        num_early = 0
        allowed = pace  # when the rule lets this frame out: its due time, or a frame before it for an early one
        while True:
            payload, is_last, trace = ready.popleft() if ready else self._next_ready()
            seq = self._num_frames_encoded
            flags = (FLAG_FIRST if seq == 0 else 0) | (FLAG_LAST if is_last else 0)
            try:  # protocol/frames.py's header, packed here (`encode_audio_frame` checks and says what is wrong)
                messages.append(_AUDIO_HEADER.pack(KIND_AUDIO, flags, index, seq, seq * frame_ms) + payload)
            except (struct.error, TypeError):
                messages.append(encode_audio_frame(index, seq, seq * frame_ms, payload, is_first=seq == 0,
                                                   is_last=is_last))
            # the frame's due time: the pacing rule's earliest send, or its chunk's arrival, whichever is later
            if allowed is not None and allowed > ready_ms:
                marks.append((allowed, True, trace))
            else:
                marks.append((ready_ms, False, trace))
            self._num_frames_encoded = seq + 1
            if is_realtime:  # counted on the clock; the next frame's due time
                allowed = pace = clock.on_audio_sent_until(frame_ms, _monotonic_ns() / 1e6) - lead_ms
            else:
                clock.on_audio_sent(frame_ms, _monotonic_ns() / 1e6)
                allowed = pace = None
            if seq == 0 or len(messages) >= MAX_FRAMES_PER_WRITE or not (ready or raw):
                break
            if pace is not None and pace - now > tick_ms:
                # not due yet: it goes along in this write only when it is encoded already and due within a
                # frame of now (the listener's buffer then at most lead_ms + one frame before it is added)
                if num_early >= self._num_early or not ready or pace - now > tick_ms + frame_ms:
                    break
                num_early += 1
                allowed = pace - frame_ms
        send_now = self._send_now
        if send_now is not None and send_now(messages):
            self.metrics.num_frame_writes += 1
            self._on_sent(marks, _monotonic_ns())
        else:  # one by one through the awaitable path
            self._unsent.extend((data, due, is_paced, trace) for data, (due, is_paced, trace) in zip(messages, marks))
            self._write_one_by_one()
        return pace

    def prepare(self) -> None:
        """The pacer's call once its tick has sent every due frame: the next frames encoded, in one run, when
        the encoded ones are used up, or handed to the worker (see the module docstring)."""
        if not self._raw or self.is_closed:
            return
        if self._encode_worker is not None:
            self._submit()
        elif not self._ready:
            try:
                self._encode_ahead(ENCODE_AHEAD_FRAMES)
            except Exception as exc:  # noqa: BLE001 (a bad frame: play() raises it)
                self._fail(exc)

    def _submit(self) -> None:
        """The raw frames to the worker, unless it has this stream queued already."""
        if not self._is_encode_queued:
            self._is_encode_queued = True
            self._encode_worker.submit(self)

    def encode_queued(self, max_frames: int | None = None) -> bool:
        """A worker thread's call (encode_worker.py): the raw frames encoded, in order, at most `max_frames`
        of them, the lock taken per frame so that the loop can step in between (`_next_ready`). True: raw
        frames are left and the stream stays queued (the worker puts it back in line). Keeps an encoding
        error for the loop."""
        lock, raw = self._encode_lock, self._raw
        num_encoded = 0
        while True:
            with lock:
                if self.is_closed or self._encode_error is not None:
                    self._is_encode_queued = False
                    return False
                if raw:
                    if max_frames is not None and num_encoded >= max_frames:
                        return True
                    try:
                        self._encode_one()
                    except Exception as exc:  # noqa: BLE001 (a bad frame: raised on the loop when it is due)
                        self._encode_error = exc
                    num_encoded += 1
                    continue
                self._is_encode_queued = False
            # play() may have queued frames after the check above yet seen the flag still set (and not
            # submitted): look again now that it is clear. Both may claim them; encoding under the lock, in
            # order, makes a second worker on the same stream harmless.
            if not raw or self._is_encode_queued or self.is_closed:
                return False
            self._is_encode_queued = True

    def encode_due_ms(self) -> float:
        """When the next raw frame is due (the worker's order, encode_worker.py): by the pacing rule, once the
        frames encoded before it have gone out (each `frame_ms`); now for burst pacing or before the first
        frame. Read on a worker thread too: a stale figure only reorders the worker's queue."""
        clock = self.clock
        if self._is_realtime and clock.is_started:
            return clock.play_time_ms(clock.sent_ms + len(self._ready) * self._frame_ms) - self._lead_ms
        return now_ms()

    def _encode_one(self) -> None:
        """The first raw frame encoded into `_ready`. Called with the encode lock held."""
        frame, is_last, trace = self._raw[0]
        payload = frame if isinstance(frame, bytes) else self.encoder.encode(frame)
        self._raw.popleft()
        self._ready.append((payload, is_last, trace))

    def _encode_ahead(self, num_frames: int) -> None:
        """Encodes raw frames until `num_frames` are ready (or no raw frame is left), in one run."""
        with self._encode_lock:
            ready, raw = self._ready, self._raw
            while len(ready) < num_frames and raw:
                self._encode_one()

    def _next_ready(self) -> tuple[bytes, bool, list]:
        """The next frame's payload: encoded already (by a worker, or ahead), else encoded now, on the loop; if a
        worker is encoding it right now, this waits for that one frame."""
        ready = self._ready
        if not ready:
            with self._encode_lock:
                if self._encode_error is not None:
                    raise self._encode_error
                if not ready:
                    self._encode_one()
        return ready.popleft()

    def _write_unsent(self) -> bool:
        """Writes `_unsent`: at once in one write when the session allows it, else frame by frame through
        `send_bytes`. False when a send had to wait (it goes on in a task; the rest stays unsent)."""
        unsent = self._unsent
        if self._send_now is not None and self._send_now([entry[0] for entry in unsent]):
            self.metrics.num_frame_writes += 1
            self._on_sent([entry[1:] for entry in unsent], time.monotonic_ns())  # one write: one send time
            unsent.clear()
            return True
        return self._write_one_by_one()

    def _write_one_by_one(self) -> bool:
        """`_unsent` through `send_bytes`, the awaitable path; False when a send had to wait (see above)."""
        unsent = self._unsent
        while unsent:
            data, due, is_paced, trace = unsent.popleft()
            pending = start_eagerly(self._send_bytes(data))
            if pending is not None:  # the connection cannot take it yet: wait for this send alone
                self._in_flight = pending
                pending.add_done_callback(functools.partial(self._on_send_done, trace, due, is_paced))
                return False
            self.metrics.num_frame_writes += 1
            self._on_sent([(due, is_paced, trace)], time.monotonic_ns())
        return True

    def _on_send_done(self, trace: list, due: float, is_paced: bool, task: asyncio.Future) -> None:
        self._in_flight = None
        if task.cancelled():
            return
        exc = task.exception()  # retrieved even when closed: else asyncio logs "exception was never retrieved"
        if self.is_closed:
            return
        if exc is not None:
            self._fail(exc)
            return
        self.metrics.num_frame_writes += 1
        self._on_sent([(due, is_paced, trace)], time.monotonic_ns())
        if self._has_frames:
            self._pacer.schedule(self, now_ms())
        else:
            self._resolve()

    def _on_sent(self, marks: list[tuple[float, bool, list]], sent_ns: int) -> None:
        """Frames written at `sent_ns`, each (due time, whether the pacing rule set it, its chunk's trace):
        their lateness (one list append each, metrics.py folds them into histograms when read), the counters,
        the chunks' first and last send times. `is_paced`: the pacing rule set the frame's due time (a
        steady frame), else its chunk's arrival did (a lead fill, or a chunk that came late)."""
        now = sent_ns / 1e6
        late_paced, late_ready = self._late_paced, self._late_ready
        for due, is_paced, trace in marks:
            (late_paced if is_paced else late_ready)(now - due)
            if trace[7] is None:
                trace[7] = sent_ns
            trace[8] = sent_ns
        num_frames = len(marks)
        self.metrics.num_frames_sent += num_frames
        if self.num_frames_sent == 0:
            self.first_frame_ms = now
            self.metrics.ttfa.observe((now - self.opened_ms) / 1000)
        self.num_frames_sent += num_frames

    def _resolve(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _drop_frames(self) -> None:
        with self._encode_lock:  # a worker encoding one of them finishes that one first
            self._raw.clear()
            self._ready.clear()
        self._unsent.clear()

    def _fail(self, exc: BaseException) -> None:
        self._drop_frames()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    async def aclose(self) -> None:
        """No frame leaves after this returns: the queue is dropped and a send in flight is cancelled."""
        self.is_closed = True
        self._drop_frames()
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
