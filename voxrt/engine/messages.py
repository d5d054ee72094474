"""Every record that crosses the boundary between the gateway (or any client) and the engine process.

They travel pickled over a `multiprocessing` pipe, so they are plain frozen dataclasses of builtins and
numpy-free bytes. No torch here: the gateway imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from voxrt.engine.params import SamplingParams


# The overload bound `max_admission_wait_ms="auto"` gives on CUDA: half the 200 ms first-audio SLO, so that a
# stream admitted just inside it can still make its first audio. Chosen on an H100 (bench/results/
# 2026-12-06-h100-overload/): past the knee it held 97.8 / 90.3 / 76.1% at 116 / 124 / 132 req/s with the deadline
# policy against 73.2 / 35.2 (120) / 31.1 (128) without, and 91.1 / 87.4% at 72 / 80 req/s in the time-shared loop
# against 26.8 / 6.4; 150 ms lost to it at every rate, 60 ms refused more and held less.
ADMISSION_WAIT_MS = 100.0


# The deadline policy's overload detection `late_chunk_hold_ms="auto"` gives on CUDA. Chosen on an H100
# (bench/results/2026-12-06-h100-hold-codec-batch/): Seed-TTS at 184 req/s, where the engine had collapsed (every
# request late, 10.1% within the SLO), held 80.0% (96.8% with 32 chunks a codec launch); LibriTTS 120-136 req/s,
# where it had not, moved by -1.5 to +2.2 points.
LATE_CHUNK_HOLD_MS = 100.0


def _auto_ms(value: float | Literal["auto"] | None, device_type: str, on_cuda: float, name: str) -> float | None:
    """"auto" is `on_cuda` on CUDA and off (None) elsewhere, where a step of a model on a busy CPU can take longer
    than the bound itself and a realtime SLO is not the point; a number or None is taken as it is (SchedulerConfig
    checks its range)."""
    if value == "auto":
        return on_cuda if device_type == "cuda" else None
    if isinstance(value, str):
        raise ValueError(f'{name} must be a number of ms, None (off) or "auto", got {value!r}')
    return value


def admission_wait_ms(value: float | Literal["auto"] | None, device_type: str) -> float | None:
    """The overload bound an engine on `device_type` ("cuda", "cpu", ...) runs with: "auto" is ADMISSION_WAIT_MS
    on CUDA, off elsewhere (`_auto_ms`)."""
    return _auto_ms(value, device_type, ADMISSION_WAIT_MS, "max_admission_wait_ms")


def late_chunk_hold_ms(value: float | Literal["auto"] | None, device_type: str, scheduler_type: str) -> float | None:
    """The late-chunk hold an engine runs with: "auto" is LATE_CHUNK_HOLD_MS on CUDA with the deadline policy
    (the one that gives every chunk a deadline), off elsewhere; a number or None as it is."""
    if value == "auto" and scheduler_type != "deadline":
        return None
    return _auto_ms(value, device_type, LATE_CHUNK_HOLD_MS, "late_chunk_hold_ms")


@dataclass(frozen=True)
class EngineConfig:
    """How to build an engine. Validated when the engine starts (unknown model -> UnknownModelError)."""

    model: str = "tiny"
    checkpoint: str | None = None  # a local directory or a hub repo id resolved in the local cache
    device: str = "auto"  # "auto" (cuda when available), "cpu", "cuda", "cuda:N"; "auto:N" (replica N: cuda:N or cpu)
    dtype: str = "auto"  # "auto" (bfloat16 on cuda, float32 on cpu), "float32", "bfloat16", "float16"
    attention_backend: str = "auto"  # "auto" (flashinfer on cuda when installed), "torch", "flashinfer"
    use_cuda_graphs: bool = True  # only on cuda
    frame_path: str = "auto"  # "auto" (fused on cuda with triton), "reference" (the modules as loaded), "fused"
    # True: prompts of <= 16 tokens join the decode batch's LM pass (one pass over the weights for a step
    # with admissions) instead of a prefill pass of their own before it (runtime/runner.py, MIXED_LENGTH).
    # None (default): True on CUDA (H200: a step with 1-8 prompts 1.0-1.7 ms shorter; 96 req/s held 100%
    # within the SLO against 87.4% apart: bench/results/2026-12-02-mixed), False on the CPU (the CPU suite
    # tests both).
    mixed_prefill: bool | None = None
    scheduler_type: str = "base"
    page_size: int = 16  # tokens per KV page
    num_pages: int | None = None  # None: sized from memory (cuda) or max_batch_size * max_seq_len (cpu)
    # requests decoded in one step; None: the device's default, resolved in the engine process (256 or 128 on CUDA,
    # 64 on the CPU: `runtime/core.py`'s default_max_batch_size), so that a gateway never imports torch to ask
    max_batch_size: int | None = 64
    # requests admitted at once (running, or starved of streamed text), up to codec_slots; each step decodes at
    # most max_batch_size of them. None: the policy's default (the deadline policy, which decodes the least
    # slack first: 2 x max_batch_size; the others: max_batch_size)
    max_live_requests: int | None = None
    # rows of the codec's streaming state: a request holds one from admission until its last chunk is decoded
    # (after its generation ends, while its later chunks wait for the codec). None: 8 x max_batch_size
    # (sched/pages.py, SLOTS_PER_BATCH_ROW: why).
    codec_slots: int | None = None
    # audio chunks decoded in one codec launch (larger groups are split). None (default): the device's, resolved in
    # the engine process (`runtime/core.py`'s default_max_codec_batch: 32, or 16 on a GPU under 64 GiB, whose
    # memory may not hold the codec's graphs for 32; SchedulerConfig says why 32)
    max_codec_batch: int | None = None
    max_seq_len: int = 4096  # tokens of KV per request (prompt + frames)
    max_prefill_tokens: int = 4096  # prompt tokens admitted in one step
    seed: int = 0
    # Lanes (voxrt/engine/runtime/lanes.py): "auto", "off" (the time-shared synchronous loop), "green",
    # "streams", "inline" (CPU: the lane bookkeeping in order). `codec_sms`: SMs of the background codec lane,
    # or one count per SM mode; `sm_mode`: the index of the mode to run, or "adaptive" (sched/sm_modes.py).
    lanes: str = "auto"
    codec_sms: int | tuple[int, ...] | None = None
    sm_mode: int | str = 0
    # Deadline-aware policies (see SchedulerConfig).
    deadline_startup_ms: float = 200.0
    deadline_margin_ms: float = 50.0
    urgent_ms: float = 100.0
    max_prefill_deferral_ms: float = 100.0
    late_start_demotion_ms: float = 0.0
    # overload protection (SchedulerConfig): a stream not admitted within this many ms of when it could be is
    # refused (server_busy). None (default here): off, every request waits as long as it takes (a library user,
    # a batch, the GPU checks); "auto": ADMISSION_WAIT_MS on CUDA, off on the CPU (`admission_wait_ms`), the
    # default of `voxrt serve` and `voxrt loadgen`
    max_admission_wait_ms: float | Literal["auto"] | None = None
    # how much of a stream's wait for its first text counts toward that bound (SchedulerConfig; 0: none of it)
    admission_text_wait_ms: float = 50.0
    # the deadline policy's overload detection (SchedulerConfig): no stream is admitted while half the chunks
    # completed within this many ms were late. None (default here): off; "auto": LATE_CHUNK_HOLD_MS on CUDA with
    # the deadline policy, else off (`late_chunk_hold_ms`), the default of `voxrt serve` and `voxrt loadgen`
    late_chunk_hold_ms: float | Literal["auto"] | None = None
    dec_batch: int = 8
    # frames of every request's first audio chunk (the next ones double up to the program's chunk size); None: the
    # model program's own (Qwen3-TTS 2, Orpheus 4)
    first_chunk_frames: int | None = None
    costs: tuple[tuple[str, float], ...] = ()  # CostModel fields that override the start-up measurement
    trace_dir: str | None = None  # JSON lines: each launch's GPU time and each decision
    trace_requests_only: bool = False  # with trace_dir: only the per-request `request` records (runtime/trace.py)
    # True: the next LM step is planned and queued while one runs (the scheduler sees frames a step late).
    # False: each step's frames update the scheduler before the next is planned (the GPU waits for the host
    # between steps). None (default): True on CUDA (checked on the H200 by bench/gpu_async.sh: the same
    # frames, GPU idle between steps p50 0.001 ms / p99 0.004 ms against 1.36 / 6.29 synchronously), False on
    # the CPU (no device queue to keep full).
    async_lm: bool | None = None
    # model "standin" (voxrt/engine/standin.py, gateway benchmarks): frames finish at this multiple of real time
    standin_speed: float = 2.0


@dataclass(frozen=True)
class ModelInfo:
    """What a client needs to know about the served model: sent once the engine is ready."""

    name: str
    sample_rate: int
    frame_rate_hz: float
    samples_per_frame: int
    num_codebooks: int
    chunk_frames: int
    first_chunk_frames: int
    voices: tuple[str, ...]
    default_voice: str
    consumes_text_incrementally: bool
    device: str
    attention_backend: str
    use_cuda_graphs: bool
    lanes: str = ""  # how GPU work is laid out (runtime/lanes.py: Lanes.describe())
    scheduler_type: str = "base"
    frame_path: str = "reference"  # how the LM frame runs (ModelProgram.use_frame_path)
    # SamplingParams.instructions go into the prompt (ModelProgram.accepts_instructions), up to this many UTF-8
    # bytes (params.max_instructions_bytes of max_seq_len; 0 when not taken); params.instructions_problem is the rule
    accepts_instructions: bool = False
    max_instructions_bytes: int = 0
    # The model's sampling defaults (ModelProgram.sampling_defaults: its generation config, or its reference's):
    # what a request that sets no parameter, or only some, gets for the rest (EngineClient.submit)
    sampling_defaults: dict = field(default_factory=dict)


# ---- client -> engine -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitRequest:
    request_id: str
    voice: str
    params: SamplingParams = field(default_factory=SamplingParams)
    text: str = ""
    is_text_final: bool = False
    arrival_ns: int = 0  # time.monotonic_ns() at the client; the engine stamps its own when 0
    # False for a request whose audio nobody plays as it comes (HTTP /v1/audio/speech, /generate, batch jobs):
    # deadline-aware policies serve it with what streams leave.
    streaming: bool = True


@dataclass(frozen=True)
class AppendText:
    request_id: str
    text: str
    is_final: bool = False


@dataclass(frozen=True)
class SetPlayback:
    """The playback anchor: at monotonic time `anchor_ns` the listener had played `played_samples` of the
    request's audio (at the model's rate). Stored now; the deadline scheduler turns it into chunk deadlines."""

    request_id: str
    played_samples: int
    anchor_ns: int
    is_stalled: bool = False


@dataclass(frozen=True)
class CancelRequest:
    request_id: str


@dataclass(frozen=True)
class GetStats:
    token: int
    # Run the page and slot pools' integrity check now. The engine also runs it whenever it goes idle, and
    # reports that result otherwise: a /metrics scrape must not walk every pool entry each time.
    check_pools: bool = False


@dataclass(frozen=True)
class Heartbeat:
    """Answered by `HeartbeatAck` from the step loop itself (between steps), so an answer proves the loop
    runs: the client's supervisor restarts an engine that stops answering (voxrt/engine/supervisor.py)."""

    token: int


