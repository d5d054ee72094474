"""The `deadline` policy: every chunk by its deadline, the urgent ones on the whole GPU (issue 7).

Chunks are due when the listener needs them (`deadlines.chunk_deadline_ns`). Each step:

1. Admission by first-audio deadline (arrival + `deadline_startup_ms`: earliest arrival first). A prefill is
   deferred when it would make a running stream miss its next chunk: the step time it adds (prompt tokens and
   one more request, `CostModel.lm_step_ms`) exceeds the slack of the most urgent running stream (its next
   chunk's deadline, less now, less the LM steps its missing frames still take at the current step time, less
   its codec launch), while that slack is not already negative (deferring cannot save a stream that is late
   anyway). A request is deferred at most `max_prefill_deferral_ms` from its first deferral
   (`request.deferred_since_ns`): it is not deferred past a step that would end after that bound (by the cost
   model's step time), so it is admitted by then (a step longer than its estimate may overrun by the error).
   `should_defer_prefill` is the rule as a pure function. Under overload, earliest-arrival-first makes every
   waiting request late once the queue is longer than the TTFA budget (each waits for all the lost ones ahead
   of it): with `late_start_demotion_ms` > 0 (off by default), a stream whose first chunk is already past its
   deadline goes after the streams that can still make theirs, for at most that long past its deadline, then
   by arrival again. In the simulation (bench/sim_late_start.py: LibriTTS, 60 s, its knee near 88 req/s) a
   2 s bound held 98.6% instead of 91.4% at 88 req/s (tokens at 30/s, 80 req/s: 98.1% instead of 91.2%), the
   demoted requests' TTFA p99 rising to 1.2-1.7 s (bench/results/2026-12-04-late-start/); not yet on a GPU.
   With `late_chunk_hold_ms` (off in SchedulerConfig; `voxrt serve` and `voxrt loadgen` run 100 ms on a GPU), no
   stream is admitted while the engine is behind: half the chunks that completed within that long were past
   their deadline (`is_behind`; not counting the chunks of a stream starved of text near the chunk's deadline: a
   slow agent's text makes chunks late on an idle engine). The
   live cap bounds only the requests still generating; an engine behind its chunks with short texts (requests
   leave the LM quickly) kept admitting newcomers, each as late as the rest (on an H100, Seed-TTS at 184
   req/s: every request stalled, TTFA ~336 ms, 6% refused by the admission bound;
   bench/results/2026-12-06-h100-capacity-bound/).
2. The LM: every running request decodes a frame (as the base policy); when more are admitted than a batch
   holds (`max_live_requests` over `max_batch_size`), the ones whose next chunk has the least slack.
3. The codec, in deadline order, every job with its `deadline_ns`. First chunks, and chunks due within
   `urgent_ms` plus what a background launch would take to deliver them, go to the urgent lane, at most
   `max_codec_batch` a launch. A stream whose next chunk would be late if it waited for all its frames (its
   slack under one LM step) has the frames it has cut early, to a size the codec runs (`_codec_candidates`): a
   short chunk on time beats a full one after the listener ran dry. A stream starved of text (its text
   streams in slower than the LM consumes it) keeps its frames by the same rule (`holds_starved_frames`,
   `starved_cut_ns`) rather than cutting them whenever it starves, which made chunks of one or two frames
   after nearly every step of a token-streamed request; its first chunk still goes at once. The others go to the background lane once `dec_batch` of them are ready (a
   bigger launch costs less per chunk), or earlier when the earliest would turn urgent before the next step
   (due within the launch's time plus `urgent_ms` plus an LM step), or when the LM has nothing to do this
   step. A lane with a batch in flight gets nothing (the chunk stays ready for the next step). Without lanes
   the same rules pick the chunks, which then run after the LM step (urgent ones first).
4. Non-streaming requests (`is_streaming` False: HTTP speech, batch jobs) use what streams leave: admitted
   after every waiting stream, and held back (without the deferral bound) while admitting them would make a
   running stream miss its next chunk; their chunks have no deadline, never go urgent and come last.

   What a background launch takes is `codec_launch_ms` times `background_slowdown`, learned from the launches
   seen completing (cut to `complete_codec`, an exponential average): the background lane runs on an SM
   partition beside the LM, several times slower than the cost model's whole GPU, and its completion is seen
   between LM steps. With `urgent_ms` alone, a stream's second chunk (due 160 ms after its first) joined a
   background launch of 16 chunks that took longer than that on the partition, and the stream stalled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable

from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.deadlines import chunk_deadline_ns, codec_launch_ms, with_deadline
from voxrt.engine.sched.pages import PagePool, SlotPool
from voxrt.engine.sched.plan import BACKGROUND, URGENT, CodecJob, ProgramSpec, StepPlan
from voxrt.engine.sched.request import Request, RequestState
from voxrt.engine.sched.scheduler import PromptBuilder, Scheduler, SchedulerConfig
from voxrt.engine.sched.text_feed import Tokenizer


def _by_arrival(request: Request) -> tuple:
    return (not request.is_streaming, request.arrival_ns)


def should_defer_prefill(now_ns: int, deferred_since_ns: int | None, max_deferral_ns: int, extra_step_ns: float,
                         min_slack_ns: float | None, step_ns: float = 0.0) -> bool:
    """Whether to hold a new request's prefill back this step: its extra step time `extra_step_ns` would eat
    the running streams' least slack `min_slack_ns` (None: no running stream), and deferring it past this
    step (`step_ns`: its estimated time, until the next chance to admit) keeps its deferral under
    `max_deferral_ns` (`deferred_since_ns`: when it was first deferred, None if never; a bound of 0 never
    defers)."""
    deferred_ns = 0 if deferred_since_ns is None else now_ns - deferred_since_ns
    if deferred_ns + step_ns >= max_deferral_ns:
        return False
    return min_slack_ns is not None and 0 <= min_slack_ns < extra_step_ns


def next_chunk_slack_ns(request: Request, now_ns: int, spec: ProgramSpec, costs: CostModel, step_ms: float,
                        startup_ns: int, margin_ns: int = 0) -> float:
    """Time to spare before a running request's next chunk is late: its deadline less now, less the LM steps
    its missing frames still take at `step_ms` each, less the chunk's codec launch."""
    first_frame = request.num_frames_chunked
    size = spec.next_chunk_size(first_frame)
    have = request.num_frames - first_frame
    missing = 0 if request.is_generation_done else max(0, size - have)
    due_ns = chunk_deadline_ns(request, first_frame, spec, startup_ns, margin_ns)
    return due_ns - now_ns - (missing * step_ms + costs.codec_ms(1, size)) * 1e6


