"""A request's life in the engine, as data. States are an enum; transitions are checked."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.text_feed import TextFeed, Tokenizer


class RequestState(enum.Enum):
    WAITING = "waiting"  # submitted; not prefilled (no text yet, or no pages or slot free)
    RUNNING = "running"  # holds KV pages and a slot; generates a frame every step
    STARVED = "starved"  # incremental program ran out of text before it was final: waits for more
    DRAINING = "draining"  # generation ended (pages returned); audio chunks still to decode
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


_ALLOWED = {
    RequestState.WAITING: {RequestState.RUNNING, RequestState.DRAINING, RequestState.CANCELLED, RequestState.FAILED},
    RequestState.RUNNING: {RequestState.STARVED, RequestState.DRAINING, RequestState.CANCELLED, RequestState.FAILED},
    RequestState.STARVED: {RequestState.RUNNING, RequestState.CANCELLED, RequestState.FAILED},
    RequestState.DRAINING: {RequestState.FINISHED, RequestState.CANCELLED, RequestState.FAILED},
    RequestState.FINISHED: set(),
    RequestState.CANCELLED: set(),
    RequestState.FAILED: set(),
}

TERMINAL = frozenset({RequestState.FINISHED, RequestState.CANCELLED, RequestState.FAILED})


class InvalidTransition(AssertionError):
    pass


@dataclass(frozen=True)
class PromptTokens:
    """The prefill input: two aligned tracks (dual-track models sum a text and a codec embedding per
    position). -1 means "no embedding on this track at this position"."""

    text_ids: tuple[int, ...]
    codec_ids: tuple[int, ...]
    num_text_tokens_used: int  # text tokens of the request consumed by this prompt

    def __post_init__(self) -> None:
        if len(self.text_ids) != len(self.codec_ids) or not self.text_ids:
            raise ValueError("prompt tracks must be non-empty and of equal length")

    def __len__(self) -> int:
        return len(self.text_ids)


@dataclass(frozen=True)
class PlaybackAnchor:
    """A listener's playback report: a new one replaces the request's (the deadline policy keeps what it
    derived from an anchor for as long as the request holds that same anchor)."""

    played_samples: int
    anchor_ns: int
    is_stalled: bool


@dataclass
class Request:
    request_id: str
    voice: str
    params: SamplingParams
    feed: TextFeed
    arrival_ns: int
    state: RequestState = RequestState.WAITING
    prompt: PromptTokens | None = None
    pages: list[int] = field(default_factory=list)
    slot: int | None = None
    # Booked when a step is planned (the engine plans a step while the previous one runs on the GPU):
    num_tokens: int = 0  # tokens in the KV cache once the planned steps ran (prompt + frames fed back)
    num_text_consumed: int = 0  # text tokens fed to the LM by the planned steps
    num_frames_in_flight: int = 0  # frames of planned steps not yet in `frames`
    is_text_eos_fed: bool = False  # the spec's text_eos_id was fed (after the last token of a final text)
    frames: list[tuple[int, ...]] = field(default_factory=list)  # codes per generated frame [K]
    frame_text_index: list[int] = field(default_factory=list)  # text tokens consumed when frame t was made
    num_frames_chunked: int = 0  # frames handed to the codec
    num_chunks: int = 0
    num_chunks_in_flight: int = 0  # cut and not yet completed (at most 1: the codec state is per slot)
    deferred_since_ns: int | None = None  # a policy deferred its admission since then (deadline policy)
    # The last step at which a waiting request could not be admitted for want of text (None: it could be from
    # its arrival): its wait for the engine counts from then (`SchedulerConfig.max_admission_wait_ms`)
    text_wait_ns: int | None = None
    # The last step a policy saw it starved of text (the deadline policy with `late_chunk_hold_ms`): a chunk due
    # shortly after it (`STARVED_BEFORE_DEADLINE_MS`) that is late may be late for its agent, not the engine
    starved_ns: int | None = None
    is_streaming: bool = True  # False: nobody plays its audio as it comes (no chunk deadlines)
    finish_reason: str | None = None
    playback: PlaybackAnchor | None = None
    first_chunk_ns: int | None = None
    # The deadline policy's cache of its next chunk's deadline, frames and codec time, with what they were derived
    # from (`DeadlineScheduler._next_chunk_parts`); None until asked
    chunk_parts: tuple | None = None
    error: str | None = None
    # `--trace-dir` only (runtime/core.py): when its commands came and its first chunk went, in ms on the engine's
    # clock, written as one `request` record when its last chunk is delivered; None when not tracing
    timeline: dict | None = None

    @classmethod
    def create(cls, request_id: str, voice: str, params: SamplingParams, tokenize: Tokenizer, arrival_ns: int) -> "Request":
        return cls(request_id=request_id, voice=voice, params=params, feed=TextFeed(tokenize), arrival_ns=arrival_ns)

    def transition(self, new: RequestState) -> None:
        if new not in _ALLOWED[self.state]:
            raise InvalidTransition(f"request {self.request_id}: expected a state that may move to {new.name}, "
                                    f"got {self.state.name}")
        self.state = new

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    @property
    def num_text_pending(self) -> int:
        return len(self.feed.token_ids) - self.num_text_consumed

    @property
    def is_generation_done(self) -> bool:
        return self.finish_reason is not None