@dataclass(frozen=True)
class Shutdown:
    pass


# ---- engine -> client -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineReady:
    info: ModelInfo


@dataclass(frozen=True)
class AudioChunk:
    """`pcm` is float32 little-endian mono at `sample_rate`. `text_span` is the (char_start, char_end) of
    the request's text consumed while this chunk's frames were generated, when the program knows it."""

    request_id: str
    chunk_index: int
    pcm: bytes
    sample_rate: int
    first_frame: int
    num_frames: int
    is_last: bool
    text_span: tuple[int, int] | None = None
    finish_reason: str | None = None  # set on the last chunk: "stop", "length", "pinned", "max_frames", "empty"
    # time.monotonic_ns() (one clock for every process of a host) when the chunk left the engine core, and when
    # the client's reader thread received it: the first two timestamps of a chunk's path to the listener
    done_ns: int = 0
    received_ns: int = 0

    @property
    def num_samples(self) -> int:
        return len(self.pcm) // 4


@dataclass(frozen=True)
class RequestFailed:
    request_id: str
    code: str
    message: str


@dataclass(frozen=True)
class RequestCancelled:
    request_id: str


@dataclass(frozen=True)
class EngineStats:
    token: int
    num_waiting: int
    num_running: int
    num_requests: int
    num_pages_total: int
    num_pages_free: int
    num_slots_total: int
    num_slots_free: int
    num_steps: int
    num_failed_steps: int
    pool_ok: bool
    # since start: codec launches per lane ("urgent", "background", or "loop" for the time-shared loop),
    # chunks with a deadline decoded by it or after it, admissions a policy had deferred, chunks cut early (before
    # all their frames were there) so as not to be late
    codec_launches: tuple[tuple[str, int], ...] = ()
    chunks_on_time: int = 0
    chunks_late: int = 0
    deferred_admissions: int = 0
    early_chunks: int = 0
    sm_mode_switches: int = 0  # adaptive SM modes: moves between splits
    held_steps: int = 0  # steps that admitted no stream because the engine was behind (late_chunk_hold_ms)
    lm_steps_by_sm_mode: tuple[int, ...] = ()  # LM steps launched in each SM mode (one entry without modes)