@dataclass(frozen=True)
class _LaunchRecord:
    cut_ns: int
    estimate_ns: float  # `codec_launch_ms` of the batch
    chunks: frozenset[tuple[str, int]]  # (request id, chunk index) of its jobs


_deadline = attrgetter("deadline_ns")
# `late_chunk_hold_ms`: the engine is behind when at least this share of the chunks completed within the bound
# were late, and at least this many completed (a lone late chunk on an idle engine is not an overload)
LATE_SHARE = 0.5
MIN_COMPLETIONS = 8
# A late chunk of a stream found starved of text at a step from this long before the chunk's deadline on is the
# text's lateness, not the engine's: not counted. (Counting from the last starvation instead, within 500 ms of the
# chunk's completion, hid the early chunks of every token-streamed request, whose text starves the LM for its first
# few hundred ms however fast it comes: in the simulation, Seed-TTS at 184 req/s with text at 30 tokens/s and a
# codec behind (tests/engine/sched/test_sim.py's codec-bound case, 16 chunks a launch, 30 s) held 62.5% with the
# hold, 76.3% with this rule, 77.8% counting every chunk; an agent at 2 words/s on an idle engine, 20 req/s: no
# request refused by either rule, 124 by this one with 0 ms, since a chunk waits for its frames and the codec
# after the text arrives.)
STARVED_BEFORE_DEADLINE_MS = 160.0
_SLOWDOWN_WEIGHT = 0.3  # of the newest observation in the background lane's slowdown (an exponential average)


