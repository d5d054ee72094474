"""What a scheduler hands the runner for one step, and the program facts a scheduler needs (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from voxrt.engine.sched.request import Request


@dataclass(frozen=True)
class ProgramSpec:
    """A model program's constants, as seen by the pure scheduler."""

    num_codebooks: int
    chunk_frames: int  # frames per codec chunk after the first
    first_chunk_frames: int  # small first chunk for time to first audio
    consumes_text_incrementally: bool  # dual track: one text token per frame
    text_pad_id: int  # text-track input once the text is used up
    eos_code: int | None  # code 0 that ends generation (None: the program never emits it)
    frames_per_text_token: float | None  # length rule for random weights that never learn to stop
    default_max_frames: int
    # Text-track input fed once after the last text token when the text is final, before the pads (Qwen3-TTS
    # streaming: trailing text = tokens, then tts_eos, then tts_pad). None: pads follow the text directly.
    text_eos_id: int | None = None

    def __post_init__(self) -> None:
        if not (1 <= self.first_chunk_frames <= self.chunk_frames):
            raise ValueError("need 1 <= first_chunk_frames <= chunk_frames")


@dataclass(frozen=True)
class DecodeItem:
    request: Request
    text_id: int  # text-track input of this step; codec-track input is the request's last frame
    position: int  # position of this token in the request's sequence (== tokens already in KV)


@dataclass(frozen=True)
class CodecJob:
    request: Request
    first_frame: int
    num_frames: int  # may be 0 for an empty last chunk (nothing to decode)
    chunk_index: int
    is_last: bool


@dataclass
class StepPlan:
    prefill: list[Request] = field(default_factory=list)
    decode: list[DecodeItem] = field(default_factory=list)
    codec: list[CodecJob] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.prefill or self.decode or self.codec)

    @property
    def lm_requests(self) -> list[Request]:
        """The requests that get a new frame this step, in the runner's batch order."""
        return self.prefill + [item.request for item in self.decode]