@dataclass(frozen=True)
class EngineLoad:
    """A small load report the engine pushes to every client about every `LOAD_REPORT_INTERVAL_S` (process.py)
    without being asked, so that a gateway routing new contexts across replicas (replicas.py, headroom.py) reads
    fresh figures without a round trip per admission. Host-side scheduler state only: no device sync.

    `num_submits_seen` is per connection: the submits of the receiving client the engine had taken when it
    made the report, so the client knows how many of its own submits the figures do not count yet."""

    num_waiting: int  # queued for admission (no text yet, or no pages / slot free)
    num_running: int  # admitted: holding KV pages and a slot (running or starved of text)
    num_requests: int  # live requests (also the ones draining their last chunks)
    decode_batch: int  # requests the latest LM step decoded
    max_batch_size: int  # the most one LM step decodes
    max_live_requests: int  # the most admitted at once
    # least slack of the admitted streams' next chunks (deadlines.py: due time less now, less the LM steps its
    # missing frames take and its codec launch), ms; None when no stream is generating
    min_slack_ms: float | None
    num_pages_free: int
    num_pages_total: int
    num_slots_free: int
    chunks_late: int  # since start (chunks with a deadline decoded after it)
    made_ns: int  # time.monotonic_ns() when the engine made the report (one clock for the host)
    num_submits_seen: int = 0


@dataclass(frozen=True)
class HeartbeatAck:
    token: int


@dataclass(frozen=True)
class EngineFatal:
    """The engine could not start or died; every request is gone."""

    code: str
    message: str


ClientMessage = SubmitRequest | AppendText | SetPlayback | CancelRequest | GetStats | Heartbeat | Shutdown
EngineMessage = (EngineReady | AudioChunk | RequestFailed | RequestCancelled | EngineStats | EngineLoad
                 | HeartbeatAck | EngineFatal)
