"""One context (an agent turn) of a realtime session: text in, paced audio frames out.

Text goes to one engine request word by word, or in segments (text_in.py; original offsets kept); the
engine's chunks are resampled and cut into fixed frames and handed to the context's `AudioOut`
(audio_out.py), which encodes a few frames ahead of their sending (or hands each chunk to a worker thread,
`--encode-threads`, encode_worker.py) and sends it when the pacing rule lets it out, from the process's one timer (pacer.py).
No frame is held back: the engine marks its last chunk, whose final frame carries the LAST flag (a last
chunk without audio gets a frame of silence for it), so the listener never waits for the next chunk to get
the end of this one. Cancel is a hard stop: the pump task is cancelled and awaited and the audio out closed
before the engine request is cancelled and `cancelled` is sent, so no frame of the context can follow it.

Programs that read their whole text in the prompt (`ModelInfo.consumes_text_incrementally` False, Orpheus):
each segment the segmenter cuts (text_in.py) becomes an engine request of its own, submitted as soon as it is
cut, so that segment k + 1 generates while segment k plays; the pump plays the context's requests in order as
one frame sequence (`_Generations`), and only the context's last request's last chunk carries the LAST flag
(a context ended after its last segment's audio went out ends with a frame of silence carrying it).

Long turns (long-form): an engine request ends at the model's length cap (finish reason `max_frames`) even
when text is left. The context then goes on in a further engine request, with the engine text from the
start of the last word the first one consumed (a word may be said twice, none is lost): its audio continues
the same frame sequence and its spans are shifted into the context's engine text, so the client sees one
turn. Where the engine cannot say how far it got (no text spans), the context ends with a clear `error`
(`length_limit`) instead of a silent cut.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Awaitable, Callable

import numpy as np

from voxrt.audio import StreamEncoder
from voxrt.engine.client import EngineClient
from voxrt.engine.errors import EngineError
from voxrt.gateway.audio_out import AudioOut
from voxrt.gateway.context_core import (CAPPED_REASONS, MAX_GENERATIONS, PLAYBACK_TOLERANCE_MS,  # noqa: F401
                                        ChunkPlan, ContextCore)
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.text_in import make_text_in
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import SessionConfig
from voxrt.protocol.server_events import Error, ServerEvent
from voxrt.text import Segmenter

log = logging.getLogger("voxrt.gateway.context")

SendEvent = Callable[[ServerEvent], Awaitable[None]]  # RealtimeSession.send_event
SendBytes = Callable[[bytes], Awaitable[None]]
# (context_id, reason, audio_ms, metrics) -> None: the pump ended by itself (completed or error)
OnDone = Callable[[str, str, float, dict], Awaitable[None]]


def now_ms() -> float:
    return time.monotonic_ns() / 1e6


class _Generations:
    """The context's engine requests, in order, for the pump: (request id, offset, end) of each, where its text
    sits in the context's engine text (end None: up to the end). Closed once no more can come."""

    def __init__(self) -> None:
        self._items: deque[tuple[str, int, int | None]] = deque()
        self._ready = asyncio.Event()
        self.is_closed = False

    def put(self, request_id: str, offset: int, end: int | None) -> None:
        self._items.append((request_id, offset, end))
        self._ready.set()

    def close(self) -> None:
        self.is_closed = True
        self._ready.set()

    async def next(self) -> tuple[str, int, int | None] | None:
        """The next request, waiting for it; None when the context has no more."""
        while not self._items and not self.is_closed:
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft() if self._items else None

    @property
    def more_may_follow(self) -> bool:
        return bool(self._items) or not self.is_closed

    @property
    def queued_ids(self) -> list[str]:
        return [item[0] for item in self._items]

    def drain(self) -> list[str]:
        """The ids of requests not yet played (cancel)."""
        ids = [item[0] for item in self._items]
        self._items.clear()
        self.close()
        return ids


class _EndOfContext:
    """The chunk fields `_on_chunk` reads, for the frame of silence that carries LAST when a context ends after
    its last request's audio went out (a segment program's context ended late)."""

    chunk_index, first_frame, num_frames, done_ns, received_ns = -1, 0, 0, None, None


