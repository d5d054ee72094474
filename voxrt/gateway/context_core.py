"""One context's audio path, sans I/O: the decisions of a `ContextRunner` (context.py) without its awaits.

Fed what happens, with the time as an argument, it answers what to do; it never sends, sleeps or reads a
clock (python-websockets' pattern, docs/design.md habit 3), so it is tested without a server or a loop
(tests/gateway/test_context_core.py). The runner does the I/O around it:

- text in: `push` / `flush_text` / `end` record what goes to the engine and return it; after the flush's text
  is fed, `add_flush_point` says whether `flushed` is due at once or when the audio reaches that text;
- engine chunks: `on_chunk` places a chunk in the context's audio (its ms interval, its text span in the
  context's engine text, whether it is the context's last or a length-capped request's end); once the
  chunk's frames are out, `on_chunk_sent` returns the events that follow them (`alignment`, `flushed`);
- long-form: `next_request` says where a further engine request starts (or raises `length_limit`);
- playback: `playback_to_forward` updates the clock and says whether the engine needs the report;
- cancel: `cancelled` gives (played_ms, spoken_text); `owes_audio` and `metrics` are queries.

`PacingRule` is the pacing decision the audio out (audio_out.py) applies to every frame. No frame is held
back: the LAST flag rides on the last chunk's final frame, so `flushed` never waits for a held frame.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxrt.engine.errors import error_from_code
from voxrt.engine.sched.listener import PLAYBACK_TOLERANCE_MS, report_moves_deadlines  # noqa: F401 (re-exported)
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import Pacing
from voxrt.protocol.server_events import Alignment, Flushed, ServerEvent

CAPPED_REASONS = ("max_frames",)  # finish reasons that mean "cut at the length cap", not "done speaking"
MAX_GENERATIONS = 1000  # engine requests per context (a 20,000-character turn needs a few dozen)


class PacingRule:
    """Pacing `realtime`: a frame leaves once the listener's buffer, by the context's playback clock, is down
    to `send_lead_ms`; `burst`: at once.

    `send_lead_ms` is lead_ms less the frames a write may take along early (`early_frames`, each `frame_ms`:
    audio_out.py writes steady frames in pairs): the protocol promises that the server sends at most lead_ms
    ahead of the client's playback, so the last frame of a write must leave with the buffer at lead_ms at most,
    and the write therefore goes once it is down to lead_ms less those frames. With a lead too short for that
    (under two frames for a pair) no frame goes early and the rule is lead_ms itself."""

    def __init__(self, pacing: Pacing, clock: PlaybackClock, frame_ms: float = 0.0, early_frames: int = 0) -> None:
        self.is_realtime, self.lead_ms, self.clock = pacing.mode == "realtime", pacing.lead_ms, clock
        fits = self.is_realtime and early_frames > 0 and pacing.lead_ms >= (1 + early_frames) * frame_ms
        self.early_frames = early_frames if fits else 0
        self.send_lead_ms = pacing.lead_ms - self.early_frames * frame_ms

    def wait_ms(self, now_ms: float) -> float:
        """How long until the rule lets the next frame out (<= 0: now)."""
        return self.clock.buffered_ms(now_ms) - self.send_lead_ms if self.is_realtime else 0.0

    def due_ms(self, ready_ms: float) -> float:
        """The next frame's due time: the rule's earliest send, or its chunk's arrival (`ready_ms`), whichever
        is later (what send lateness is measured from)."""
        clock = self.clock
        if self.is_realtime and clock.is_started:
            return max(ready_ms, clock.play_time_ms(clock.sent_ms) - self.send_lead_ms)
        return ready_ms


@dataclass(frozen=True)
class ChunkPlan:
    """Where one engine chunk sits in the context's audio."""

    span: tuple[int, int] | None  # the text it consumed, offsets of the context's engine text
    start_ms: float  # its audio, ms of the context's audio at the model's rate
    end_ms: float
    is_last: bool  # the context's last chunk (its final frame carries the LAST flag)
    is_capped: bool  # its request ended at the length cap with text left: the turn goes on in another


def resume_point(text: str, offset: int, span_end: int | None) -> int:
    """Long-form: where a further engine request starts when one ends at the length cap having consumed
    text up to `span_end` (None: it did not say): the start of the last word it consumed, never before
    `offset` (where it began). A word may be said twice, none is lost. Shared by the realtime contexts and
    the HTTP synthesis (gateway/http.py)."""
    if span_end is None:
        return offset
    return max(offset, text.rfind(" ", 0, span_end) + 1)


