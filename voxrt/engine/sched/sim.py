"""A discrete-event simulation of the engine under Poisson load (PURE: a simulated clock and the CostModel).

It runs a real policy, with real page and slot pools, against a simulated runtime and simulated listeners, so
that policies are compared in milliseconds of CPU without a GPU. What it models:

- Arrivals: Poisson at `rate` requests/s for `duration_s`; each request's whole text arrives with it (final),
  or, with `tokens_per_s`, as an agent streams it (`llm_tokens`: a word at a time, the first at arrival, the
  last marked final), its output length pinned from the text as the load generator pins it (15 characters per audio second at
  12.5 frames/s: `pinned_frames`). A fake tokenizer (one token per word) and prompt builder (`PROMPT_TOKENS`
  positions) stand in for the model's.
- The time-shared runtime (`has_lanes=False`: the CPU, `--lanes off`): a step is the LM step,
  `lm_step_ms(batch, prefill_tokens)`, then the plan's codec chunks (`deadlines.codec_launch_ms`), in sequence
  on one clock; the chunks complete, and their audio goes out, at the end of the step.
- The runtime with lanes (`has_lanes=True`): the LM and the background codec lane share the GPU on static SM
  partitions, an LM step taking `lm_ms / lm_share` and a background launch `codec_ms / bg_share`; an urgent
  launch takes `codec_ms / urgent_share` (1: the whole GPU's time) and pauses both others for its duration (`urgent_pause` of it:
  1.0 by default; on the H200 an urgent launch at high priority beside the partitions slowed the LM step far
  less than a full pause would, bench/results/2026-12-04-late-start/). With `async_lm` (the GPU's default LM
  loop, `--lm-loop async`) the next LM step is planned and queued while one runs: the scheduler sees a step's
  frames when it ends, after it planned the next one (a frame reaches a chunk a step later than in the
  synchronous loop). Each lane runs its batches
  in order (a policy that ignores `lanes_free` queues behind the lane's batch). The engine thread schedules
  when no LM step is in flight (after each step, or at the next arrival or launch completion while idle) and
  only then observes completed codec launches: their audio goes out, `complete_codec` is called, and the lane
  is free for the next plan.
- Listeners (`sched/listener.py`, shared with the load generator): a listener starts playing at its first
  audio, plays in real time, and stalls when a chunk arrives after its buffer ran dry. Each reports its
  playback every `report_ms`, and the scheduler takes it (`request.playback`, as of the report's tick) when it
  moves the deadlines by the gateway's rule (`report_moves_deadlines`: the first, a stall, a drift of 5 ms).

The SLO is the load generator's: first audio within 200 ms and no stall. The simulation also checks what the
stateful codec needs: the chunks of a request launch and complete in order, one at a time, and a slot never
holds two requests' launches at once (`SimResult.codec_errors`).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import re
from dataclasses import dataclass, field

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.deadlines import codec_launch_ms
from voxrt.engine.sched.pages import PagePool, SlotPool, default_num_slots
from voxrt.engine.sched.plan import BACKGROUND, LANES, URGENT, CodecJob, ProgramSpec, StepPlan
from voxrt.engine.sched.policies import policy_class
from voxrt.engine.sched.request import PlaybackAnchor, PromptTokens, Request
from voxrt.engine.sched.scheduler import Scheduler, SchedulerConfig
from voxrt.engine.sched.listener import Listener, llm_tokens, pinned_frames, report_moves_deadlines  # 15 characters per audio second at 12.5 frames/s

TTFA_SLO_MS = 200.0
PROMPT_TOKENS = 8
PAGE_SIZE = 16

# Qwen3-TTS-12Hz's shape: 80 ms frames at 24 kHz, chunks of 2, 4, 8, 16, then 25 frames.
SIM_SPEC = ProgramSpec(num_codebooks=1, chunk_frames=25, first_chunk_frames=2, consumes_text_incrementally=True,
                       text_pad_id=0, eos_code=None, frames_per_text_token=None, default_max_frames=4096)

_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "runs", "far", "away")


def synthetic_texts(rng: random.Random, count: int) -> list[str]:
    """Texts of 10 to 200 characters (mean about LibriTTS test-clean's 104), made of short words."""
    texts = []
    for _ in range(count):
        chars = rng.randint(10, 200)
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(_WORDS))
        texts.append(" ".join(words)[:chars])
    return texts