class ContextRunner:
    def __init__(self, context_id: str, index: int, config: SessionConfig, engine: EngineClient,
                 send_event: SendEvent, send_bytes: SendBytes, on_done: OnDone, metrics: GatewayMetrics,
                 num_frames: int | None = None, *, encode_worker=None, opus_signal: str = "auto",
                 opus_rate: str = "auto", trace=None, send_now=None) -> None:
        self.context_id = context_id
        self.num_frames = num_frames  # pinned output length (benchmark extension), None: the model decides
        self.index = index
        self.config = config
        self.engine = engine
        self._send_event, self._send_bytes, self._on_done = send_event, send_bytes, on_done
        self.metrics = metrics
        out = config.output
        self.encoder = StreamEncoder(out.codec, engine.info.sample_rate, out.sample_rate, out.frame_ms,
                                     opus_signal=opus_signal, opus_rate=opus_rate)
        self._trace = trace  # a TraceWriter or None (encode_worker: an EncodeWorker or None, for AudioOut)
        self.segmenter = Segmenter(config.segmentation)
        self.clock = PlaybackClock()
        # word forwarding or segments; the audio side reads `segmenter.text` and `alignment`
        self.text_in = make_text_in(self.segmenter, engine.info.consumes_text_incrementally)
        self.alignment = self.text_in.alignment
        # the decisions (frames' places, flush points, alignment, long-form, playback forwarding), sans I/O
        self.core = ContextCore(context_id, self.text_in, self.clock, engine.info.sample_rate)
        self.request_id: str | None = None  # the request being played
        # a request per segment (programs that read the prompt at once), else one request for the context
        self.request_per_segment = not engine.info.consumes_text_incrementally
        self._generations = _Generations()
        self._params: dict | None = None  # what the context sets (a pinned length); the model's defaults the rest
        self.opened_ms = now_ms()
        self.audio_out = AudioOut(index, config, self.encoder, self.clock, metrics, send_bytes, self.opened_ms,
                                  encode_worker=encode_worker, send_now=send_now)
        self._pump: asyncio.Task | None = None
        self._chunk_trace: list[list] = []  # per chunk: index, first frame, frames, then the path's timestamps
        self.is_cancelled = False
        self.is_finished = False

    # ---- text in -------------------------------------------------------------------------------------------

    async def open(self, text: str = "") -> None:
        """Starts the context with its opening message's `text`. A program that consumes text incrementally gets
        one request for the context, submitted with what the text path releases of that text (text_in.py: the
        cleaned text once a word in it is complete) so the engine can start on it at once; a program that reads the prompt at once gets a request per segment,
        as `append` cuts them."""
        # the engine (with --dp-size N, the replica with the most headroom: engine/replicas.py) that every request
        # of this context goes to, so its continuations, playback reports and cancel reach the one that holds it
        self.engine = self.engine.for_context()
        self._params = {"num_frames": self.num_frames} if self.num_frames is not None else None
        if not self.request_per_segment:
            engine_text = self.core.push(text) if text else ""
            self.request_id = await self.engine.submit(voice=self.config.voice, params=self._params,
                                                       text=engine_text, final=False)
            self.core.on_request_opened()
            self._generations.put(self.request_id, 0, None)
            self._generations.close()
        self._pump = asyncio.create_task(self._run_pump(), name=f"voxrt-context-{self.context_id}")
        if text and self.request_per_segment:
            await self.append(text)

    @property
    def is_ended(self) -> bool:
        """No more text (context.end or session.end)."""
        return self.core.is_ended

    @property
    def num_generations(self) -> int:
        return self.core.num_generations

    async def append(self, text: str) -> None:
        await self._feed(self.core.push(text))

    async def flush(self) -> None:
        await self._feed(self.core.flush_text())
        for event in self.core.add_flush_point():
            await self._send_event(event)

    async def end(self) -> None:
        if self.is_ended:
            return
        await self._feed(self.core.end(), final=True)

    async def _feed(self, engine_text: str, final: bool = False) -> None:
        if self.request_per_segment:
            await self._feed_segments(engine_text, final)
            return
        if not (engine_text or final) or self.request_id is None:
            return
        try:
            await self.engine.append_text(self.request_id, engine_text, final=final)
        except EngineError as exc:  # the request is gone (the engine died or failed it): the pump reports it
            log.debug("context %s: text not delivered: %s", self.context_id, exc.code)

    async def _feed_segments(self, engine_text: str, final: bool) -> None:
        """The segments just cut (`engine_text`, already recorded in the core) as one more request, final at
        once; `final`: the context has no more."""
        if engine_text and not self.is_cancelled:
            end = self.core.num_engine_chars_sent
            request_id = await self.engine.submit(voice=self.config.voice, params=self._params, text=engine_text,
                                                  final=True)
            self.core.on_request_opened()
            self._generations.put(request_id, end - len(engine_text), end)
            self._anchor_queued()
        if final:
            self._generations.close()

    def _anchor_queued(self) -> None:
        """The engine's deadlines for the segments' requests not yet playing: the listener reaches their audio
        no sooner than the context's audio it has still to hear (a playback anchor with `played_samples` < 0:
        sched/deadlines.py), so a later segment is scheduled as the stream's continuation, not as a new stream's
        first chunk. Set when a request is queued and again when the one playing has all its audio."""
        queued = self._generations.queued_ids
        if not queued:
            return
        now = now_ms()
        ahead = -round(self.core.lead_of_next_request_ms(now) * self.engine.info.sample_rate / 1000)
        for request_id in queued:
            try:
                self.engine.set_playback_nowait(request_id, ahead, round(now * 1e6), False)
            except EngineError as exc:  # the request is gone: its pump turn reports it
                log.debug("context %s: anchor not delivered: %s", self.context_id, exc.code)

    def report_playback(self, played_ms: float, now: float | None = None) -> None:
        """A client's playback report, read at `now` (monotonic ms; None: now)."""
        if now is None:
            now = now_ms()
        # The engine's deadline for a chunk is when the listener has played everything before it (the core
        # counts what the encoder still holds as played, and keeps reports that move no deadline back).
        forward = self.core.playback_to_forward(played_ms, now, self.encoder.held_ms, self.request_id)
        if forward is not None:
            played_ms, is_stalled = forward
            played_samples = int(played_ms * self.engine.info.sample_rate / 1000)
            # A plain call, not a task: a task per report whose EngineError (the engine died, the request
            # ended) nobody retrieved was logged, or failed in its finalizer, long after.
            try:
                self.engine.set_playback_nowait(self.request_id, played_samples, round(now * 1e6), is_stalled)
            except EngineError as exc:  # the request is gone: the pump reports it
                log.debug("context %s: playback not delivered: %s", self.context_id, exc.code)

    # ---- audio out -----------------------------------------------------------------------------------------

    async def _run_pump(self) -> None:
        reason = "completed"
        try:
            while True:
                generation = await self._generations.next()
                if generation is None:  # ended after the last request's audio: LAST on a frame of silence
                    await self._on_chunk(_EndOfContext(), np.zeros(0, np.float32),
                                         self.core.on_chunk(None, 0, True, None))
                    break
                self.request_id, offset, end = generation
                self.core.start_generation(offset, end)
                if await self._play_generation():
                    break
        except asyncio.CancelledError:
            raise
        except EngineError as exc:  # counted once, where the error message is sent (RealtimeSession.send_event)
            reason = "error"
            await self._safe_send(Error(exc.code, exc.message, False, self.context_id))
        except ConnectionError:  # the client went away mid-audio: the session's reader ends it and logs it once
            reason = "error"
        except Exception:  # noqa: BLE001 (a broken context must not take the session down)
            log.exception("context %s failed", self.context_id)
            reason = "error"
            await self._safe_send(Error("internal_error", "audio generation failed", False, self.context_id))
        if reason == "error":  # later segments' requests queued behind the failed one are not played: stop them
            await self._cancel_requests(self._generations.drain())
        if not self.is_cancelled:
            self.is_finished = True
            self._write_trace(reason)
            await self._on_done(self.context_id, reason, self.audio_ms, self.context_metrics())

    async def _play_generation(self) -> bool:
        """One request's chunks out (and its long-form continuations); True when its last chunk was the
        context's last."""
        while True:
            is_capped = is_context_last = False
            async for chunk in self.engine.stream(self.request_id):
                pcm = np.frombuffer(chunk.pcm, dtype="<f4")
                plan = self.core.on_chunk(chunk.text_span, len(pcm), chunk.is_last, chunk.finish_reason,
                                          more_follows=chunk.is_last and self._generations.more_may_follow)
                is_capped, is_context_last = plan.is_capped, plan.is_last
                await self._on_chunk(chunk, pcm, plan)
                if chunk.is_last:
                    self._anchor_queued()  # all of this request's audio is known now: the next one's lead
                    break
            if not is_capped:
                return is_context_last
            await self._continue()

    async def _continue(self) -> None:
        """Long-form: the turn goes on in a further engine request (see the module docstring)."""
        resume_at, text = self.core.next_request()  # or EngineError length_limit
        self.request_id = await self.engine.submit(voice=self.config.voice, params=self._params, text=text,
                                                   final=self.is_ended)
        self.core.on_request_opened()
        log.info("context %s: the length cap ended generation %d; continuing from character %d",
                 self.context_id, self.num_generations - 1, resume_at)

    async def _on_chunk(self, chunk, pcm: np.ndarray, plan: ChunkPlan) -> None:
        """One engine chunk out as frames, then the events that follow its audio. `plan.is_last`: the
        context's last (a chunk that ends a request cut at the length cap is not: the turn continues)."""
        handled_ns = time.monotonic_ns()
        is_last, start_ms = plan.is_last, plan.start_ms
        frames: list = self.encoder.split(pcm) if len(pcm) else []
        if is_last:
            frames += self.encoder.split_finish()
        need_ms = self.clock.play_time_ms(start_ms)  # when the listener needs this chunk, by our clock
        trace = [chunk.chunk_index, chunk.first_frame, chunk.num_frames, chunk.done_ns, chunk.received_ns,
                 handled_ns, None if need_ms is None else round(need_ms * 1e6), None, None]
        self._chunk_trace.append(trace)
        await self.audio_out.play(frames, is_last, (chunk.received_ns or handled_ns) / 1e6, trace)
        # nothing is held back (the LAST flag rides on the last chunk's final frame), so what follows a chunk
        # on the wire (its alignment, `flushed`) follows its audio
        for event in self.core.on_chunk_sent(plan):
            await self._send_event(event)

    # ---- ending --------------------------------------------------------------------------------------------

    async def cancel(self, at_ms: float | None = None) -> tuple[float, str]:
        """Hard stop; returns (played_ms, spoken_text) at `at_ms` (when the client's cancel arrived; None: now,
        as this is called): what the listener heard when it barged in, not after the stop's round trips to the
        engine below. Frees the engine request before returning."""
        at_ms = now_ms() if at_ms is None else at_ms
        self.is_cancelled = True
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            try:
                await self._pump
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 (the pump's end is not our error)
                pass
        await self.audio_out.aclose()
        await self._cancel_requests([self.request_id, *self._generations.drain()])  # the one playing, and those queued
        self._write_trace("cancelled")
        return self.core.cancelled(at_ms)

    async def _cancel_requests(self, request_ids: list[str | None]) -> None:
        for request_id in request_ids:
            if request_id is None:
                continue
            try:
                await self.engine.cancel(request_id)
            except (EngineError, asyncio.TimeoutError):
                log.warning("engine cancel of %s did not complete", request_id)

    @property
    def owes_audio(self) -> bool:
        """Audio of this context is still to come: its pump runs and the engine has text it has not voiced
        yet (the inactivity timeout must not close a session that is being spoken to)."""
        return (self._pump is not None and not self._pump.done() and not self.is_cancelled
                and self.core.owes_audio_text)

    @property
    def audio_ms(self) -> float:
        """Speech sent so far (silence padding of the last frame excluded)."""
        return self.encoder.num_samples_out * 1000 / self.config.output.sample_rate

    @property
    def first_frame_ms(self) -> float | None:
        return self.audio_out.first_frame_ms

    def context_metrics(self) -> dict:
        ttfa = None if self.first_frame_ms is None else round(self.first_frame_ms - self.opened_ms)
        return {"ttfa_ms": ttfa, "frames": self.audio_out.num_frames_sent, "stalls": self.clock.num_stalls,
                "stall_ms": round(self.clock.stall_ms)}

    def _write_trace(self, reason: str) -> None:
        """--trace-file: this context's chunks with their path timestamps (monotonic ns: engine done, received
        by this process, handled on its loop, when the listener needs it by our clock, first and last frame
        sent), for bench/product_path.py windows to set beside the client's arrival times."""
        if self._trace is not None and self._chunk_trace:
            self._trace.write({"context_id": self.context_id, "request_id": self.request_id, "reason": reason,
                               "opened_ns": round(self.opened_ms * 1e6), "frame_ms": self.config.output.frame_ms,
                               "fields": ["chunk", "first_frame", "frames", "engine_done_ns", "received_ns",
                                          "handled_ns", "need_ns", "first_sent_ns", "last_sent_ns"],
                               "chunks": self._chunk_trace})
            self._chunk_trace = []

    async def _safe_send(self, event: ServerEvent) -> None:
        try:
            await self._send_event(event)
        except Exception:  # noqa: BLE001 (the socket may be gone)
            pass
