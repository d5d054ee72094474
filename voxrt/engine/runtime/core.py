"""The in-process engine: scheduler + runner + the step loop body, and the commands that feed it.

The loop body reads schedule -> run -> update: `plan = scheduler.schedule(now, codec.lanes_free())`, the
plan's chunks to the codec executor and its LM step to the runner, then `scheduler.update_lm` and the
finished codec launches back to the scheduler. The LM step is asynchronous: a step launches its LM work and
then updates the scheduler with the PREVIOUS step's frames (which the GPU finished meanwhile, or finishes
while this step's work is already queued behind it), so the GPU never waits for the host to plan; the
scheduler plans with frames one step behind the GPU (positions and text are booked when planned). Where
chunks run (after the LM step, or on lanes beside it) is the executor's business (runtime/executor.py), not a
branch of the loop. An exception in a step fails the requests of that step (their pages and slots return)
and the engine goes on.
`voxrt.engine.process` runs this in its own process; tests and benchmarks may drive it directly.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import torch

from voxrt.engine.errors import InvalidParamsError, UnknownVoiceError
from voxrt.engine.messages import (AudioChunk, EngineConfig, EngineLoad, EngineMessage, EngineStats, ModelInfo,
                                   RequestFailed, SubmitRequest, admission_wait_ms,
                                   late_chunk_hold_ms)
from voxrt.engine.params import instructions_problem, max_instructions_bytes
from voxrt.engine.runtime.attention import bytes_per_page
from voxrt.engine.runtime.executor import Finished, LaneExecutor, make_executor
from voxrt.engine.runtime.lanes import LM, Lanes, make_lanes
from voxrt.engine.runtime.probe import measure_costs
from voxrt.engine.runtime.program import ModelProgram, checked_spec
from voxrt.engine.runtime.runner import ModelRunner, RunnerConfig, resolve_backend
from voxrt.engine.runtime.trace import Tracer
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.load import least_slack_ms
from voxrt.engine.sched.pages import PagePool, SlotPool, default_num_slots
from voxrt.engine.sched.plan import BACKGROUND, URGENT, CodecJob
from voxrt.engine.sched.policies import policy_class
from voxrt.engine.sched.request import PlaybackAnchor, Request
from voxrt.engine.sched.scheduler import SchedulerConfig
from voxrt.engine.sched.sm_modes import AdaptiveSmMode, CodecIdleLmMode, SmModeSignals
from voxrt.gcpause import GcPauses
from voxrt.engine.runtime import cublas, knobs
from voxrt.models.registry import build_program

log = logging.getLogger("voxrt.engine")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_CPU_KV_BUDGET_BYTES = 256 << 20


def resolve_device(name: str) -> torch.device:
    """"auto" (cuda when available, else the CPU), "auto:N" (cuda:N when CUDA is available, else the CPU: replica
    N of `--dp-size`, replicas.py), "cpu", "cuda", "cuda:N". A GPU the machine lacks is an error naming the
    devices there are (torch itself would fail later, on the first tensor placed there)."""
    if name == "auto" or name.startswith("auto:"):
        if not torch.cuda.is_available():
            return torch.device("cpu")
        name = "cuda" + name[len("auto"):]
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise InvalidParamsError(f"unknown device {name!r}: use auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidParamsError(f"device {name!r} requested but no CUDA device is available")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise InvalidParamsError(f"device {name!r} requested but this machine has {count} CUDA device(s) "
                                     f"(cuda:0..cuda:{count - 1}); --dp-size N needs N GPUs")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise InvalidParamsError(f"unknown dtype {name!r}; choose auto or one of {sorted(_DTYPES)}")
    return _DTYPES[name]


class _Marks:
    """Host time of a step's phases with the trace on: `mark(name)` ends the phase `name` (since the previous
    mark); `add(name, ns)` records a span measured inside another phase."""

    __slots__ = ("start_ns", "last_ns", "spans")

    def __init__(self) -> None:
        self.start_ns = self.last_ns = time.perf_counter_ns()
        self.spans: dict[str, int] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter_ns()
        self.spans[name] = self.spans.get(name, 0) + now - self.last_ns
        self.last_ns = now

    def add(self, name: str, ns: int) -> None:
        self.spans[name] = self.spans.get(name, 0) + ns

    def phases_ms(self) -> dict[str, float]:
        return {f"{name}_ms": round(ns / 1e6, 3) for name, ns in self.spans.items()}


class _NoMarks:
    """`_Marks` when the trace is off: nothing measured."""

    def mark(self, name: str) -> None:
        pass

    def add(self, name: str, ns: int) -> None:
        pass


_NO_MARKS = _NoMarks()


# The GPU memory from which the LM decodes up to 256 requests a step by default (else 128): on an 80 GB H100 with
# the other defaults, 256 held 100.0% of LibriTTS requests within the SLO at 144 req/s where 128 held 86.1%, and
# 90.3% at 160 (bench/results/2026-12-07-h100-batch256/); below 64 GiB it is not measured, so 128 stays there.
BATCH_256_MIN_BYTES = 64 * 2**30


def batch_for_memory(total_bytes: int) -> int:
    """The default `max_batch_size` of a GPU with `total_bytes` of memory (BATCH_256_MIN_BYTES)."""
    return 256 if total_bytes >= BATCH_256_MIN_BYTES else 128


def default_max_batch_size(device: torch.device) -> int:
    """On CUDA 256 on GPUs of 64 GiB or more, else 128 (`batch_for_memory`; the frame's cost grows slowly with the
    batch: 5.96 ms at 128 against 7.75 at 256 on an H100, 1.54x the frames a second, and the LM's batch was what
    capped capacity at the knee); 64 on the CPU."""
    if device.type != "cuda":
        return 64
    return batch_for_memory(torch.cuda.get_device_properties(device).total_memory)


# The GPU memory from which a codec launch takes up to 32 chunks by default (else 16): the codec's CUDA graphs grow
# with the launch (batch x frames) on each lane. An 80 GB H100 with max batch 128 held 32 (and not 64); 16 is what
# every GPU ran before (bench/results/2026-12-06-h100-hold-codec-batch/).
CODEC_BATCH_32_MIN_BYTES = 64 * 2**30


def codec_batch_for_memory(total_bytes: int) -> int:
    """The default `max_codec_batch` of a GPU with `total_bytes` of memory (CODEC_BATCH_32_MIN_BYTES)."""
    return 32 if total_bytes >= CODEC_BATCH_32_MIN_BYTES else 16


def default_max_codec_batch(device: torch.device) -> int:
    """32 chunks a codec launch (SchedulerConfig: why), or 16 on a GPU under 64 GiB; 32 on the CPU (no graphs)."""
    if device.type != "cuda":
        return 32
    return codec_batch_for_memory(torch.cuda.get_device_properties(device).total_memory)


class EngineCore:
    def __init__(self, config: EngineConfig, program: ModelProgram | None = None) -> None:
        device = resolve_device(config.device)
        if config.max_batch_size is None:  # the device's default (messages.py)
            config = dataclasses.replace(config, max_batch_size=default_max_batch_size(device))
        elif config.max_batch_size < 1:
            raise InvalidParamsError(f"max_batch_size must be >= 1, got {config.max_batch_size}")
        if config.max_codec_batch is None:  # the device's default (messages.py)
            config = dataclasses.replace(config, max_codec_batch=default_max_codec_batch(device))
        elif config.max_codec_batch < 1:
            raise InvalidParamsError(f"max_codec_batch must be >= 1, got {config.max_codec_batch}")
        self.config = config
        if device.type == "cuda" and device.index is not None:
            # a replica on cuda:i (--dp-size): streams, graphs and workspaces made without a device (graphs.py's
            # side stream, the codec's capture stream, FlashInfer) go to the current device, cuda:0 by default
            torch.cuda.set_device(device)
        dtype = resolve_dtype(config.dtype, device)
        program = program if program is not None else build_program(config.model, config.checkpoint)
        if config.first_chunk_frames is not None:
            try:
                program.set_first_chunk_frames(config.first_chunk_frames)
            except ValueError as exc:
                raise InvalidParamsError(str(exc)) from None
            log.info("first audio chunk: %d frames (then doubling up to %d)", program.first_chunk_frames,
                     program.chunk_frames)
        backend = resolve_backend(config.attention_backend, device)
        geom = program.lm_geometry
        page_bytes = bytes_per_page(geom.num_layers, config.page_size, geom.num_kv_heads, geom.head_dim, dtype)
        # draining requests (generation over, chunks still to decode) keep their codec slot
        if config.codec_slots is not None and config.codec_slots < 1:
            raise InvalidParamsError(f"codec_slots must be >= 1, got {config.codec_slots}")
        num_slots = config.codec_slots or default_num_slots(config.max_batch_size)
        policy = policy_class(config.scheduler_type)  # an unknown name fails before any GPU work
        max_live = config.max_live_requests or policy.default_live_per_batch * config.max_batch_size
        if not config.max_batch_size <= max_live <= num_slots:
            raise InvalidParamsError(f"max_live_requests must be between max_batch_size ({config.max_batch_size}) "
                                     f"and the codec slots ({num_slots}), got {max_live}")
        self.async_lm = device.type == "cuda" if config.async_lm is None else config.async_lm
        num_pages = config.num_pages or self._default_num_pages(config, device, page_bytes, max_live)
        cost_overrides = dict(config.costs)
        unknown = sorted(set(cost_overrides) - set(CostModel.__dataclass_fields__))
        if unknown:
            raise InvalidParamsError(f"unknown cost names {unknown}; known: {sorted(CostModel.__dataclass_fields__)}")
        self.lanes, self.sm_chooser = _lanes_and_modes(config, device, program.codec_sm_share)
        log.info("%s", self.lanes.describe())
        if device.type == "cuda":
            log.info("%s", cublas.describe())
            targets = {lane: self.lanes.blas_sm_count(lane) for lane in self.lanes.sm_counts}
            if any(targets.values()):
                log.info("cuBLAS kernels chosen for each lane's SMs (VOXRT_BLAS_SM_TARGET=lanes): %s",
                         ", ".join(f"{lane} {count}" for lane, count in targets.items()))
            if knobs.paged_decode_rope():
                log.info("the talker's rotary runs inside the paged decode kernel (VOXRT_PAGED_DECODE_ROPE=on)")
            if knobs.predictor_qkv_table():
                log.info("the code predictor's layer-0 q/k/v of steps >= 1 come from a table (VOXRT_PREDICTOR_QKV_TABLE=on)")
        self.runner = ModelRunner(program, RunnerConfig(
            device=device, dtype=dtype, attention_backend=backend, use_cuda_graphs=config.use_cuda_graphs,
            num_pages=num_pages, page_size=config.page_size, num_slots=num_slots,
            max_batch_size=config.max_batch_size, max_seq_len=config.max_seq_len,
            max_codec_batch=config.max_codec_batch, frame_path=config.frame_path,
            mixed_prefill=device.type == "cuda" if config.mixed_prefill is None else config.mixed_prefill),
            self.lanes)
        self.program = self.runner.program
        spec = checked_spec(program)
        admission_wait = admission_wait_ms(config.max_admission_wait_ms, device.type)
        late_hold = late_chunk_hold_ms(config.late_chunk_hold_ms, device.type, config.scheduler_type)
        self.scheduler = policy(
            spec, PagePool(num_pages, config.page_size), SlotPool(num_slots), program.build_prompt,
            program.tokenize, SchedulerConfig(config.max_batch_size, config.max_seq_len, config.max_prefill_tokens,
                                              max_codec_batch=config.max_codec_batch,
                                              deadline_startup_ms=config.deadline_startup_ms,
                                              deadline_margin_ms=config.deadline_margin_ms,
                                              urgent_ms=config.urgent_ms,
                                              max_prefill_deferral_ms=config.max_prefill_deferral_ms,
                                              late_start_demotion_ms=config.late_start_demotion_ms,
                                              max_admission_wait_ms=admission_wait,
                                              admission_text_wait_ms=config.admission_text_wait_ms,
                                              late_chunk_hold_ms=late_hold,
                                              dec_batch=config.dec_batch, has_lanes=self.lanes.enabled,
                                              max_live_requests=max_live))
        self._cost_overrides = cost_overrides
        if cost_overrides:
            self.scheduler.costs = dataclasses.replace(self.scheduler.costs, **cost_overrides)
        tracer = Tracer(config.trace_dir) if config.trace_dir else None
        # `request` records go to `request_tracer`; every other kind to `tracer`, None with
        # `trace_requests_only` (then a step costs the host nothing for the trace, and no GPU timing is taken)
        self.request_tracer = tracer
        self.tracer = None if config.trace_requests_only else tracer
        self.gc_pauses = GcPauses().install() if self.tracer is not None else None  # gc_ms on each lm record
        self._last_lm_end = None  # with the trace on CUDA: the previous LM step's end event (GPU idle between them)
        self._lm_in_flight = None  # the LM launch whose frames the scheduler has not seen yet
        self._last_step_end_ns = None  # with the trace: when the previous step returned (perf_counter)
        self.codec = make_executor(self.runner, self._live, self.lanes.enabled, timing=self.tracer is not None)
        self.codec_launches: dict[str, int] = {}
        self.chunks_on_time = 0
        self.chunks_late = 0
        self.deferred_admissions = 0
        self.early_chunks = 0
        self.held_steps = 0
        self.sm_mode_switches = 0
        self.lm_steps_by_sm_mode = [0] * self.lanes.num_sm_modes  # LM steps launched in each SM mode
        self.decode_batch = 0  # requests the latest step decoded (the load report's)
        self.info = ModelInfo(  # the model's constants from its spec (checked_spec: the one source)
            name=program.name, sample_rate=spec.sample_rate, frame_rate_hz=spec.sample_rate / spec.samples_per_frame,
            samples_per_frame=spec.samples_per_frame, num_codebooks=spec.num_codebooks,
            chunk_frames=spec.chunk_frames, first_chunk_frames=spec.first_chunk_frames,
            voices=tuple(program.voices), default_voice=program.default_voice,
            consumes_text_incrementally=spec.consumes_text_incrementally, device=str(device),
            attention_backend=backend, use_cuda_graphs=self.runner.use_graphs, lanes=self.lanes.describe(),
            scheduler_type=config.scheduler_type, frame_path=self.runner.frame_path,
            accepts_instructions=program.accepts_instructions,
            max_instructions_bytes=max_instructions_bytes(config.max_seq_len) if program.accepts_instructions else 0,
            sampling_defaults=dict(program.sampling_defaults))
        self.num_steps = 0
        self.num_failed_steps = 0
        log.info("engine: model %s on %s (%s), attention %s, cuda graphs %s, %d KV pages of %d tokens, "
                 "%s LM loop, %s policy: up to %d live requests, %d decoded a step, up to %d chunks a codec launch",
                 program.name, device, str(dtype).removeprefix("torch."), backend, self.runner.use_graphs,
                 num_pages, config.page_size, "asynchronous" if self.async_lm else "synchronous",
                 config.scheduler_type, max_live, config.max_batch_size, config.max_codec_batch)
        if admission_wait is not None:
            log.info("overload protection: a stream not admitted within %g ms is refused (server_busy)%s; up to %g "
                     "ms of its wait for its first text count", admission_wait,
                     " (auto, on CUDA)" if config.max_admission_wait_ms == "auto" else "", config.admission_text_wait_ms)
        else:
            log.info("overload protection off: a stream waits for the engine as long as it takes%s",
                     " (auto, on the CPU)" if config.max_admission_wait_ms == "auto" else "")
        if config.late_start_demotion_ms > 0:
            if config.scheduler_type == "deadline":
                log.info("deadline policy: a stream past its first-audio deadline is admitted after those on time, "
                         "for up to %g ms", config.late_start_demotion_ms)
            else:  # only the deadline policy orders admission by first-audio deadline
                log.warning("late_start_demotion_ms=%g is ignored: it applies to the deadline policy, not %s",
                            config.late_start_demotion_ms, config.scheduler_type)
        is_auto_hold = config.late_chunk_hold_ms == "auto"
        if late_hold is not None:
            if config.scheduler_type == "deadline":
                log.info("deadline policy: no stream is admitted while half the chunks of the last %g ms were late%s",
                         late_hold, " (auto, on CUDA)" if is_auto_hold else "")
            else:  # only the deadline policy gives every chunk a deadline
                log.warning("late_chunk_hold_ms=%g is ignored: it applies to the deadline policy, not %s",
                            late_hold, config.scheduler_type)
        elif is_auto_hold and config.scheduler_type == "deadline":
            log.info("deadline policy: admission does not wait for late chunks (late-chunk hold auto, on the CPU)")

    @staticmethod
    def _default_num_pages(config: EngineConfig, device: torch.device, page_bytes: int, max_live: int) -> int:
        wanted = max_live * -(-config.max_seq_len // config.page_size)
        if device.type == "cuda":
            free_bytes, _ = torch.cuda.mem_get_info(device)
            budget = int(free_bytes * 0.5)
        else:
            budget = _CPU_KV_BUDGET_BYTES
        return max(16, min(wanted, budget // page_bytes))

    def warmup(self) -> None:
        self.runner.capture_graphs()
        if self.runner.use_graphs:
            measured = measure_costs(self.runner)
            self.scheduler.costs = dataclasses.replace(measured, **self._cost_overrides)
            log.info("costs (measured at start-up%s): %s", ", with overrides" if self._cost_overrides else "",
                     self.scheduler.costs)

    # ---- commands -------------------------------------------------------------------------------------------

    def submit(self, msg: SubmitRequest, now_ns: int | None = None) -> Request:
        if msg.voice not in self.info.voices:
            raise UnknownVoiceError(f"unknown voice {msg.voice!r}; available: {', '.join(self.info.voices)}")
        info = self.info
        problem = instructions_problem(msg.params.instructions, info.name, info.accepts_instructions,
                                       info.max_instructions_bytes)
        if problem is not None:
            raise InvalidParamsError(problem[1])
        request = self.scheduler.add(msg.request_id, msg.voice, msg.params, msg.arrival_ns or now_ns or time.monotonic_ns(),
                                     msg.streaming)
        if self.request_tracer is not None:
            now_ms = (now_ns or time.monotonic_ns()) / 1e6
            request.timeline = {"arrival_ms": request.arrival_ns / 1e6, "submit_ms": now_ms, "text_ms": None,
                                "final_ms": None, "appends": 0, "reports": 0}
            self._stamp_text(request, msg.text, msg.is_text_final, now_ms)
        if msg.text or msg.is_text_final:
            self.scheduler.append_text(msg.request_id, msg.text, msg.is_text_final)
        return request

    def append_text(self, request_id: str, text: str, is_final: bool) -> bool:
        """False when the request is no longer live (finished, cancelled or failed): text is dropped."""
        request = self.scheduler.requests.get(request_id)
        if request is None or request.feed.is_final:
            return False
        if request.timeline is not None:
            request.timeline["appends"] += 1
            self._stamp_text(request, text, is_final, time.monotonic_ns() / 1e6)
        self.scheduler.append_text(request_id, text, is_final)
        return True

    @staticmethod
    def _stamp_text(request: Request, text: str, is_final: bool, now_ms: float) -> None:
        timeline = request.timeline
        if text and timeline["text_ms"] is None:
            timeline["text_ms"] = now_ms
        if is_final:
            timeline["final_ms"] = now_ms

    def set_playback(self, request_id: str, played_samples: int, anchor_ns: int, is_stalled: bool = False) -> bool:
        request = self.scheduler.requests.get(request_id)
        if request is None:
            return False
        request.playback = PlaybackAnchor(played_samples, anchor_ns, is_stalled)
        if request.timeline is not None:
            request.timeline["reports"] += 1
        return True

    def cancel(self, request_id: str) -> bool:
        return self.scheduler.cancel(request_id) is not None

    def has_work(self) -> bool:
        """Live requests to serve, or codec launches still in flight or queued (a cancelled request's launch
        must still complete so that its slot returns)."""
        return (self.scheduler.has_work(time.monotonic_ns()) or self.codec.is_busy()
                or self._lm_in_flight is not None)

    def seconds_to_wake(self) -> float | None:
        """How long an engine without work may wait for commands before frames it holds must be cut
        (`Scheduler.wake_ns`); None when nothing is held."""
        wake_ns = self.scheduler.wake_ns()
        return None if wake_ns is None else max(0.0, (wake_ns - time.monotonic_ns()) / 1e9)

    # ---- the loop body -----------------------------------------------------------------------------------------

    def step(self, now_ns: int | None = None) -> list[EngineMessage]:
        """schedule -> run -> update. The LM step is launched first, then the codec executor takes the plan's
        chunks (lanes launch them beside it; the time-shared executor decodes them at `collect`, after it), and
        the previous LM step's frames update the scheduler while this one runs. The LM goes first because the
        host's codec launches (gathering codes, uploads, graph replays) take milliseconds: before the LM launch
        they left the LM lane idle between steps (issue 13: 71% of steps with two codec launches before them had
        a gap over 1 ms at 96 req/s). A codec job reads its codes from the host, so it does not depend on the
        LM step launched before it."""
        marks = _Marks() if self.tracer is not None else _NO_MARKS  # the host's phases of this step, traced
        events = self._deliver_all(self.codec.collect())
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        marks.mark("collect")
        plan = self.scheduler.schedule(now_ns, self.codec.lanes_free())
        self._on_plan(now_ns, plan)
        if self.sm_chooser is not None:
            self._choose_sm_mode(now_ns, plan)
        self.decode_batch = len(plan.decode)
        marks.mark("schedule")
        launched = self._launch_lm(plan) if plan.prefill or plan.decode else None
        marks.mark("launch_lm")
        self.codec.submit(plan.codec)
        marks.mark("submit_codec")
        previous, self._lm_in_flight = self._lm_in_flight, launched
        if previous is not None:
            self._finish_lm(previous, marks)
        if not self.async_lm and launched is not None:  # the synchronous loop: this step's frames first
            self._lm_in_flight = None
            self._finish_lm(launched, marks)
        if previous is None and launched is None:  # nothing for the LM: wait for a launch to finish, not spin
            self.codec.wait()
        marks.mark("update_lm")
        events += self._deliver_all(self.codec.collect())
        if self.tracer is not None:
            marks.mark("collect_end")
            self._trace_step(marks)
        for failure in self.scheduler.pop_failures():
            events.append(RequestFailed(failure.request.request_id, failure.code, failure.message))
        self.num_steps += 1
        return events

    def _choose_sm_mode(self, now_ns: int, plan) -> None:
        """Adaptive SM modes: the split for this step's LM work and the next background launch."""
        assert isinstance(self.codec, LaneExecutor)  # SM modes exist only with lanes
        # the backlog scans every live request: only for a chooser that reads it
        waiting = self.codec.num_background_queued + sum(1 for job in self.scheduler.ready_chunks()
                                                         if job.request.is_streaming) \
            if getattr(self.sm_chooser, "reads_backlog", True) else 0
        signals = SmModeSignals(now_ns, background_waiting=waiting,
                                background_in_flight=self.codec.background_in_flight,
                                urgent_continuations=sum(1 for job in plan.codec
                                                         if job.lane == URGENT and job.chunk_index > 0),
                                background_planned=sum(1 for job in plan.codec if job.lane == BACKGROUND))
        mode = self.sm_chooser.choose(signals)
        if self.lanes.set_mode(mode):
            self.sm_mode_switches += 1
            log.debug("SM mode %d: %s", mode, self.lanes.sm_counts)
            if self.tracer is not None:
                self.tracer.write(kind="sm_mode", t_ms=now_ns / 1e6, mode=mode, sm_counts=self.lanes.sm_counts,
                                  background_waiting=waiting, urgent_continuations=signals.urgent_continuations)

    def finish_lm(self) -> None:
        """Brings the scheduler up to date with the LM step in flight, if any (benchmarks and tests that drive
        stages directly after steps; the loop never needs it)."""
        previous, self._lm_in_flight = self._lm_in_flight, None
        if previous is not None:
            self._finish_lm(previous)

    def _launch_lm(self, plan):
        """Queues the plan's LM step (runner.launch_lm); None when the launch itself failed (its requests fail)."""
        try:
            launch = self.runner.launch_lm(plan, timing=self.tracer is not None)
            self.lm_steps_by_sm_mode[launch.sm_mode] += 1
            return launch
        except Exception:  # noqa: BLE001 (a step's failure is its requests' failure, not the engine's)
            self._lm_failed(plan)
            return None

    def _trace_step(self, marks: _Marks) -> None:
        """One `step` record: the host's ms in each phase of this step (`wait_lm`: waiting for the previous LM
        step's codes, inside `update_lm`), and `outside_ms`, the time since the previous step returned (the
        engine process delivering events, reading commands)."""
        outside = None if self._last_step_end_ns is None else (marks.start_ns - self._last_step_end_ns) / 1e6
        self._last_step_end_ns = marks.last_ns
        self.tracer.write(kind="step", t_ms=marks.start_ns / 1e6, outside_ms=outside and round(outside, 3),
                          live=len(self.scheduler.requests), **marks.phases_ms())

    def _finish_lm(self, launch, marks: _Marks | _NoMarks = _NO_MARKS) -> None:
        """A launched LM step's frames (waiting for them if the GPU is not done) update the scheduler."""
        plan = launch.plan
        try:
            wait_start = time.perf_counter_ns()
            codes = launch.wait()
            marks.add("wait_lm", time.perf_counter_ns() - wait_start)
        except Exception:  # noqa: BLE001 (an asynchronous failure of the step: its requests fail)
            self._lm_failed(plan)
            return
        self.scheduler.update_lm(plan, codes)
        if self.tracer is not None:
            gpu_ms, idle_ms = launch.gpu_ms(), None
            if launch.start_event is not None:
                # the LM lane's idle time since the previous LM step ended: the host's planning, uploads and
                # waits between steps, as the GPU saw them (issue 13 wants it near zero)
                if self._last_lm_end is not None:
                    idle_ms = self._last_lm_end.elapsed_time(launch.start_event)
                self._last_lm_end = launch.event
            gc_ms, gc_count = self.gc_pauses.take()  # the host's collections since the previous lm record
            self.tracer.write(kind="lm", t_ms=launch.launched_ns / 1e6,
                              ms=(time.monotonic_ns() - launch.launched_ns) / 1e6, gpu_ms=gpu_ms,
                              gpu_idle_ms=idle_ms, prefill=len(plan.prefill), decode=len(plan.decode),
                              prefill_tokens=sum(len(r.prompt) for r in plan.prefill if r.prompt is not None),
                              gc_ms=round(gc_ms, 3), gc_count=gc_count,
                              **({"sm_mode": launch.sm_mode} if self.lanes.num_sm_modes > 1 else {}))

    def _lm_failed(self, plan) -> None:
        log.exception("LM step failed; failing its %d requests", len(plan.lm_requests))
        self.num_failed_steps += 1
        for request in plan.lm_requests:
            self.scheduler.fail(request, "request_failed", "the engine step generating this request failed")

    def _live(self, jobs: list[CodecJob]) -> list[CodecJob]:
        """The jobs whose request is still live; the others are completed undecoded, so their slot returns."""
        live = []
        for job in jobs:
            if job.request.is_terminal:
                self.scheduler.complete_codec(job, time.monotonic_ns())
            else:
                live.append(job)
        return live

    def _deliver_all(self, finished: list[Finished]) -> list[EngineMessage]:
        events: list[EngineMessage] = []
        for launch in finished:
            if launch.audio is None:
                self._codec_failed(launch.jobs, launch.error)
            else:
                self._deliver(launch, events)
        return events

    def _deliver(self, launch: Finished, events: list[EngineMessage]) -> None:
        """A finished launch: chunk events (not for requests that ended meanwhile), counters, completion."""
        done_ns = time.monotonic_ns()
        self.codec_launches[launch.lane] = self.codec_launches.get(launch.lane, 0) + 1
        for job, pcm in zip(launch.jobs, launch.audio):
            if not job.request.is_terminal:
                events.append(self._chunk_event(job, pcm))
                self._count_timing(job, done_ns)
                if job.request.timeline is not None:
                    self._trace_request(job, launch, done_ns)
            self.scheduler.complete_codec(job, done_ns)  # the launch is over: a held slot returns
        self._trace_codec(launch.lane, launch.jobs, launch.launched_ns, done_ns, launch.gpu_ms)

    def _trace_request(self, job: CodecJob, launch: Finished, done_ns: int) -> None:
        """`--trace-dir`: the request's first chunk (launched, done, its deadline, its lane) into its timeline;
        at its last chunk, the whole timeline as one `request` record (cancelled and failed requests write
        none). Every time is ms on the engine's monotonic clock, as the other records'."""
        request, timeline = job.request, job.request.timeline
        if job.chunk_index == 0:
            timeline.update(first_launch_ms=launch.launched_ns / 1e6, first_done_ms=done_ns / 1e6,
                            first_deadline_ms=None if job.deadline_ns is None else job.deadline_ns / 1e6,
                            first_lane=launch.lane, first_frames=job.num_frames)
        if job.is_last:
            self.request_tracer.write(kind="request", id=request.request_id, frames=request.num_frames,
                                      chunks=request.num_chunks, text_tokens=len(request.feed.token_ids), **timeline)

    def _codec_failed(self, jobs: list[CodecJob], error: BaseException | None) -> None:
        log.error("codec launch failed; failing its %d requests", len(jobs), exc_info=error)
        self.num_failed_steps += 1
        now_ns = time.monotonic_ns()
        for job in jobs:
            self.scheduler.fail(job.request, "request_failed", "the codec step decoding this request failed")
            self.scheduler.complete_codec(job, now_ns)

    def _trace_codec(self, lane: str, jobs: list[CodecJob], launched_ns: int, done_ns: int,
                     gpu_ms: float | None) -> None:
        if self.tracer is None:
            return
        self.tracer.write(kind="codec", lane=lane, t_ms=launched_ns / 1e6, host_ms=(done_ns - launched_ns) / 1e6,
                          gpu_ms=gpu_ms, jobs=len(jobs), frames=[j.num_frames for j in jobs],
                          first=[j.chunk_index == 0 for j in jobs],
                          slack_ms=[None if j.deadline_ns is None else (j.deadline_ns - done_ns) / 1e6 for j in jobs])

    def _count_timing(self, job: CodecJob, done_ns: int) -> None:
        if job.deadline_ns is None:
            return
        if done_ns <= job.deadline_ns:
            self.chunks_on_time += 1
        else:
            self.chunks_late += 1

    def _on_plan(self, now_ns: int, plan) -> None:
        """Counts the step's deferred admissions and early chunks, and traces the decision."""
        self.deferred_admissions += sum(1 for r in plan.prefill if r.deferred_since_ns is not None)
        self.early_chunks += sum(1 for job in plan.codec if job.is_early)
        self.held_steps += self.scheduler.is_holding
        if self.request_tracer is not None:
            for request in plan.prefill:
                if request.timeline is not None:
                    request.timeline["admitted_ms"] = now_ns / 1e6
        if self.tracer is None:
            return
        waiting = self.scheduler.waiting()
        lanes: dict[str, int] = {}
        for job in plan.codec:
            lanes[job.lane] = lanes.get(job.lane, 0) + 1
        self.tracer.write(kind="plan", t_ms=now_ns / 1e6, prefill=len(plan.prefill), decode=len(plan.decode),
                          codec=lanes, early=sum(1 for job in plan.codec if job.is_early), waiting=len(waiting),
                          deferred=sum(1 for r in waiting if r.deferred_since_ns is not None),
                          held=self.scheduler.is_holding)

    def close(self) -> None:
        log.info("engine closing after %d steps: chunks on time %d, late %d, cut early %d; held steps %d%s",
                 self.num_steps, self.chunks_on_time, self.chunks_late, self.early_chunks, self.held_steps,
                 f"; LM steps by SM mode {self.lm_steps_by_sm_mode}, {self.sm_mode_switches} switches"
                 if self.lanes.num_sm_modes > 1 else "")
        if self.gc_pauses is not None:
            self.gc_pauses.uninstall()
        if self.request_tracer is not None:  # the one Tracer (`tracer` is it too, or None)
            self.request_tracer.close()

    def _chunk_event(self, job: CodecJob, pcm) -> AudioChunk:
        request = job.request
        # float32 already (CodecLaunch.results): `asarray` copies only another dtype; `tobytes` is the one copy
        return AudioChunk(request_id=request.request_id, chunk_index=job.chunk_index,
                          pcm=np.asarray(pcm, dtype="<f4").tobytes(),
                          sample_rate=self.info.sample_rate, first_frame=job.first_frame, num_frames=job.num_frames,
                          is_last=job.is_last, text_span=_text_span(request, job),
                          finish_reason=request.finish_reason if job.is_last else None)

    def stats(self, token: int = 0, check_pools: bool = True) -> EngineStats:
        """`check_pools=False`: skip the pools' integrity check (pool_ok is then True; the engine process
        reports its last idle check instead)."""
        sched = self.scheduler
        pool_ok = True
        if check_pools:
            try:
                sched.check_integrity()
            except AssertionError:
                log.exception("pool integrity check failed")
                pool_ok = False
        return EngineStats(token=token, num_waiting=len(sched.waiting()), num_running=len(sched.running()),
                           num_requests=len(sched.requests), num_pages_total=sched.pages.num_pages,
                           num_pages_free=sched.pages.num_free, num_slots_total=sched.slots.num_slots,
                           num_slots_free=sched.slots.num_free, num_steps=self.num_steps,
                           num_failed_steps=self.num_failed_steps, pool_ok=pool_ok,
                           codec_launches=tuple(sorted(self.codec_launches.items())),
                           chunks_on_time=self.chunks_on_time, chunks_late=self.chunks_late,
                           deferred_admissions=self.deferred_admissions, early_chunks=self.early_chunks,
                           sm_mode_switches=self.sm_mode_switches, held_steps=self.held_steps,
                           lm_steps_by_sm_mode=tuple(self.lm_steps_by_sm_mode))

    def load(self, now_ns: int | None = None) -> EngineLoad:
        """The load report the engine process pushes to its clients (sched/load.py): host-side counts and the
        generating streams' least slack, no device sync; O(live requests)."""
        sched = self.scheduler
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        config = sched.config
        return EngineLoad(num_waiting=len(sched.waiting()), num_running=len(sched.running()),
                          num_requests=len(sched.requests), decode_batch=self.decode_batch,
                          max_batch_size=config.max_batch_size, max_live_requests=config.live_cap,
                          min_slack_ms=least_slack_ms(sched.requests.values(), now_ns, sched.spec, sched.costs,
                                                      config.deadline_startup_ms, config.deadline_margin_ms),
                          num_pages_free=sched.pages.num_free, num_pages_total=sched.pages.num_pages,
                          num_slots_free=sched.slots.num_free, chunks_late=self.chunks_late, made_ns=now_ns)