class ContextCore:
    """See the module docstring. `text_in`: a WordTextIn or SegmentTextIn (text_in.py)."""

    def __init__(self, context_id: str, text_in, clock: PlaybackClock, model_rate: int) -> None:
        self.context_id, self.text_in, self.clock, self.model_rate = context_id, text_in, clock, model_rate
        self.alignment = text_in.alignment
        self._engine_text: list[str] = []  # everything sent to the engine, in order (long-form resumes from it)
        self.num_engine_chars_sent = 0
        self._offset = 0  # the current engine request's text starts at this offset of the context's engine text
        self._request_span_end: int | None = None  # the furthest text the current request consumed (context offsets)
        self._request_end: int | None = None  # where the current request's text ends (None: the engine text's end)
        self.num_generations = 0
        self._audio_in_samples = 0  # model-rate samples received
        self._request_start_ms = 0.0  # where the current request's audio starts in the context's audio
        self._flush_points: list[int] = []  # engine offsets whose audio must be sent before `flushed`
        self.span_end = 0  # highest engine offset covered by received chunks
        self._playback_sent: tuple | None = None  # (request key, played_ms, at ms, is_stalled) last forwarded
        self.is_ended = False  # no more text (context.end or session.end)

    # ---- text in -------------------------------------------------------------------------------------------

    def push(self, text: str) -> str:
        return self._record(self.text_in.push(text))

    def flush_text(self) -> str:
        return self._record(self.text_in.flush())

    def add_flush_point(self) -> list[ServerEvent]:
        """After the flush's text was fed: `flushed` now when everything fed is voiced already (all its audio is
        sent or paced), else when the audio reaches the end of the text (`on_chunk_sent`)."""
        num_engine_chars = self.text_in.num_engine_chars  # the engine text now ends with a space
        if num_engine_chars > self.span_end + 1:
            self._flush_points.append(num_engine_chars - 1)
            return []
        return [Flushed(self.context_id)]

    def end(self) -> str:
        self.is_ended = True
        return self._record(self.text_in.end())

    def _record(self, engine_text: str) -> str:
        if engine_text:
            self._engine_text.append(engine_text)
            self.num_engine_chars_sent += len(engine_text)
        return engine_text

    # ---- engine chunks -------------------------------------------------------------------------------------

    def on_request_opened(self) -> None:
        self.num_generations += 1

    def start_generation(self, offset: int, end: int | None) -> None:
        """Chunks from here on are of a request whose text is the context's engine text [offset, end) (a
        segment's own request, for programs that read the prompt at once; end None: to the end)."""
        self._offset, self._request_span_end, self._request_end = offset, None, end
        self._request_start_ms = self.received_ms

    def on_chunk(self, text_span: tuple[int, int] | None, num_samples: int, is_last: bool,
                 finish_reason: str | None, more_follows: bool = False) -> ChunkPlan:
        """An engine chunk of `num_samples` model-rate samples; `text_span` in its request's offsets;
        `is_last`: its request's last; `more_follows`: another request of the context may come after it (a
        later segment's), so its request's last chunk is not the context's."""
        span = None
        if text_span is not None:  # moved from the request's offsets into the context's engine text
            span = (text_span[0] + self._offset, text_span[1] + self._offset)
            self._request_span_end = max(self._request_span_end or 0, span[1])
        if self._request_end is not None:
            # a segment's own request reads its text in the prompt, so the engine says its first chunk spans all
            # of it and the others nothing; the text is spoken over the request's whole audio: under way from
            # the first chunk, its end reached at the last (alignment, `flushed`)
            span = (self._offset, self._request_end if is_last else self._offset + 1)
        is_capped = is_last and finish_reason in CAPPED_REASONS and self._has_more()
        start_ms = self._audio_in_samples * 1000 / self.model_rate
        self._audio_in_samples += num_samples
        end_ms = self._audio_in_samples * 1000 / self.model_rate
        return ChunkPlan(span, start_ms, end_ms, is_last and not is_capped and not more_follows, is_capped)

    def on_chunk_sent(self, chunk: ChunkPlan) -> list[ServerEvent]:
        """The chunk's frames are out (sent or queued behind the pacing rule): the events that follow them."""
        events: list[ServerEvent] = []
        if chunk.span is not None:
            self.span_end = max(self.span_end, chunk.span[1])
        alignment = self.alignment
        done = alignment.finish(chunk.end_ms) if chunk.is_last else \
            alignment.on_chunk(chunk.span, chunk.start_ms, chunk.end_ms)
        if done:
            segments, words = alignment.message_fields(done, self.text_in.text)
            events.append(Alignment(self.context_id, segments, words, True))
        if chunk.is_last:
            self.clock.mark_finished()
        while self._flush_points and (chunk.is_last or self.span_end >= self._flush_points[0]):
            self._flush_points.pop(0)
            events.append(Flushed(self.context_id))
        return events

    # ---- long-form -----------------------------------------------------------------------------------------

    def _has_more(self) -> bool:
        """Whether a request cut at the length cap left text of this turn to speak (or more may come)."""
        if self._request_end is not None:
            return True  # a segment's own request read all its text at once: a cut one may have left any of it
        return not self.is_ended or self._resume_at() < self.num_engine_chars_sent and \
            bool("".join(self._engine_text)[self._resume_at():].strip())

    def _resume_at(self) -> int:
        """Where a further request starts: the start of the last word the current one consumed."""
        return resume_point("".join(self._engine_text), self._offset, self._request_span_end)

    def next_request(self) -> tuple[int, str]:
        """Long-form (context.py's docstring): (where the further request starts, its text), the current
        request's offsets moved there. Raises EngineError `length_limit` where the engine could not say how far
        it got, or got nowhere: a clear end, not a silent cut or a loop."""
        if self._request_end is not None:  # a segment's own request read all its text in the prompt: how far
            left = self._request_end - self._offset  # it spoke is not known, so there is no place to resume from
            raise error_from_code("length_limit", f"the model's length limit ended a segment of {left} characters "
                                                  f"before its end; the rest of this turn was not spoken")
        resume_at = self._resume_at()
        if self._request_span_end is None or resume_at <= self._offset and self.num_generations > 1 \
                or self.num_generations >= MAX_GENERATIONS:
            left = self.num_engine_chars_sent - self._offset
            raise error_from_code("length_limit", f"the model's length limit ended this turn; the last {left} "
                                                  f"characters of its text were not spoken")
        text = "".join(self._engine_text)[resume_at:self._request_end]
        self._offset, self._request_span_end = resume_at, None
        self._request_start_ms = self.received_ms  # the further request's audio goes on from here
        return resume_at, text

    # ---- playback ------------------------------------------------------------------------------------------

    @property
    def received_ms(self) -> float:
        """The context's audio received from the engine so far."""
        return self._audio_in_samples * 1000 / self.model_rate

    def lead_of_next_request_ms(self, now_ms: float) -> float:
        """At least how much of the context's audio the listener has still to hear before a request queued now
        starts (everything received and not yet played; the requests before it may add more): what the engine
        is told as that request's playback anchor (`played_samples` < 0)."""
        return max(0.0, self.received_ms - self.clock.played_ms(now_ms))

    def playback_to_forward(self, played_ms: float, now_ms: float, held_ms: float,
                            request_key) -> tuple[float, bool] | None:
        """A client's playback report at `now_ms`: fed to the clock; returns (played_ms, is_stalled) for the
        engine, or None when the report moves no deadline. `held_ms`: audio this side still holds (inside the
        resampler, a partial frame), which reaches the listener only with the next chunk, so the listener runs
        dry that much earlier: counted as played for the engine. `request_key`: the engine request (None: none
        yet, nothing to forward); the first report of each is forwarded.

        The engine extrapolates the last anchor it got in real time (sched/deadlines.py: frame f is heard at
        anchor + (f - played) frames), so a report that agrees with that extrapolation within
        `PLAYBACK_TOLERANCE_MS` moves no deadline by more than that, and is not sent: a pickled message and a
        pipe write to the engine per report were ~25 us a frame of the gateway's CPU at 10 reports a second
        (bench/results/2026-12-02-gateway/). Sent: the first report of each engine request, any change of the
        stall state, and any drift past the tolerance (measured from the last anchor sent, so drift never
        accumulates)."""
        clock = self.clock
        clock.on_report(played_ms, now_ms)
        if request_key is None:
            return None
        # the engine counts in the current request's audio, which starts `_request_start_ms` into the context's
        # (a segment's own request, or a long-form continuation): negative while the listener has not reached it
        played_ms = clock.played_ms(now_ms) + held_ms - self._request_start_ms
        is_stalled = clock.is_stalled(now_ms)
        last = self._playback_sent
        if last is not None and last[0] == request_key and \
                not report_moves_deadlines(last[1:], played_ms, now_ms, is_stalled):
            return None
        self._playback_sent = (request_key, played_ms, now_ms, is_stalled)
        return played_ms, is_stalled

    # ---- ending and queries ----------------------------------------------------------------------------------

    def cancelled(self, now_ms: float) -> tuple[float, str]:
        """(played_ms, spoken_text) of a hard stop at `now_ms`: the `cancelled` message's fields."""
        played = self.clock.played_ms(now_ms)
        return played, self.alignment.spoken_text(self.text_in.text, played)

    @property
    def owes_audio_text(self) -> bool:
        """The engine has text it has not voiced yet."""
        return self.num_engine_chars_sent > self.span_end