def _tokenize(text: str):
    """One token per word (ids never the pad id 0)."""
    matches = list(re.finditer(r"\S+", text))
    return [1 + len(m.group()) for m in matches], [m.span() for m in matches]


def _build_prompt(request: Request) -> PromptTokens:
    text_ids = (-1,) * (PROMPT_TOKENS - 1) + (request.feed.token_ids[0],)
    return PromptTokens(text_ids, tuple(range(PROMPT_TOKENS)), num_text_tokens_used=1)


@dataclass
class SimRecord:
    request_id: str
    arrival_ns: int
    text_chars: int
    num_frames: int  # pinned output length
    status: str = "unfinished"  # ok, failed, unfinished
    ttfa_ms: float | None = None
    num_stalls: int = 0
    stall_ms: float = 0.0
    chunk_order: list[int] = field(default_factory=list)  # chunk_index of each completed launch, in order
    admitted_ns: int | None = None  # when the scheduler put its prefill in a plan
    deferred_since_ns: int | None = None  # when a policy first deferred its prefill (None: never)

    @property
    def meets_slo(self) -> bool:
        return (self.status == "ok" and self.ttfa_ms is not None and self.ttfa_ms <= TTFA_SLO_MS
                and self.num_stalls == 0)


@dataclass
class SimResult:
    policy: str
    rate: float
    has_lanes: bool
    records: list[SimRecord]
    scheduler: Scheduler  # at the end: every request done, its pools for integrity checks
    num_steps: int
    end_ns: int
    codec_errors: list[str]  # the stateful codec's rules broken (should be empty)
    # per codec lane (the time-shared runtime's launches count as BACKGROUND): launches, chunks, frames, busy ms
    lane_stats: dict[str, LaneStats] = field(default_factory=dict)

    @property
    def attainment(self) -> float:
        """Fraction of requests that met the SLO (1.0 without requests)."""
        return sum(r.meets_slo for r in self.records) / len(self.records) if self.records else 1.0

    @property
    def ttfa_ms(self) -> list[float]:
        return [r.ttfa_ms for r in self.records if r.ttfa_ms is not None]

    @property
    def stalls(self) -> list[int]:
        return [r.num_stalls for r in self.records]

    def summary(self) -> str:
        ttfa = sorted(self.ttfa_ms)
        p99 = ttfa[min(len(ttfa) - 1, int(0.99 * len(ttfa)))] if ttfa else float("nan")
        return (f"{self.policy} lanes={self.has_lanes} rate={self.rate}: {len(self.records)} requests, "
                f"attainment {100 * self.attainment:.1f}%, stalled {sum(1 for s in self.stalls if s)}, "
                f"late first audio {sum(1 for t in ttfa if t > TTFA_SLO_MS)}, TTFA p99 {p99:.0f} ms, "
                f"{self.num_steps} steps")


@dataclass
class LaneStats:
    """What one codec lane ran: launches, the chunks and frames in them, and the time they took."""

    launches: int = 0
    chunks: int = 0
    frames: int = 0
    busy_ms: float = 0.0

    def add(self, jobs: list[CodecJob], duration_ms: float) -> None:
        self.launches += 1
        self.chunks += len(jobs)
        self.frames += sum(job.num_frames for job in jobs)
        self.busy_ms += duration_ms

    def as_dict(self) -> dict:
        return dict(launches=self.launches, chunks=self.chunks, frames=self.frames, busy_ms=round(self.busy_ms, 1),
                    frames_per_chunk=round(self.frames / self.chunks, 2) if self.chunks else None)


class SimulationStuck(AssertionError):
    """The simulated engine has live requests and nothing that could ever move them: a scheduler bug."""


@dataclass
class _Batch:
    """A codec launch on a lane (or an LM step): `end_ns` moves later while urgent launches pause it."""

    jobs: list[CodecJob]
    start_ns: int
    end_ns: int


