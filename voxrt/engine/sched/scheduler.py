"""The scheduler: owns the requests, their pages and slots, and decides what each step runs.

`Scheduler` holds the state and the mechanics every policy shares (admission, page growth, text feeding,
stop rules, chunk cutting, cancel) and the steps policies compose (`admit`, `decode`, `peek_chunk`/`cut`).
A policy implements `plan_step(now_ns)`; `schedule(now_ns, lanes_free)` is the runtime's entry point.
`BaseScheduler` in `base_policy.py` is the first policy, `policies.py` lists them all. Pure: no torch, no clock
(time is an argument).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from voxrt.engine.errors import ServerBusyError
from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.pages import PagePool, SlotPool
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.plan import BACKGROUND, URGENT, CodecJob, DecodeItem, ProgramSpec, StepPlan
from voxrt.engine.sched.request import PromptTokens, Request, RequestState
from voxrt.engine.sched.text_feed import Tokenizer

PromptBuilder = Callable[[Request], PromptTokens]


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch_size: int = 64
    max_seq_len: int = 4096
    max_prefill_tokens: int = 4096
    # chunks in one codec launch: 32, not 16, since an H100 run where every background launch was full at 16 and
    # the chunks that waited turned urgent (bench/results/2026-12-06-h100-hold-codec-batch/)
    max_codec_batch: int = 32
    # deadline-aware policies (online, deadline):
    deadline_startup_ms: float = 200.0  # a first chunk is due this long after the request arrived
    deadline_margin_ms: float = 50.0  # chunks are due this long before the listener needs them (delivery)
    urgent_ms: float = 100.0  # chunks due within this go to the urgent lane
    max_prefill_deferral_ms: float = 100.0  # a new request's admission is deferred at most this long
    # The deadline policy's admission under overload: a waiting stream whose first chunk is already past its
    # deadline is admitted after the streams that can still make theirs, for at most this long past that
    # deadline (then by arrival again). 0 (default): earliest arrival first, late or not.
    late_start_demotion_ms: float = 0.0
    # Overload protection, every policy: a stream still waiting for admission this long after it could have been
    # admitted (its arrival, or its text's, whichever is later) is refused with `server_busy` at once (its
    # client may retry elsewhere) instead of being served late. Under overload, first come first served makes
    # every newcomer wait behind the ones that are already lost (bench/results/2026-12-06-h100-levers: at 116
    # req/s on an H100, 99.2% of the first 40 s within the SLO, then 0% after a burst). None (default): no
    # stream is refused.
    max_admission_wait_ms: float | None = None
    # How much of a stream's wait for its first text counts toward `max_admission_wait_ms`: its wait counts from
    # its arrival, or from when its text allowed admission less this much, whichever is later. An agent streaming
    # LLM tokens sends the first word's end one token gap (~33 ms at 30 tokens/s) after the request; with 0 (none
    # of the wait counts) such a stream may be admitted 133 ms after its arrival, too late for a first chunk
    # within 200 ms, and its GPU time is lost to the others. With 50 (default) a gap that short counts (the bound
    # runs from the arrival) while a pause of seconds still leaves the stream `max_admission_wait_ms - 50` ms.
    # Measured on an H100 (bench/results/2026-12-06-h100-text-wait/): WebSocket tokens at 30/s held 98.3 / 96.9%
    # at 120 / 128 req/s with 50 against 89.0 / 91.4% with 0 (late first audio 2 / 1 against 369 / 220).
    admission_text_wait_ms: float = 50.0
    # Overload detection, the deadline policy: while half the chunks that completed within this long were late
    # (past their deadlines), the engine is behind the streams it runs whatever its bottleneck (the LM, the
    # codec lanes), and no stream is admitted: the waiting ones wait (and with `max_admission_wait_ms` are
    # refused) until the chunks are on time again. The live cap bounds only the requests still generating, so an
    # engine behind its chunks with short texts let every newcomer in to be late with the rest. None (default): off.
    late_chunk_hold_ms: float | None = None
    dec_batch: int = 8  # the background codec lane launches when this many chunks are ready (or earlier)
    has_lanes: bool = False  # the runtime runs codec lanes beside the LM (else the time-shared loop)
    # Requests admitted at once (running or starved of text): None = max_batch_size. Above max_batch_size a
    # step decodes at most max_batch_size of them, in the order the policy hands to `decode` (the deadline
    # policy: least slack first); a request whose text streams in slower than the LM reads it holds its place
    # without decoding most steps, so a cap at one batch would leave the batch part empty.
    max_live_requests: int | None = None

    def __post_init__(self) -> None:
        if not self.late_start_demotion_ms >= 0:  # NaN too
            raise ValueError(f"late_start_demotion_ms must be >= 0, got {self.late_start_demotion_ms}")
        if self.max_admission_wait_ms is not None and not 0 <= self.max_admission_wait_ms < math.inf:
            raise ValueError(f"max_admission_wait_ms must be a finite number >= 0, got {self.max_admission_wait_ms}")
        if not 0 <= self.admission_text_wait_ms < math.inf:  # NaN too
            raise ValueError(f"admission_text_wait_ms must be a finite number >= 0, got {self.admission_text_wait_ms}")
        if self.late_chunk_hold_ms is not None and not 0 < self.late_chunk_hold_ms < math.inf:
            raise ValueError(f"late_chunk_hold_ms must be a finite number > 0, got {self.late_chunk_hold_ms}")
        if self.max_live_requests is not None and self.max_live_requests < self.max_batch_size:
            raise ValueError(f"max_live_requests ({self.max_live_requests}) must be >= max_batch_size "
                             f"({self.max_batch_size})")

    @property
    def live_cap(self) -> int:
        return self.max_live_requests or self.max_batch_size


@dataclass(frozen=True)
class Failure:
    request: Request
    code: str
    message: str


class Scheduler(abc.ABC):
    # Live requests per batch slot a policy is built with when the engine config leaves it open
    # (`EngineConfig.max_live_requests` None): 1 here; a policy that orders `decode` by urgency takes more.
    default_live_per_batch = 1
    # Whether the latest plan admitted no stream because the engine was behind (`late_chunk_hold_ms`, the deadline
    # policy's; False in the others): the runtime counts such steps
    is_holding = False

    def __init__(self, spec: ProgramSpec, pages: PagePool, slots: SlotPool, build_prompt: PromptBuilder,
                 tokenize: Tokenizer, config: SchedulerConfig) -> None:
        self.spec = spec
        self.pages = pages
        self.slots = slots
        self.config = config
        self._build_prompt = build_prompt
        self._tokenize = tokenize
        self.requests: dict[str, Request] = {}  # live (non-terminal) requests, in arrival order
        self._failures: list[Failure] = []
        # Whether codec lanes run beside the LM, and which lane can take a launch now (`schedule`'s argument:
        # each lane keeps one batch in flight). Without lanes both are always free.
        self.has_lanes = config.has_lanes
        self.lanes_free: dict[str, bool] = {URGENT: True, BACKGROUND: True}
        self.costs = CostModel()  # the runtime replaces it with figures measured at start-up
        # Slots of ended requests whose chunk is still in flight on a lane: released when it completes, so that
        # a new owner's reset can never race the old owner's codec launch.
        self._held_slots: dict[str, int] = {}

    # ---- commands --------------------------------------------------------------------------------------

    def add(self, request_id: str, voice: str, params: SamplingParams, arrival_ns: int,
            streaming: bool = True) -> Request:
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already live")
        request = Request.create(request_id, voice, params, self._tokenize, arrival_ns)
        request.is_streaming = streaming
        self.requests[request_id] = request
        return request

    def append_text(self, request_id: str, text: str, is_final: bool) -> None:
        request = self.requests[request_id]
        request.feed.append(text, is_final)
        if request.state is RequestState.STARVED and (request.num_text_pending or request.feed.is_final):
            request.transition(RequestState.RUNNING)

    def cancel(self, request_id: str) -> Request | None:
        """Hard stop: returns pages and slot at once. None when the request is unknown or already ended."""
        request = self.requests.get(request_id)
        if request is None:
            return None
        self._end(request, RequestState.CANCELLED)
        return request

    def fail(self, request: Request, code: str, message: str) -> None:
        if request.is_terminal:
            return
        request.error = message
        self._end(request, RequestState.FAILED)
        self._failures.append(Failure(request, code, message))

    def pop_failures(self) -> list[Failure]:
        failures, self._failures = self._failures, []
        return failures

    # ---- the policy ------------------------------------------------------------------------------------

    def schedule(self, now_ns: int, lanes_free: dict[str, bool] | None = None) -> StepPlan:
        """Decide the next step. Mutates request bookkeeping (pages, text cursor, chunk cursor). `lanes_free`:
        which codec lane can take a launch now (None: as last given)."""
        if lanes_free is not None:
            self.lanes_free = dict(lanes_free)
        plan = self.plan_step(now_ns)
        if self.config.max_admission_wait_ms is not None:
            self.refuse_overdue(now_ns)  # the streams this plan left waiting, not the ones it admits
        return plan

    def refuse_overdue(self, now_ns: int) -> None:
        """Fails (`server_busy`) every stream the step's plan left waiting that has waited for admission longer
        than `max_admission_wait_ms` since it could have been admitted: from its arrival, or, while its text does not
        allow admission yet (`admission_prompt` None), from the last step that found it so, less
        `admission_text_wait_ms` (never before its arrival)."""
        limit_ns = self.config.max_admission_wait_ms * 1e6
        counted_ns = self.config.admission_text_wait_ms * 1e6
        for request in self.waiting():
            if not request.is_streaming:
                continue  # HTTP speech and batch jobs have no first-audio deadline; the gateway bounds them
            if self.admission_prompt(request) is None:
                request.text_wait_ns = now_ns
                continue
            since_ns = request.arrival_ns
            if request.text_wait_ns is not None:
                since_ns = max(since_ns, request.text_wait_ns - counted_ns)
            if now_ns - since_ns > limit_ns:
                waited_ms = (now_ns - since_ns) / 1e6
                self.fail(request, ServerBusyError.code, f"server at capacity: not started within {waited_ms:.0f} ms "
                          f"(max admission wait {self.config.max_admission_wait_ms:g} ms); retry later")

    @abc.abstractmethod
    def plan_step(self, now_ns: int) -> StepPlan:
        """The policy's decision for this step (`schedule` is its entry point)."""

    # ---- results ---------------------------------------------------------------------------------------

    def update_lm(self, plan: StepPlan, codes: list[tuple[int, ...]]) -> None:
        """`codes[i]` is the frame generated for `plan.lm_requests[i]`. The engine calls this a step late (the
        next step is planned and running by then): positions and text were booked when the step was planned,
        and a request whose generation ended meanwhile (its previous frame stopped it) drops the frame."""
        requests = plan.lm_requests
        assert len(codes) == len(requests), (len(codes), len(requests))
        text_index = [r.prompt.num_text_tokens_used for r in plan.prefill] + [d.text_index for d in plan.decode]
        finished, cancelled, failed = RequestState.FINISHED, RequestState.CANCELLED, RequestState.FAILED  # TERMINAL
        for request, frame, consumed in zip(requests, codes, text_index):
            in_flight = request.num_frames_in_flight
            request.num_frames_in_flight = in_flight - 1 if in_flight > 0 else 0
            state = request.state
            if state is finished or state is cancelled or state is failed or request.finish_reason is not None:
                continue  # cancelled, or stopped by its previous frame (`is_terminal`, `is_generation_done`)
            request.frames.append(tuple(frame))
            request.frame_text_index.append(consumed)
            reason = self._stop_reason(request, frame[0])
            if reason is not None:
                if reason == "stop":
                    request.frames.pop()  # the EOS frame is a marker, not audio
                    request.frame_text_index.pop()
                self._end_generation(request, reason)

    def complete_codec(self, job: CodecJob, now_ns: int) -> None:
        """A chunk's launch completed (in the time-shared loop: in the same step it was cut)."""
        request = job.request
        request.num_chunks_in_flight = max(0, request.num_chunks_in_flight - 1)
        if request.is_terminal:
            held = self._held_slots.pop(request.request_id, None)
            if held is not None and request.num_chunks_in_flight == 0:
                self.slots.release(held)
            elif held is not None:
                self._held_slots[request.request_id] = held
            return
        if request.first_chunk_ns is None:
            request.first_chunk_ns = now_ns
        if job.is_last:
            self._end(request, RequestState.FINISHED)

    # ---- mechanics shared by policies --------------------------------------------------------------------

    def running(self) -> list[Request]:
        return [r for r in self.requests.values() if r.state in (RequestState.RUNNING, RequestState.STARVED)]

    def waiting(self) -> list[Request]:
        return [r for r in self.requests.values() if r.state is RequestState.WAITING]

    def running_and_waiting(self) -> tuple[list[Request], list[Request]]:
        """`running()` and `waiting()` in one pass over the live requests."""
        running, waiting = [], []
        is_running, is_starved, is_waiting = RequestState.RUNNING, RequestState.STARVED, RequestState.WAITING
        for r in self.requests.values():
            state = r.state
            if state is is_running or state is is_starved:
                running.append(r)
            elif state is is_waiting:
                waiting.append(r)
        return running, waiting

    def try_admit(self, request: Request, token_budget: int) -> int:
        """Moves a waiting request to RUNNING when it has text and pages and a slot are free. Returns the
        prompt tokens it takes (0 when it was not admitted this step)."""
        feed = request.feed
        if not feed.token_ids and not feed.is_final:
            return 0
        if not self.spec.consumes_text_incrementally and not feed.is_final:
            return 0  # segment programs read the whole text in the prompt
        if not feed.token_ids:  # final and empty: nothing to say
            self._end_generation(request, "empty")
            return 0
        if request.prompt is None:
            request.prompt = self._build_prompt(request)
        num_tokens = len(request.prompt) + self.spec.frame_tokens_after_prompt()
        num_pages = self.pages.pages_for_tokens(num_tokens)
        if num_tokens > self.config.max_seq_len or num_pages > self.pages.num_pages:
            self.fail(request, "capacity", f"prompt of {len(request.prompt)} tokens exceeds the KV capacity "
                      f"(max_seq_len {self.config.max_seq_len}, {self.pages.num_pages} pages of {self.pages.page_size})")
            return 0
        # a prompt over the per-step budget is admitted alone, when the budget is still untouched
        over_budget = num_tokens > token_budget and token_budget < self.config.max_prefill_tokens
        if over_budget or not self.pages.can_allocate(num_pages) or not self.slots.num_free:
            return 0
        request.pages = self.pages.allocate(num_pages)
        request.slot = self.slots.allocate()
        request.transition(RequestState.RUNNING)
        request.num_tokens = num_tokens  # booked now (the prompt and its first frame): the next step decodes after
        request.num_text_consumed = request.prompt.num_text_tokens_used
        request.num_frames_in_flight += 1
        return num_tokens

    def next_decode(self, request: Request) -> DecodeItem | None:
        """The decode input of a running request, growing its pages; None when it must wait this step
        (starved of text, or no page free)."""
        spec = self.spec
        per_frame = spec.lm_tokens_per_frame
        num_tokens = request.num_tokens
        if num_tokens + per_frame > self.config.max_seq_len:
            self._end_generation(request, "max_frames")
            return None
        num_text_pending = len(request.feed.token_ids) - request.num_text_consumed  # `num_text_pending`
        if spec.consumes_text_incrementally and num_text_pending == 0 and not request.feed.is_final:
            if request.state is RequestState.RUNNING:
                request.transition(RequestState.STARVED)
            return None
        if request.state is RequestState.STARVED:
            request.transition(RequestState.RUNNING)
        pages = self.pages
        more = pages.pages_for_tokens(num_tokens + per_frame) - len(request.pages)
        if more > 0:
            if not pages.can_allocate(more):
                return None
            request.pages.extend(pages.allocate(more))
        text_id = spec.text_pad_id
        if spec.consumes_text_incrementally:
            if num_text_pending > 0:
                text_id = request.feed.token_ids[request.num_text_consumed]
                request.num_text_consumed += 1
            elif spec.text_eos_id is not None and not request.is_text_eos_fed:
                # the text is final and used up (else it starved above): end-of-text once, then pads
                text_id = spec.text_eos_id
                request.is_text_eos_fed = True
        item = DecodeItem(request, text_id, num_tokens, request.num_text_consumed)
        request.num_tokens = num_tokens + per_frame
        request.num_frames_in_flight += 1
        return item

    def next_chunk(self, request: Request, early: bool = False) -> CodecJob | None:
        """The next codec chunk of a request when it is ready (frames cut in order, one at a time), cut
        (`chunk_shape` is the rule). `early`: a policy that sees the chunk would be late if it waited for all
        its frames takes what there is now, cut to a size the codec runs as a graph (never last: the codec
        state must stay exact)."""
        shape = self.chunk_shape(request, early)
        if shape is None:
            return None
        num_frames, is_last, is_early = shape
        job = CodecJob(request, request.num_frames_chunked, num_frames, request.num_chunks, is_last,
                       is_early=is_early)
        self._book_chunk(job)
        return job

    def chunk_shape(self, request: Request, early: bool = False) -> tuple[int, bool, bool] | None:
        """(frames, is last, is early) of the chunk `next_chunk` would cut now, None when none is ready; reads
        the request and changes nothing."""
        if request.state not in (RequestState.RUNNING, RequestState.STARVED, RequestState.DRAINING):
            return None
        if request.num_chunks_in_flight:  # chunks of one request decode in order, one at a time
            return None
        available = request.num_frames - request.num_frames_chunked
        need = self.spec.next_chunk_size(request.num_frames_chunked)
        if request.is_generation_done:
            is_last = available <= need
            return (available if is_last else need), is_last, False
        if available >= need:
            return need, False, False
        if (early or self._cuts_starved_at_once(request)) and available > 0:
            # the text ran out: decode what there is now rather than hold it until more text arrives, cut to a
            # size the codec runs as a graph (not last: no padding possible, the codec state must stay exact)
            num_frames = self.spec.largest_codec_size(available)
            return num_frames, False, early and num_frames < need
        return None

    @staticmethod
    def _book_chunk(job: CodecJob) -> None:
        request = job.request
        request.num_frames_chunked += job.num_frames
        request.num_chunks += 1
        request.num_chunks_in_flight += 1

    def _cuts_starved_at_once(self, request: Request) -> bool:
        """Whether `next_chunk` cuts a starved request's frames short as soon as it starves. The rule here
        (policies that do not know when the listener needs the audio): yes. A policy with deadlines holds
        them (`holds_starved_frames`) and cuts them early when the next chunk would otherwise be late: text
        streamed in slower than the LM consumes it starves a request after nearly every frame, and cutting
        each time would make chunks of one or two frames (each codec launch recomputes its left context)."""
        return request.state is RequestState.STARVED and not self.holds_starved_frames(request)

    def holds_starved_frames(self, request: Request) -> bool:
        """Whether the policy keeps a starved request's frames until its deadline calls for them (see
        `_cuts_starved_at_once`; `starved_cut_ns` says when). No here."""
        return False

    def starved_cut_ns(self, request: Request) -> float | None:
        """When the held frames of a starved request must be cut (`holds_starved_frames`), on the scheduler's
        clock; None when they are not held."""
        return None

    def wake_ns(self) -> float | None:
        """The earliest time some held frames must be cut (`starved_cut_ns`), so that an engine waiting for
        commands wakes for it; None when nothing is held."""
        times = [t for r in self.requests.values()
                 if r.state is RequestState.STARVED and r.num_frames > r.num_frames_chunked
                 and not r.num_chunks_in_flight and (t := self.starved_cut_ns(r)) is not None]
        return min(times) if times else None

    def admission_prompt(self, request: Request) -> PromptTokens | None:
        """The prompt a waiting request would be prefilled with (built once, as `try_admit` does); None while
        its text does not allow admission yet (no token, or a segment program before the final text)."""
        feed = request.feed
        if not feed.token_ids or (not self.spec.consumes_text_incrementally and not feed.is_final):
            return None
        if request.prompt is None:
            request.prompt = self._build_prompt(request)
        return request.prompt

    def admit(self, plan: StepPlan, candidates: Iterable[Request], num_running: int,
              may_admit: Callable[[Request, int], bool] | None = None) -> None:
        """Prefills `candidates` in order (`try_admit`) while the live requests stay under their cap
        (`SchedulerConfig.live_cap`), the step's batch has room and its prompt-token budget lasts.
        `may_admit(request, prefill_tokens_so_far)` lets a policy hold one back this step."""
        budget = self.config.max_prefill_tokens
        for request in candidates:
            if (num_running + len(plan.prefill) >= self.config.live_cap
                    or len(plan.prefill) >= self.config.max_batch_size):
                break
            if may_admit is not None and not may_admit(request, self.config.max_prefill_tokens - budget):
                continue
            taken = self.try_admit(request, budget)
            if taken:
                budget -= taken
                plan.prefill.append(request)

    def decode(self, plan: StepPlan, running: list[Request]) -> None:
        """One frame for every running request that can take one (`next_decode`), in the order of `running`
        until the step's batch is full (`max_batch_size`, with this step's prefills). When nothing at all can
        run because every candidate waits for a page and none is free, the newest is failed (never a hang)."""
        blocked = []
        room = self.config.max_batch_size - len(plan.prefill)
        items = plan.decode
        for request in running:
            if len(items) >= room:
                break  # the rest decode in a later step
            if request.num_frames_in_flight and self._has_all_frames_planned(request):
                continue  # its last frame is in flight: the stop comes with it
            item = self.next_decode(request)
            if item is not None:
                items.append(item)
            elif request.state is RequestState.RUNNING:
                blocked.append(request)  # waits for a page
        if blocked and not plan.prefill and not plan.decode and not self.pages.can_allocate(1):
            self.fail_one_blocked_on_pages(blocked)

    def is_lane_free(self, lane: str) -> bool:
        """Whether a chunk may be cut for `lane` now: always without lanes, else while it has no batch in flight."""
        return not self.has_lanes or self.lanes_free[lane]

    def peek_chunk(self, request: Request, early: bool = False) -> CodecJob | None:
        """The chunk `next_chunk` would cut now, without cutting it (a policy that may leave a ready chunk for
        a later step looks first; `cut` takes it)."""
        shape = self.chunk_shape(request, early)
        if shape is None:
            return None
        return CodecJob(request, request.num_frames_chunked, shape[0], request.num_chunks, shape[1],
                        is_early=shape[2])

    def ready_chunks(self) -> list[CodecJob]:
        """Every live request's next chunk that is ready now, uncut, in arrival order (`peek_chunk`)."""
        jobs = []
        next_size = self.spec.next_chunk_size
        running, starved, draining = RequestState.RUNNING, RequestState.STARVED, RequestState.DRAINING
        for request in self.requests.values():
            state = request.state
            # the commonest answers first (what `chunk_shape` says for them; every live request is asked every
            # step): a waiting one, one with a chunk in flight, a running one still short of its next chunk
            if state is not running and state is not starved and state is not draining:
                continue
            if request.num_chunks_in_flight:
                continue
            if (state is running and request.finish_reason is None
                    and request.num_frames - request.num_frames_chunked < next_size(request.num_frames_chunked)):
                continue
            job = self.peek_chunk(request)
            if job is not None:
                jobs.append(job)
        return jobs

    def cut(self, job: CodecJob, lane: str | None = None) -> CodecJob:
        """Cuts a chunk seen by `peek_chunk` (nothing of its request changed since), keeping the policy's
        deadline and lane (`lane`: this one instead)."""
        request = job.request
        shape = self.chunk_shape(request, job.is_early)
        assert shape is not None and (request.num_frames_chunked, request.num_chunks) + shape == (
            job.first_frame, job.chunk_index, job.num_frames, job.is_last, job.is_early), (job, shape)
        if lane is not None and lane != job.lane:
            job = CodecJob(request, job.first_frame, job.num_frames, job.chunk_index, job.is_last,
                           job.deadline_ns, lane, job.is_early)
        self._book_chunk(job)
        return job

    def fail_one_blocked_on_pages(self, blocked: list[Request]) -> None:
        """Called when no LM work could run because every candidate waits for a page: the newest one is
        failed (its pages return), so the others can go on. Never a crash, never a silent hang."""
        victim = max(blocked, key=lambda r: r.arrival_ns)
        self.fail(victim, "capacity", f"KV cache exhausted ({self.pages.num_pages} pages of "
                  f"{self.pages.page_size} tokens all in use); request stopped after {victim.num_frames} frames")

    def has_work(self, now_ns: float | None = None) -> bool:
        """False when every live request waits for text (a starved one only has work while it holds frames
        not yet cut into a chunk, and, where the policy holds them, once they are due to be cut by `now_ns`:
        None counts them as due)."""
        for r in self.requests.values():
            if r.state is RequestState.STARVED:
                if r.num_frames > r.num_frames_chunked:
                    cut_ns = self.starved_cut_ns(r)
                    if cut_ns is None or now_ns is None or cut_ns <= now_ns or r.num_chunks_in_flight:
                        return True
            elif r.state is not RequestState.WAITING or r.feed.token_ids or r.feed.is_final:
                return True
        return False

    def check_integrity(self) -> None:
        self.pages.check_integrity({r.request_id: r.pages for r in self.requests.values()})
        self.slots.check_integrity({r.slot for r in self.requests.values() if r.slot is not None}
                                   | set(self._held_slots.values()))

    # ---- internals ---------------------------------------------------------------------------------------

    def _has_all_frames_planned(self, request: Request) -> bool:
        """Whether steps in flight already make every frame a length rule allows (pinned or max frames, or the
        sequence length): one more would only be dropped, or end the generation before the frame in flight
        lands (a stop by EOS or by the text's length cannot be known ahead)."""
        if request.num_frames_in_flight == 0:
            return False
        limit = request.params.num_frames or request.params.max_frames or self.spec.default_max_frames
        return (request.num_frames + request.num_frames_in_flight >= limit
                or request.num_tokens + self.spec.lm_tokens_per_frame > self.config.max_seq_len)

    def _stop_reason(self, request: Request, code0: int) -> str | None:
        pinned = request.params.num_frames
        if pinned is not None:
            return "pinned" if request.num_frames >= pinned else None
        if self.spec.eos_code is not None and code0 == self.spec.eos_code:
            return "stop"
        fptt = self.spec.frames_per_text_token
        feed = request.feed
        if fptt is not None and feed.is_final and request.num_text_pending == 0:
            if request.num_frames >= max(1, math.ceil(fptt * len(feed.token_ids))):
                return "length"
        max_frames = request.params.max_frames or self.spec.default_max_frames
        if request.num_frames >= max_frames:
            return "max_frames"
        return None

    def _end_generation(self, request: Request, reason: str) -> None:
        """Generation is over: KV pages return now; the slot stays until the last chunk is decoded."""
        request.finish_reason = reason
        self.pages.release(request.pages)
        request.pages = []
        request.transition(RequestState.DRAINING)

    def _end(self, request: Request, state: RequestState) -> None:
        if request.pages:
            self.pages.release(request.pages)
            request.pages = []
        if request.slot is not None:
            if request.num_chunks_in_flight:
                self._held_slots[request.request_id] = request.slot  # returns when its launch completes
            else:
                self.slots.release(request.slot)
            request.slot = None
        request.transition(state)
        self.requests.pop(request.request_id, None)
