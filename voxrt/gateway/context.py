"""One context (an agent turn) of a realtime session: text in, paced audio frames out.

Text goes to one engine request word by word, or in segments (text_in.py; original offsets kept); the
engine's chunks are resampled and cut into fixed frames and handed to the context's `AudioOut`
(audio_out.py), which encodes each frame just before it leaves (or the whole chunk in a worker thread,
`--encode-threads`) and sends it when the pacing rule lets it out, from the process's one timer (pacer.py).
No frame is held back: the engine marks its last chunk, whose final frame carries the LAST flag (a last
chunk without audio gets a frame of silence for it), so the listener never waits for the next chunk to get
the end of this one. Cancel is a hard stop: the pump task is cancelled and awaited and the audio out closed
before the engine request is cancelled and `cancelled` is sent, so no frame of the context can follow it.

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
from typing import Awaitable, Callable

import numpy as np

from voxrt.audio import StreamEncoder
from voxrt.engine.client import EngineClient
from voxrt.engine.errors import EngineError, error_from_code
from voxrt.engine.params import SamplingParams
from voxrt.gateway.audio_out import AudioOut
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.text_in import make_text_in
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import SessionConfig
from voxrt.protocol.events import encode_alignment, encode_error, encode_flushed
from voxrt.text import Segmenter

log = logging.getLogger("voxrt.gateway.context")

SendText = Callable[[str], Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]
# (context_id, reason, audio_ms, metrics) -> None: the pump ended by itself (completed or error)
OnDone = Callable[[str, str, float, dict], Awaitable[None]]

CAPPED_REASONS = ("max_frames",)  # finish reasons that mean "cut at the length cap", not "done speaking"
PLAYBACK_TOLERANCE_MS = 5.0  # a playback report that moves the engine's deadlines less than this is not sent
MAX_GENERATIONS = 1000  # engine requests per context (a 20,000-character turn needs a few dozen)


def now_ms() -> float:
    return time.monotonic_ns() / 1e6


class ContextRunner:
    def __init__(self, context_id: str, index: int, config: SessionConfig, engine: EngineClient,
                 send_text: SendText, send_bytes: SendBytes, on_done: OnDone, metrics: GatewayMetrics,
                 num_frames: int | None = None, *, encode_pool=None, opus_signal: str = "auto",
                 trace=None, send_now=None) -> None:
        self.context_id = context_id
        self.num_frames = num_frames  # pinned output length (benchmark extension), None: the model decides
        self.index = index
        self.config = config
        self.engine = engine
        self._send_text, self._send_bytes, self._on_done = send_text, send_bytes, on_done
        self.metrics = metrics
        out = config.output
        self.encoder = StreamEncoder(out.codec, engine.info.sample_rate, out.sample_rate, out.frame_ms,
                                     opus_signal=opus_signal)
        self._trace = trace  # a TraceWriter or None (encode_pool: a ThreadPoolExecutor or None, for AudioOut)
        self.segmenter = Segmenter(config.segmentation)
        self.clock = PlaybackClock()
        # word forwarding or segments; the audio side reads `segmenter.text` and `alignment`
        self.text_in = make_text_in(self.segmenter, engine.info.consumes_text_incrementally)
        self.alignment = self.text_in.alignment
        self.request_id: str | None = None
        self._params: SamplingParams | None = None
        self._engine_text: list[str] = []  # everything sent to the engine, in order (long-form resumes from it)
        self._num_engine_chars_sent = 0
        self._offset = 0  # the current engine request's text starts at this offset of the context's engine text
        self._request_span_end: int | None = None  # the furthest text the current request consumed (context offsets)
        self.num_generations = 0
        self.opened_ms = now_ms()
        self.audio_out = AudioOut(index, config, self.encoder, self.clock, metrics, send_bytes, self.opened_ms,
                                  encode_pool=encode_pool, send_now=send_now)
        self._audio_in_samples = 0  # model-rate samples received
        self._playback_sent: tuple | None = None  # (request_id, played_ms, at ms, is_stalled) last sent to the engine
        self._flush_points: list[int] = []  # engine offsets whose audio must be sent before `flushed`
        self._span_end = 0  # highest engine offset covered by received chunks
        self._pump: asyncio.Task | None = None
        self._chunk_trace: list[list] = []  # per chunk: index, first frame, frames, then the path's timestamps
        self.is_cancelled = False
        self.is_finished = False
        self.is_ended = False  # no more text (context.end or session.end)

    # ---- text in -------------------------------------------------------------------------------------------

    async def open(self) -> None:
        self._params = SamplingParams(num_frames=self.num_frames) if self.num_frames is not None else None
        self.request_id = await self.engine.submit(voice=self.config.voice, params=self._params, text="", final=False)
        self.num_generations = 1
        self._pump = asyncio.create_task(self._run_pump(), name=f"voxrt-context-{self.context_id}")

    async def append(self, text: str) -> None:
        await self._feed(self.text_in.push(text))

    async def flush(self) -> None:
        await self._feed(self.text_in.flush())
        num_engine_chars = self.text_in.num_engine_chars  # the engine text now ends with a space
        if num_engine_chars > self._span_end + 1:
            self._flush_points.append(num_engine_chars - 1)
        else:  # everything fed is already voiced: all its audio is out once the held frame is
            await self._release_held()
            await self._send_text(encode_flushed(self.context_id))

    async def end(self) -> None:
        if self.is_ended:
            return
        self.is_ended = True
        await self._feed(self.text_in.end(), final=True)

    async def _feed(self, engine_text: str, final: bool = False) -> None:
        if engine_text:
            self._engine_text.append(engine_text)
            self._num_engine_chars_sent += len(engine_text)
        if not (engine_text or final) or self.request_id is None:
            return
        try:
            await self.engine.append_text(self.request_id, engine_text, final=final)
        except EngineError as exc:  # the request is gone (the engine died or failed it): the pump reports it
            log.debug("context %s: text not delivered: %s", self.context_id, exc.code)

    def report_playback(self, played_ms: float) -> None:
        now = now_ms()
        self.clock.on_report(played_ms, now)
        if self.request_id is not None:
            # The engine's deadline for a chunk is when the listener has played everything before it. Audio
            # this side still holds (inside the resampler, a partial frame) reaches the listener only with the
            # next chunk, so the listener runs dry that much earlier: count it as played for the engine.
            played_ms = self.clock.played_ms(now) + self.encoder.held_ms
            is_stalled = self.clock.is_stalled(now)
            if not self._forward_playback(played_ms, now, is_stalled):
                return
            played_samples = int(played_ms * self.engine.info.sample_rate / 1000)
            # A plain call, not a task: a task per report whose EngineError (the engine died, the request
            # ended) nobody retrieved was logged, or failed in its finalizer, long after.
            try:
                self.engine.set_playback_nowait(self.request_id, played_samples, round(now * 1e6), is_stalled)
            except EngineError as exc:  # the request is gone: the pump reports it
                log.debug("context %s: playback not delivered: %s", self.context_id, exc.code)

    def _forward_playback(self, played_ms: float, now: float, is_stalled: bool) -> bool:
        """Whether this playback position tells the engine something new. The engine extrapolates the last
        anchor it got in real time (sched/deadlines.py: frame f is heard at anchor + (f - played) frames), so a
        report that agrees with that extrapolation within `PLAYBACK_TOLERANCE_MS` moves no deadline by more than
        that, and is not sent: a pickled message and a pipe write to the engine per report were ~25 us a frame
        of the gateway's CPU at 10 reports a second (bench/results/2026-12-02-gateway/). Sent: the first report
        of each engine request, any change of the stall state, and any drift past the tolerance (measured
        from the last anchor sent, so drift never accumulates)."""
        last = self._playback_sent
        if last is not None and last[0] == self.request_id and last[3] == is_stalled and \
                abs((now - last[2]) - (played_ms - last[1])) < PLAYBACK_TOLERANCE_MS:
            return False
        self._playback_sent = (self.request_id, played_ms, now, is_stalled)
        return True

    # ---- audio out -----------------------------------------------------------------------------------------

    async def _run_pump(self) -> None:
        reason = "completed"
        try:
            while True:
                is_capped = False
                async for chunk in self.engine.stream(self.request_id):
                    span = self._context_span(chunk)
                    is_capped = chunk.is_last and chunk.finish_reason in CAPPED_REASONS and self._has_more()
                    await self._on_chunk(chunk, span, is_last=chunk.is_last and not is_capped)
                    if chunk.is_last:
                        break
                if not is_capped:
                    break
                await self._continue()
        except asyncio.CancelledError:
            raise
        except EngineError as exc:  # counted once, where the error message is sent (RealtimeSession.send_text)
            reason = "error"
            await self._safe_send_text(encode_error(exc.code, exc.message, False, context_id=self.context_id))
        except ConnectionError:  # the client went away mid-audio: the session's reader ends it and logs it once
            reason = "error"
        except Exception:  # noqa: BLE001 (a broken context must not take the session down)
            log.exception("context %s failed", self.context_id)
            reason = "error"
            await self._safe_send_text(encode_error("internal_error", "audio generation failed", False,
                                                    context_id=self.context_id))
        if not self.is_cancelled:
            self.is_finished = True
            self._write_trace(reason)
            await self._on_done(self.context_id, reason, self.audio_ms, self.context_metrics())

    def _has_more(self) -> bool:
        """Whether a request cut at the length cap left text of this turn to speak (or more may come)."""
        return not self.is_ended or self._resume_at() < self._num_engine_chars_sent and \
            bool("".join(self._engine_text)[self._resume_at():].strip())

    def _resume_at(self) -> int:
        """Where a further request starts: the start of the last word the current one consumed."""
        if self._request_span_end is None:
            return self._offset
        text = "".join(self._engine_text)
        return max(self._offset, text.rfind(" ", 0, self._request_span_end) + 1)

    async def _continue(self) -> None:
        """Long-form: the turn goes on in a further engine request (see the module docstring)."""
        resume_at = self._resume_at()
        if self._request_span_end is None or resume_at <= self._offset and self.num_generations > 1 \
                or self.num_generations >= MAX_GENERATIONS:
            # the engine could not say how far it got, or got nowhere: a clear end, not a silent cut or a loop
            left = self._num_engine_chars_sent - self._offset
            raise error_from_code("length_limit", f"the model's length limit ended this turn; the last {left} "
                                                  f"characters of its text were not spoken")
        text = "".join(self._engine_text)[resume_at:]
        self._offset, self._request_span_end = resume_at, None
        self.request_id = await self.engine.submit(voice=self.config.voice, params=self._params, text=text,
                                                   final=self.is_ended)
        self.num_generations += 1
        log.info("context %s: the length cap ended generation %d; continuing from character %d",
                 self.context_id, self.num_generations - 1, resume_at)

    def _context_span(self, chunk) -> tuple[int, int] | None:
        """The chunk's text span moved from its request's offsets into the context's engine text."""
        if chunk.text_span is None:
            return None
        span = (chunk.text_span[0] + self._offset, chunk.text_span[1] + self._offset)
        self._request_span_end = max(self._request_span_end or 0, span[1])
        return span

    async def _on_chunk(self, chunk, span: tuple[int, int] | None, is_last: bool) -> None:
        """One engine chunk out as frames. `is_last`: the context's last (a chunk that ends a request cut at
        the length cap is not: the turn continues)."""
        handled_ns = time.monotonic_ns()
        pcm = np.frombuffer(chunk.pcm, dtype="<f4")
        rate = self.engine.info.sample_rate
        start_ms = self._audio_in_samples * 1000 / rate
        self._audio_in_samples += len(pcm)
        end_ms = self._audio_in_samples * 1000 / rate
        frames: list = self.encoder.split(pcm) if len(pcm) else []
        if is_last:
            frames += self.encoder.split_finish()
        need_ms = self.clock.play_time_ms(start_ms)  # when the listener needs this chunk, by our clock
        trace = [chunk.chunk_index, chunk.first_frame, chunk.num_frames, chunk.done_ns, chunk.received_ns,
                 handled_ns, None if need_ms is None else round(need_ms * 1e6), None, None]
        self._chunk_trace.append(trace)
        await self.audio_out.play(frames, is_last, (chunk.received_ns or handled_ns) / 1e6, trace)
        if span is not None:
            self._span_end = max(self._span_end, span[1])
        done = self.alignment.finish(end_ms) if is_last else self.alignment.on_chunk(span, start_ms, end_ms)
        if done:
            segments, words = self.alignment.message_fields(done, self.segmenter.text)
            await self._send_text(encode_alignment(self.context_id, segments, words, True))
        if is_last:
            self.clock.mark_finished()
        while self._flush_points and (is_last or self._span_end >= self._flush_points[0]):
            self._flush_points.pop(0)
            if not is_last:
                await self._release_held()
            await self._send_text(encode_flushed(self.context_id))

    async def _release_held(self) -> None:
        """Nothing is held back: every frame goes out as soon as pacing allows (the LAST flag rides on the last
        chunk's final frame), so the audio of everything voiced so far is sent or paced already."""

    # ---- ending --------------------------------------------------------------------------------------------

    async def cancel(self) -> tuple[float, str]:
        """Hard stop; returns (played_ms, spoken_text). Frees the engine request before returning."""
        self.is_cancelled = True
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            try:
                await self._pump
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 (the pump's end is not our error)
                pass
        await self.audio_out.aclose()
        if self.request_id is not None:
            try:
                await self.engine.cancel(self.request_id)
            except (EngineError, asyncio.TimeoutError):
                log.warning("engine cancel of %s did not complete", self.request_id)
        self._write_trace("cancelled")
        played = self.clock.played_ms(now_ms())
        return played, self.alignment.spoken_text(self.segmenter.text, played)

    @property
    def owes_audio(self) -> bool:
        """Audio of this context is still to come: its pump runs and the engine has text it has not voiced
        yet (the inactivity timeout must not close a session that is being spoken to)."""
        return (self._pump is not None and not self._pump.done() and not self.is_cancelled
                and self._num_engine_chars_sent > self._span_end)

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
        sent), for voxrt.loadgen.path to join with the client's arrival times."""
        if self._trace is not None and self._chunk_trace:
            self._trace.write({"context_id": self.context_id, "request_id": self.request_id, "reason": reason,
                               "opened_ns": round(self.opened_ms * 1e6), "frame_ms": self.config.output.frame_ms,
                               "fields": ["chunk", "first_frame", "frames", "engine_done_ns", "received_ns",
                                          "handled_ns", "need_ns", "first_sent_ns", "last_sent_ns"],
                               "chunks": self._chunk_trace})
            self._chunk_trace = []

    async def _safe_send_text(self, data: str) -> None:
        try:
            await self._send_text(data)
        except Exception:  # noqa: BLE001 (the socket may be gone)
            pass