class DeadlineScheduler(Scheduler):
    name = "deadline"
    default_live_per_batch = 2  # decode serves the least slack first (`_by_urgency`): the rest wait a step

    def __init__(self, spec: ProgramSpec, pages: PagePool, slots: SlotPool, build_prompt: PromptBuilder,
                 tokenize: Tokenizer, config: SchedulerConfig) -> None:
        super().__init__(spec, pages, slots, build_prompt, tokenize, config)
        # A background launch's time from cut to `complete_codec` over its `codec_launch_ms` (module docstring)
        self.background_slowdown = 1.0
        self._background_batch: _LaunchRecord | None = None
        # `late_chunk_hold_ms`: the chunks completed within that long (completion time, late), oldest first, and
        # how many of them were late; `is_holding`: whether the last plan held admission back
        self._completions: deque[tuple[int, bool]] = deque()
        self._num_late = 0
        self.is_holding = False

    def plan_step(self, now_ns: int) -> StepPlan:
        plan = StepPlan()
        running, waiting = self.running_and_waiting()
        if self.config.late_chunk_hold_ms is not None:
            starved = RequestState.STARVED
            for request in running:
                if request.state is starved:
                    request.starved_ns = now_ns
        self.is_holding = bool(waiting) and self.is_behind(now_ns)
        if waiting and len(running) < self.config.live_cap and not self.is_holding:  # else `admit` would take none
            # streams by first-audio deadline (arrival + startup), then the non-streaming ones
            by_first_audio = sorted(waiting, key=self._admission_key(now_ns))
            self.admit(plan, by_first_audio, len(running), self._deferral_rule(plan, running, now_ns))
        self.decode(plan, self._by_urgency(running, plan, now_ns))
        self._plan_codec(plan, now_ns)
        return plan

    def _admission_key(self, now_ns: int) -> Callable[[Request], tuple]:
        """The order of the waiting requests (module docstring, 1): streams by arrival (their first-audio
        deadline), then the non-streaming ones; with `late_start_demotion_ms`, a stream whose first chunk is
        already past its deadline (`chunk_deadline_ns` of frame 0: arrival + startup - margin) by less than that
        bound goes after the streams still on time."""
        demotion_ns = self.config.late_start_demotion_ms * 1e6
        if demotion_ns <= 0:
            return _by_arrival
        due_after_arrival_ns = self._startup_ns - self._margin_ns

        def key(request: Request) -> tuple:
            late_ns = now_ns - request.arrival_ns - due_after_arrival_ns
            return (not request.is_streaming, 0 <= late_ns < demotion_ns, request.arrival_ns)

        return key

    def _next_chunk_parts(self, request: Request) -> tuple:
        """(chunks cut, playback anchor, first chunk time, cost model, the next chunk's deadline, its frames, its
        codec ms): `chunk_deadline_ns`, `next_chunk_size` and `CostModel.codec_ms` of one chunk, kept on the request
        (`Request.chunk_parts`) and recomputed only when what they read changed (a chunk cut, a playback report,
        the first chunk's completion, another cost model). The planner asks for every live stream several times a
        step: the last three items are what callers use (`_, _, _, _, due_ns, size, codec_ms = ...`)."""
        entry = request.chunk_parts
        if (entry is None or entry[0] != request.num_frames_chunked or entry[1] is not request.playback
                or entry[2] != request.first_chunk_ns or entry[3] is not self.costs):
            first_frame = request.num_frames_chunked
            size = self.spec.next_chunk_size(first_frame)
            entry = (first_frame, request.playback, request.first_chunk_ns, self.costs,
                     chunk_deadline_ns(request, first_frame, self.spec, self._startup_ns, self._margin_ns),
                     size, self.costs.codec_ms(1, size))
            request.chunk_parts = entry
        return entry

    def _slack_ns(self, request: Request, now_ns: int, step_ms: float) -> float:
        """`next_chunk_slack_ns` of a running request from its `_next_chunk_parts`: the planner asks for every
        stream up to three times a step (admission, decode order, early chunks), at different step times."""
        _, _, _, _, due_ns, size, codec_ms = self._next_chunk_parts(request)
        missing = 0 if request.finish_reason is not None else max(0, size - (request.num_frames
                                                                             - request.num_frames_chunked))
        return due_ns - now_ns - (missing * step_ms + codec_ms) * 1e6

    def _least_slack_ns(self, streams: list[Request], now_ns: int, step_ms: float) -> float:
        """min(`_slack_ns`) over `streams` (not empty), as one loop: the admission asks it most steps."""
        parts = self._next_chunk_parts
        least = None
        for request in streams:
            _, _, _, _, due_ns, size, codec_ms = parts(request)
            if request.finish_reason is not None:
                missing = 0
            else:
                missing = size - (len(request.frames) - request.num_frames_chunked)
                missing = missing if missing > 0 else 0
            slack_ns = due_ns - now_ns - (missing * step_ms + codec_ms) * 1e6
            if least is None or slack_ns < least:
                least = slack_ns
        return least

    def _by_urgency(self, running: list[Request], plan: StepPlan, now_ns: int) -> list[Request]:
        """The running requests in the order `decode` serves them when they are more than a batch: streams by
        their next chunk's slack (least first), then the non-streaming ones (arrival order)."""
        if len(running) <= self.config.max_batch_size - len(plan.prefill):
            return running  # every one fits: the order does not matter
        step_ms = self.costs.lm_step_ms(self.config.max_batch_size)
        parts = self._next_chunk_parts

        def key(request: Request) -> tuple[bool, float]:  # `_slack_ns`, inline: every running request, every step
            if not request.is_streaming:
                return (True, 0.0)
            _, _, _, _, due_ns, size, codec_ms = parts(request)
            missing = 0 if request.finish_reason is not None else size - (len(request.frames)
                                                                           - request.num_frames_chunked)
            return (False, due_ns - now_ns - ((missing if missing > 0 else 0) * step_ms + codec_ms) * 1e6)

        return sorted(running, key=key)

    @property
    def _startup_ns(self) -> int:
        return round(self.config.deadline_startup_ms * 1e6)

    @property
    def _margin_ns(self) -> int:
        return round(self.config.deadline_margin_ms * 1e6)

    def _deferral_rule(self, plan: StepPlan, running: list[Request], now_ns: int
                       ) -> Callable[[Request, int], bool] | None:
        """`may_admit` for `Scheduler.admit`: False defers the request (see `should_defer_prefill`)."""
        generating = [r for r in running if r.state is RequestState.RUNNING]
        streams = [r for r in generating if r.is_streaming]
        if not streams:
            return None
        batch = min(len(generating), self.config.max_batch_size)
        step_ms = self.costs.lm_step_ms(batch)
        max_deferral_ns = round(self.config.max_prefill_deferral_ms * 1e6)
        least: list[float] = []  # the streams' least slack, computed at the first prompt asked about (most
        # steps admit nothing: a pass over every stream then costs ~1 ms of a ~10 ms step for nothing)

        def may_admit(request: Request, prefill_tokens: int) -> bool:
            prompt = self.admission_prompt(request)
            if prompt is None:
                return True  # nothing to prefill yet: `try_admit` decides (waits, or ends an empty text)
            if not least:
                least.append(self._least_slack_ns(streams, now_ns, step_ms))
            min_slack_ns = least[0]
            new_batch = batch + len(plan.prefill) + 1
            extra_ns = (self.costs.lm_step_ms(new_batch, prefill_tokens + len(prompt)) - step_ms) * 1e6
            step_ns = self.costs.lm_step_ms(new_batch - 1, prefill_tokens) * 1e6  # this step without it
            if not request.is_streaming:  # what streams leave: held while a stream would miss, unbounded
                if 0 <= min_slack_ns < extra_ns:
                    if request.deferred_since_ns is None:
                        request.deferred_since_ns = now_ns
                    return False
                return True
            if should_defer_prefill(now_ns, request.deferred_since_ns, max_deferral_ns, extra_ns, min_slack_ns,
                                    step_ns):
                if request.deferred_since_ns is None:
                    request.deferred_since_ns = now_ns
                return False
            return True

        return may_admit

    def is_behind(self, now_ns: int) -> bool:
        """Whether the engine is behind the streams it runs: over the last `late_chunk_hold_ms`, at least
        `LATE_SHARE` of the chunks that completed (and `MIN_COMPLETIONS` of them) were past their deadline.
        `plan_step` then admits none (module docstring, 1). Always False when the bound is off."""
        hold_ms = self.config.late_chunk_hold_ms
        if hold_ms is None:
            return False
        self._forget_completions(now_ns - hold_ms * 1e6)
        total = len(self._completions)
        return total >= MIN_COMPLETIONS and self._num_late >= LATE_SHARE * total

    def wake_ns(self) -> float | None:
        """Also, while the last plan held admission (`is_behind`), when its oldest completion leaves the window,
        the earliest the hold can lift with no chunk completing meanwhile (an engine with nothing else in flight
        plans again then)."""
        wake_ns = super().wake_ns()
        if self.is_holding and self._completions:
            lift_ns = self._completions[0][0] + self.config.late_chunk_hold_ms * 1e6
            wake_ns = lift_ns if wake_ns is None else min(wake_ns, lift_ns)
        return wake_ns

    def _forget_completions(self, before_ns: float) -> None:
        completions = self._completions
        while completions and completions[0][0] < before_ns:
            if completions.popleft()[1]:
                self._num_late -= 1

    def _note_lateness(self, job: CodecJob, now_ns: int) -> None:
        """A completed chunk for `is_behind`: late or on time. Chunks without a deadline (non-streaming requests)
        or audio (an empty last chunk) say nothing, nor do those of a stream found starved of text at a step from
        `STARVED_BEFORE_DEADLINE_MS` before the chunk's deadline on: an agent whose text comes slower than speech
        makes its chunks late on an idle engine."""
        if self.config.late_chunk_hold_ms is None or job.deadline_ns is None or not job.num_frames:
            return
        starved_ns = job.request.starved_ns
        if starved_ns is not None and starved_ns >= job.deadline_ns - STARVED_BEFORE_DEADLINE_MS * 1e6:
            return
        is_late = now_ns > job.deadline_ns
        self._completions.append((now_ns, is_late))
        self._num_late += is_late
        self._forget_completions(now_ns - self.config.late_chunk_hold_ms * 1e6)

    def complete_codec(self, job: CodecJob, now_ns: int) -> None:
        self._note_lateness(job, now_ns)
        batch = self._background_batch
        if batch is not None and (job.request.request_id, job.chunk_index) in batch.chunks:  # first one seen
            if batch.estimate_ns > 0:  # (a batch of empty last chunks costs nothing: nothing to learn)
                observed = (now_ns - batch.cut_ns) / batch.estimate_ns
                self.background_slowdown += _SLOWDOWN_WEIGHT * (observed - self.background_slowdown)
            self._background_batch = None
        super().complete_codec(job, now_ns)

    def _plan_codec(self, plan: StepPlan, now_ns: int) -> None:
        if not self.is_lane_free(URGENT) and not self.is_lane_free(BACKGROUND):
            return  # nothing can be cut for either lane: no need to look (the look changes nothing)
        jobs, batch_jobs = self._codec_candidates(plan, now_ns)
        limit = self.config.max_codec_batch
        urgent_ns = self.config.urgent_ms * 1e6
        # what a background launch of all the chunks that might wait would take, cut to delivered
        later = [job for job in jobs if job.chunk_index > 0][:limit]
        horizon_ns = urgent_ns + self._background_latency_ns(later)
        urgent, background = [], []
        for job in jobs:
            is_urgent = job.chunk_index == 0 or job.deadline_ns - now_ns <= horizon_ns
            (urgent if is_urgent else background).append(job)
        if urgent and self.is_lane_free(URGENT):
            plan.codec.extend(self.cut(job, URGENT) for job in urgent[:limit])
        if not self.is_lane_free(BACKGROUND):
            return
        if not background:  # only what streams leave: non-streaming chunks when the LM idles or they fill a launch
            is_lm_idle = not (plan.prefill or plan.decode)
            is_drained = any(job.request.is_generation_done for job in batch_jobs)  # so that its slot returns
            if batch_jobs and (is_lm_idle or is_drained or len(batch_jobs) >= self.config.dec_batch):
                plan.codec.extend(self.cut(job, BACKGROUND) for job in batch_jobs[:limit])
            return
        batch = background[:limit]
        estimate_ns = codec_launch_ms(self.costs, batch, self.spec, limit) * 1e6
        is_lm_idle = not (plan.prefill or plan.decode)
        # the next chance to launch is a step away: go now if the earliest would turn urgent by then
        step_ns = self.costs.lm_step_ms(len(plan.lm_requests)) * 1e6
        is_due_soon = batch[0].deadline_ns - now_ns <= urgent_ns + self.background_slowdown * estimate_ns + step_ns
        if len(background) >= self.config.dec_batch or is_lm_idle or is_due_soon:
            cut = [self.cut(job, BACKGROUND) for job in batch]
            # room left in the launch goes to non-streaming chunks (what streams leave)
            cut += [self.cut(job, BACKGROUND) for job in batch_jobs[: limit - len(batch)]]
            plan.codec.extend(cut)
            chunks = frozenset((job.request.request_id, job.chunk_index) for job in cut)
            self._background_batch = _LaunchRecord(now_ns, estimate_ns, chunks)

    def _codec_candidates(self, plan: StepPlan, now_ns: int) -> tuple[list[CodecJob], list[CodecJob]]:
        """The chunks `_plan_codec` chooses from, uncut: the streams' by deadline (`chunk_deadline_ns`; ties in
        arrival order, the ready ones before the early ones) and the non-streaming ones (arrival order). A
        stream's chunk is ready (`ready_chunks`), or else early: its next chunk would be late if it waited for
        all its frames (`next_chunk_slack_ns` under one LM step: the next look is a step away), so what frames
        there are are cut early (`chunk_shape(early=True)`). Not a first chunk early (it is small already, and
        one frame of audio would leave the next chunk no time). One pass over the live requests."""
        step_ms = self.costs.lm_step_ms(len(plan.lm_requests))
        step_ns = step_ms * 1e6
        held_step_ms = self._held_step_ms()  # `starved_cut_ns`'s step, once for every starved stream
        held_step_ns = held_step_ms * 1e6
        ready, early, batch_jobs = [], [], []
        next_size = self.spec.next_chunk_size
        parts = self._next_chunk_parts
        running, starved, draining = RequestState.RUNNING, RequestState.STARVED, RequestState.DRAINING
        for request in self.requests.values():
            state = request.state
            if (state is not running and state is not starved and state is not draining) or request.num_chunks_in_flight:
                continue  # nothing to cut (`chunk_shape`): waiting, or its chunk is in flight
            have = len(request.frames) - request.num_frames_chunked  # frames not cut yet
            if request.is_streaming:  # its next chunk's size comes with its deadline (`_next_chunk_parts`, cached)
                _, _, _, _, due_ns, need, codec_ms = parts(request)
            else:
                due_ns, need = None, next_size(request.num_frames_chunked)
            # `chunk_shape(request)`, inline (every live request, every step): its answers in its order
            if request.finish_reason is not None:  # generation done: the rest, the last chunk when it fits
                is_last = have <= need
                shape = (have if is_last else need), is_last, False
            elif have >= need:
                shape = need, False, False
            elif state is starved and have > 0 and self._cuts_starved_at_once(request):
                shape = self.spec.largest_codec_size(have), False, False
            else:  # short of its next chunk: a running request, or a starved stream that holds its frames
                shape = None
            if shape is None:
                if not request.is_streaming or request.num_chunks == 0 or state is draining or have <= 0:
                    continue
                if state is starved:  # held frames: `starved_cut_ns` from the cached chunk parts
                    if self._slack_ns(request, now_ns, held_step_ms) > held_step_ns:  # now < the cut time
                        continue
                else:  # running, short of its next chunk: `_slack_ns` inline (the commonest case, every step)
                    missing = need - have  # generating (a done one has a shape above), so short by this much
                    if due_ns - now_ns - (missing * step_ms + codec_ms) * 1e6 >= step_ns:
                        continue
                shape = self.chunk_shape(request, early=True)
                if shape is None:
                    continue
                out = early
            else:
                out = ready if request.is_streaming else batch_jobs
            out.append(CodecJob(request, request.num_frames_chunked, shape[0], request.num_chunks, shape[1],
                                due_ns, BACKGROUND, shape[2]))
        jobs = ready + early
        jobs.sort(key=_deadline)  # stable
        return jobs, batch_jobs

    def holds_starved_frames(self, request: Request) -> bool:
        """A stream starved of text keeps its frames (after its first chunk, which goes at once for the first
        audio) until its next chunk's slack falls under an LM step, as a running stream's would: text that
        arrives slower than the LM consumes it then still makes full chunks (docstring of `_codec_candidates`)."""
        return request.is_streaming and request.num_chunks > 0

    def starved_cut_ns(self, request: Request) -> float | None:
        """When a held stream's frames are cut: its next chunk's slack (with now at 0) less one LM step of
        the live batch, so that the engine, idle but for held frames, wakes in time."""
        if not self.holds_starved_frames(request):
            return None
        step_ms = self._held_step_ms()
        return self._slack_ns(request, 0, step_ms) - step_ms * 1e6

    def _held_step_ms(self) -> float:
        """The LM step `starved_cut_ns` allows for: the cost model's step at the live count."""
        return self.costs.lm_step_ms(max(1, len(self.requests)))

    def _background_latency_ns(self, jobs: list[CodecJob]) -> float:
        limit = self.config.max_codec_batch
        return self.background_slowdown * codec_launch_ms(self.costs, jobs, self.spec, limit) * 1e6