def _lanes_and_modes(config: EngineConfig, device: torch.device,
                     codec_share: float = 0.5) -> tuple[Lanes, AdaptiveSmMode | CodecIdleLmMode | None]:
    """The lanes for `config.codec_sms` and `config.sm_mode`: one split for a mode index, every split for
    "adaptive" (with the rule that moves between them; one mode when green contexts are unavailable). No
    count: `codec_share` of the SMs (the program's `codec_sm_share`). `VOXRT_LM_LANE=idle`: one split, the LM's
    two placements beside it as two modes, `CodecIdleLmMode` choosing."""
    counts = config.codec_sms
    counts = [counts] if counts is None or isinstance(counts, int) else list(counts)
    if not counts:
        raise InvalidParamsError("codec_sms: give at least one SM count")
    if knobs.lm_lane() == "idle" and config.sm_mode == "adaptive":
        raise InvalidParamsError("VOXRT_LM_LANE=idle chooses the LM's placement each step beside one codec split; "
                                 "it does not combine with --sm-mode adaptive")
    if config.sm_mode == "adaptive":
        if len(counts) < 2 or None in counts:
            raise InvalidParamsError("--sm-mode adaptive needs at least two --sm-modes (codec-lane SM counts), "
                                     "e.g. --sm-modes 32,64")
        lanes = make_lanes(config.lanes, device, counts)
        if lanes.num_sm_modes < 2:
            log.info("adaptive SM modes need green contexts (lanes %s): one split", lanes.mode)
            return lanes, None
        return lanes, AdaptiveSmMode(counts, config.dec_batch)
    if not isinstance(config.sm_mode, int) or not 0 <= config.sm_mode < len(counts):
        raise InvalidParamsError(f"sm_mode must be an index into the SM modes {counts} or 'adaptive', "
                                 f"got {config.sm_mode!r}")
    lanes = make_lanes(config.lanes, device, counts[config.sm_mode], codec_share)
    if lanes.lm_lane == "idle" and lanes.num_sm_modes == 2:
        return lanes, CodecIdleLmMode(partition=0, whole=1)
    return lanes, None


def _text_span(request: Request, job: CodecJob) -> tuple[int, int] | None:
    """Characters of the text consumed by the LM while the chunk's frames were generated."""
    if job.num_frames == 0:
        return None
    first = request.frame_text_index[job.first_frame - 1] if job.first_frame > 0 else 0
    last = request.frame_text_index[job.first_frame + job.num_frames - 1]
    spans = request.feed.token_spans
    if last <= first or last > len(spans):
        return None
    return spans[first][0], spans[last - 1][1]