def simulate(policy_name: str, rate: float, duration_s: float, seed: int, costs: CostModel | None = None,
             has_lanes: bool = False, lm_share: float = 0.9, bg_share: float = 0.3, texts: list[str] | None = None,
             config: SchedulerConfig | None = None, spec: ProgramSpec = SIM_SPEC, report_ms: float = 100.0,
             tokens_per_s: float | None = None, num_slots: int | None = None,
             urgent_pause: float = 1.0, async_lm: bool = False, urgent_share: float = 1.0) -> SimResult:
    """Runs `policy_name` under Poisson load (`rate` requests/s for `duration_s`, arrivals seeded) until every
    request is done. `texts` are used in turn (default: `synthetic_texts`), whole or streamed at
    `tokens_per_s` (None: whole). `async_lm` (with lanes): the asynchronous LM loop. Deterministic for a seed."""
    if not (0 < lm_share <= 1 and 0 < bg_share <= 1):
        raise ValueError(f"shares must be in (0, 1], got lm_share={lm_share}, bg_share={bg_share}")
    if not 0 <= urgent_pause <= 1:
        raise ValueError(f"urgent_pause must be in [0, 1], got {urgent_pause}")
    if not 0 < urgent_share <= 1:
        raise ValueError(f"urgent_share must be in (0, 1], got {urgent_share}")
    if tokens_per_s is not None and not tokens_per_s > 0:
        raise ValueError(f"tokens_per_s must be > 0 (or None: whole texts), got {tokens_per_s}")
    rng = random.Random(seed)
    arrivals: list[int] = []
    t_s = rng.expovariate(rate) if rate > 0 else math.inf
    while t_s < duration_s:
        arrivals.append(round(t_s * 1e9))
        t_s += rng.expovariate(rate)
    pool = texts if texts else synthetic_texts(rng, max(1, len(arrivals)))
    config = dataclasses.replace(config or SchedulerConfig(), has_lanes=has_lanes)
    max_tokens = PROMPT_TOKENS + max(pinned_frames(t) for t in pool) + 1
    num_pages = config.live_cap * -(-max_tokens // PAGE_SIZE)  # as the engine sizes them: every live request
    sched = policy_class(policy_name)(spec, PagePool(num_pages, PAGE_SIZE), SlotPool(num_slots or default_num_slots(config.max_batch_size)),
                                      _build_prompt, _tokenize, config)
    sched.costs = costs or CostModel()
    sim = _Engine(sched, [(t, f"r{i}", pool[i % len(pool)]) for i, t in enumerate(arrivals)], has_lanes,
                  lm_share, bg_share, round(report_ms * 1e6), tokens_per_s, urgent_pause, async_lm and has_lanes,
                  urgent_share)
    sim.run()
    return SimResult(policy=policy_name, rate=rate, has_lanes=has_lanes, records=list(sim.records.values()),
                     scheduler=sched, num_steps=sim.num_steps, end_ns=sim.now, codec_errors=sim.codec_errors,
                     lane_stats=sim.lane_stats)


class _Engine:
    """The simulated runtime and listeners around one scheduler."""

    def __init__(self, sched: Scheduler, arrivals: list[tuple[int, str, str]], has_lanes: bool, lm_share: float,
                 bg_share: float, report_ns: int, tokens_per_s: float | None = None,
                 urgent_pause: float = 1.0, async_lm: bool = False, urgent_share: float = 1.0) -> None:
        self.sched = sched
        self.costs = sched.costs
        self.arrivals = arrivals  # (arrival_ns, request id, text), in time order
        self.next_arrival = 0
        self.has_lanes = has_lanes
        self.lm_share = lm_share
        self.bg_share = bg_share
        self.report_ns = report_ns
        self.urgent_pause = urgent_pause
        self.urgent_share = urgent_share
        self.async_lm = async_lm
        self.token_gap_ns = None if tokens_per_s is None else round(1e9 / tokens_per_s)
        self.text_due: list[tuple[int, int, str, str, bool]] = []  # heap: (due, seq, request id, piece, final)
        self.num_text_pieces = 0
        self.now = 0
        self.num_steps = 0
        self.records: dict[str, SimRecord] = {}
        self.listeners: dict[str, Listener] = {}
        self.next_tick_ns: dict[str, int] = {}  # playing listeners of live requests: their next report
        self.earliest_tick_ns: float = math.inf
        self.lanes: dict[str, list[_Batch]] = {lane: [] for lane in LANES}  # launched, not yet observed
        self.lm: _Batch | None = None  # the LM step in flight (lanes): its end moves with urgent launches
        self.lm_plan: StepPlan | None = None  # with `async_lm`: the plan of `lm`, whose frames the scheduler awaits
        # the stateful codec's bookkeeping: launches per request, and which request has a launch on each slot
        self.num_launched: dict[str, int] = {}
        self.slot_of_launch: dict[int, int] = {}  # id(job) -> slot at launch
        self.slot_busy: dict[int, str] = {}
        self.codec_errors: list[str] = []
        self.lane_stats: dict[str, LaneStats] = {lane: LaneStats() for lane in LANES}

    # ---- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        limit_ns = (self.arrivals[-1][0] if self.arrivals else 0) + round(3600e9)
        while (self.next_arrival < len(self.arrivals) or self.sched.requests or any(self.lanes.values())
               or self.text_due or self.lm is not None):
            if self.now > limit_ns:
                raise SimulationStuck(f"not done an hour of simulated time after the last arrival: "
                                      f"{[(r.request_id, r.state.name) for r in self.sched.requests.values()]}")
            self._arrive()
            self._observe_lanes()
            self._report()
            plan = self.sched.schedule(self.now, {lane: not self.lanes[lane] for lane in LANES})
            if not plan.is_empty:
                self.num_steps += 1
            for request in plan.prefill:
                record = self.records[request.request_id]
                record.admitted_ns, record.deferred_since_ns = self.now, request.deferred_since_ns
            failures = self.sched.pop_failures()  # a request the plan failed freed its pages: not idle
            for failure in failures:
                self.records[failure.request.request_id].status = "failed"
            if self.has_lanes:
                collected = self._run_with_lanes(plan)
                if not (plan.prefill or plan.decode or failures or collected):  # waits for the next event
                    self._wait()
            else:
                self._run_time_shared(plan)
                if plan.is_empty and not failures:
                    self._wait()
            for failure in self.sched.pop_failures():
                self.records[failure.request.request_id].status = "failed"
        self._finish_records()

    def _run_time_shared(self, plan: StepPlan) -> None:
        if plan.prefill or plan.decode:
            self.now += _ns(self._lm_ms(plan))
            self._update_lm(plan)
        if plan.codec:
            self._launch_checks(plan.codec)
            duration_ms = codec_launch_ms(self.costs, plan.codec, self.sched.spec, self.sched.config.max_codec_batch)
            self.lane_stats[BACKGROUND].add(plan.codec, duration_ms)
            self.now += _ns(duration_ms)
            for job in plan.codec:
                self._deliver(job)

    def _run_with_lanes(self, plan: StepPlan) -> bool:
        """Launches the plan; returns whether the engine thread collected an LM step's frames (`async_lm`: the
        previous step's, which it waited for)."""
        spec, max_batch = self.sched.spec, self.sched.config.max_codec_batch
        urgent = [job for job in plan.codec if job.lane == URGENT]
        background = [job for job in plan.codec if job.lane != URGENT]
        self._launch_checks(plan.codec)
        # the others start once the urgent lane's queue has paused them (`urgent_pause` of its remaining time)
        urgent_left_ns = max(0, self.lanes[URGENT][-1].end_ns - self.now) if self.lanes[URGENT] else 0
        paused_until = self.now + round(self.urgent_pause * urgent_left_ns)
        if background:
            queue = self.lanes[BACKGROUND]
            start = max(self.now, queue[-1].end_ns if queue else self.now, paused_until)
            duration_ms = codec_launch_ms(self.costs, background, spec, max_batch) / self.bg_share
            self.lane_stats[BACKGROUND].add(background, duration_ms)
            duration = _ns(duration_ms)
            queue.append(_Batch(background, start, start + duration))
        previous, previous_plan = (self.lm, self.lm_plan) if self.async_lm else (None, None)
        self.lm, self.lm_plan = None, None
        if plan.prefill or plan.decode:
            start = max(self.now, paused_until, previous.end_ns if previous else 0)  # queued behind the one running
            self.lm, self.lm_plan = _Batch([], start, start + _ns(self._lm_ms(plan) / self.lm_share)), plan
        if urgent:
            queue = self.lanes[URGENT]
            start = max(self.now, queue[-1].end_ns if queue else self.now)
            duration_ms = codec_launch_ms(self.costs, urgent, spec, max_batch) / self.urgent_share
            self.lane_stats[URGENT].add(urgent, duration_ms)
            duration = _ns(duration_ms)
            queue.append(_Batch(urgent, start, start + duration))
            pause = round(self.urgent_pause * duration)
            for batch in self.lanes[BACKGROUND]:  # the whole GPU: the background lane pauses
                if batch.end_ns > start:
                    batch.end_ns += pause
            # and the LM step running then: the one before this plan's (which, queued behind it, moves with it)
            # when it is still running, else this plan's
            if previous is not None and previous.end_ns > start:
                previous.end_ns += pause
                if self.lm is not None:
                    self.lm.start_ns += pause
                    self.lm.end_ns += pause
            elif self.lm is not None and self.lm.end_ns > start:
                self.lm.end_ns += pause
        if self.async_lm:  # the engine thread waits for the previous step (the new one queued behind it)
            if previous is None:
                return False
            self.now = max(self.now, previous.end_ns)
            self._update_lm(previous_plan)
            return True
        if self.lm is not None:  # the engine thread waits for its LM step
            self.now = self.lm.end_ns
            self.lm, self.lm_plan = None, None
            self._update_lm(plan)
        return False

    def _wait(self) -> None:
        """Idle engine thread: on to the next arrival or codec launch completion."""
        times = [batch.end_ns for queue in self.lanes.values() for batch in queue[:1]]
        if self.next_arrival < len(self.arrivals):
            times.append(self.arrivals[self.next_arrival][0])
        if self.text_due:
            times.append(self.text_due[0][0])
        wake_ns = self.sched.wake_ns()  # frames a policy holds for a deadline
        if wake_ns is not None:
            times.append(math.ceil(wake_ns))
        later = [t for t in times if t > self.now]
        if later:
            self.now = min(later)
        elif self.sched.requests:
            raise SimulationStuck(f"nothing in flight, nothing to arrive, live requests: "
                                  f"{[(r.request_id, r.state.name) for r in self.sched.requests.values()]}")

    # ---- the runtime's side --------------------------------------------------------------------------------

    def _lm_ms(self, plan: StepPlan) -> float:
        prefill_tokens = sum(len(r.prompt) for r in plan.prefill if r.prompt is not None)
        return self.costs.lm_step_ms(len(plan.prefill) + len(plan.decode), prefill_tokens)

    def _update_lm(self, plan: StepPlan) -> None:
        self.sched.update_lm(plan, [(1,) for _ in plan.lm_requests])

    def _arrive(self) -> None:
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival][0] <= self.now:
            arrival_ns, request_id, text = self.arrivals[self.next_arrival]
            self.next_arrival += 1
            frames = pinned_frames(text)
            self.sched.add(request_id, "voice", SamplingParams(num_frames=frames), arrival_ns)
            self.records[request_id] = SimRecord(request_id, arrival_ns, len(text), frames)
            self.listeners[request_id] = Listener(arrival_ns / 1e9)
            pieces = [text] if self.token_gap_ns is None else llm_tokens(text)
            for i, piece in enumerate(pieces):
                heapq.heappush(self.text_due, (arrival_ns + i * (self.token_gap_ns or 0), self.num_text_pieces,
                                               request_id, piece, i == len(pieces) - 1))
                self.num_text_pieces += 1
        while self.text_due and self.text_due[0][0] <= self.now:
            _, _, request_id, piece, is_final = heapq.heappop(self.text_due)
            if request_id in self.sched.requests:  # (a failed request's later text goes nowhere)
                self.sched.append_text(request_id, piece, is_final)

    def _observe_lanes(self) -> None:
        """Launches completed by now, in the order they completed: audio out, `complete_codec`, lane free."""
        done = []
        for queue in self.lanes.values():
            while queue and queue[0].end_ns <= self.now:
                done.append(queue.pop(0))
        for batch in sorted(done, key=lambda b: b.end_ns):
            for job in batch.jobs:
                self._deliver(job)

    def _launch_checks(self, jobs: list[CodecJob]) -> None:
        for job in jobs:
            request_id = job.request.request_id
            slot = job.request.slot
            if job.chunk_index != self.num_launched.get(request_id, 0):
                self.codec_errors.append(f"{request_id}: chunk {job.chunk_index} launched after "
                                         f"{self.num_launched.get(request_id, 0)} launches")
            if slot is None:
                self.codec_errors.append(f"{request_id}: chunk {job.chunk_index} launched without a slot")
            elif self.slot_busy.get(slot, request_id) != request_id:
                self.codec_errors.append(f"{request_id}: slot {slot} still has {self.slot_busy[slot]}'s launch")
            elif slot in self.slot_busy:
                self.codec_errors.append(f"{request_id}: two chunks in flight")
            if slot is not None:
                self.slot_busy[slot] = request_id
                self.slot_of_launch[id(job)] = slot
            self.num_launched[request_id] = self.num_launched.get(request_id, 0) + 1

    def _deliver(self, job: CodecJob) -> None:
        request_id = job.request.request_id
        self._report()  # reports due before this audio see the buffer without it
        record = self.records[request_id]
        if job.chunk_index != len(record.chunk_order):
            self.codec_errors.append(f"{request_id}: chunk {job.chunk_index} completed after {record.chunk_order}")
        record.chunk_order.append(job.chunk_index)
        slot = self.slot_of_launch.pop(id(job), None)
        if slot is not None:
            self.slot_busy.pop(slot, None)
        listener = self.listeners[request_id]
        if not job.request.is_terminal:  # the runtime drops the audio of a request that ended meanwhile
            if listener.first_audio_s is None:
                self.next_tick_ns[request_id] = self.now + self.report_ns
                self.earliest_tick_ns = min(self.earliest_tick_ns, self.now + self.report_ns)
            if job.num_frames:
                spec = self.sched.spec
                samples = spec.chunk_samples(job.first_frame, job.num_frames, job.is_last)
                listener.on_audio(self.now / 1e9, samples / spec.sample_rate, job.is_last)
            elif job.is_last:
                listener.is_finished = True
        self.sched.complete_codec(job, self.now)

    # ---- the listeners' side -------------------------------------------------------------------------------

    def _report(self) -> None:
        """Each playing listener's latest report tick (every `report_ns` from its first audio) up to now,
        as the listener was at that tick, becomes its request's playback anchor when it moves the deadlines
        (the rule the gateway forwards reports by)."""
        if self.now < self.earliest_tick_ns:
            return
        spec = self.sched.spec
        for request_id, next_ns in list(self.next_tick_ns.items()):
            request = self.sched.requests.get(request_id)
            if request is None:
                del self.next_tick_ns[request_id]
                continue
            if next_ns > self.now:
                continue
            tick_ns = next_ns + (self.now - next_ns) // self.report_ns * self.report_ns
            self.next_tick_ns[request_id] = tick_ns + self.report_ns
            listener = self.listeners[request_id]
            tick_s = tick_ns / 1e9
            played = round(listener.played_s(tick_s) * spec.sample_rate)
            is_stalled = not listener.is_finished and listener.play_end_s is not None and listener.play_end_s <= tick_s
            last = request.playback  # forwarded as the gateway and the load generator do (`report_moves_deadlines`)
            if last is None or report_moves_deadlines(
                    (last.played_samples * 1e3 / spec.sample_rate, last.anchor_ns / 1e6, last.is_stalled),
                    played * 1e3 / spec.sample_rate, tick_ns / 1e6, is_stalled):
                request.playback = PlaybackAnchor(played, tick_ns, is_stalled)
        self.earliest_tick_ns = min(self.next_tick_ns.values(), default=math.inf)

    def _finish_records(self) -> None:
        for request_id, record in self.records.items():
            listener = self.listeners[request_id]
            record.ttfa_ms = listener.ttfa_ms
            record.num_stalls = listener.num_stalls
            record.stall_ms = listener.stall_ms
            if record.status != "failed":
                record.status = "ok" if listener.is_finished else "unfinished"


def _ns(ms: float) -> int:
    return round(ms * 1e6)


__all__ = ["SIM_SPEC", "LaneStats", "SimRecord", "SimResult", "SimulationStuck", "pinned_frames", "simulate", "synthetic_texts"]
