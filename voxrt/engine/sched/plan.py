"""What a scheduler hands the runner for one step, and the program facts a scheduler needs (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from voxrt.engine.sched.request import Request

# Codec lanes (issue 7): an urgent lane on the whole GPU at high priority (first chunks, chunks due soon) and a
# background lane on an SM partition beside the LM. Without lanes (the time-shared loop, the CPU) both run in
# order after the LM step.
URGENT = "urgent"
BACKGROUND = "background"
LANES = (URGENT, BACKGROUND)


def chunk_schedule(first_chunk_frames: int, chunk_frames: int) -> list[int]:
    """Frames of chunk 0, 1, 2, ...: the first chunk small for time to first audio, then doubling up to
    `chunk_frames` (2, 4, 8, 16, 25, 25, ...). Each chunk is generated while the listener plays the ones
    before, so with a frame time f and a frame of audio a, doubling keeps the stream ahead while a / f >= 2;
    a jump straight from 2 frames to 25 would stall every stream (25 frames take longer to generate than
    2 frames take to play). Returns the distinct sizes in order; the last one repeats."""
    sizes = [first_chunk_frames]
    while sizes[-1] < chunk_frames:
        sizes.append(min(sizes[-1] * 2, chunk_frames))
    return sizes


def codec_sizes(first_chunk_frames: int, chunk_frames: int) -> list[int]:
    """Every chunk size the codec is launched with (captured as graphs): the schedule, and the powers of two
    below the first chunk so that a starved request's frames can always be cut into these sizes. A last
    chunk of another size is padded up to the next of these sizes and its audio trimmed."""
    sizes = set(chunk_schedule(first_chunk_frames, chunk_frames))
    size = 1
    while size < first_chunk_frames:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


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
    samples_per_frame: int = 1920  # audio samples per frame at `sample_rate`
    sample_rate: int = 24000
    # LM tokens per frame (ModelProgram.lm_tokens_per_frame): each takes a KV position, so a decode step books
    # this many and a prefill the prompt plus this many less one (its prompt's last position makes the first)
    lm_tokens_per_frame: int = 1
    codec_delay_samples: int = 0  # ModelProgram.codec_delay_samples: the streaming codec's lag

    def frame_tokens_after_prompt(self) -> int:
        """KV positions a prefill books past its prompt for the rest of its first frame."""
        return self.lm_tokens_per_frame - 1

    @property
    def frame_ns(self) -> float:
        """Playback time of one frame, in nanoseconds."""
        return self.samples_per_frame * 1e9 / self.sample_rate

    def __post_init__(self) -> None:
        if not (1 <= self.first_chunk_frames <= self.chunk_frames):
            raise ValueError("need 1 <= first_chunk_frames <= chunk_frames")
        if self.lm_tokens_per_frame < 1:
            raise ValueError("need lm_tokens_per_frame >= 1")
        if self.codec_delay_samples >= self.first_chunk_frames * self.samples_per_frame:
            raise ValueError(f"a first chunk of {self.first_chunk_frames} frames releases no audio through a codec "
                             f"that lags {self.codec_delay_samples} samples")
        sizes = codec_sizes(self.first_chunk_frames, self.chunk_frames)
        object.__setattr__(self, "_sizes", sizes)
        # largest_codec_size(n) for n in 0..max(sizes): the planner asks it for every live request every step
        object.__setattr__(self, "_largest", [0] + [max(x for x in sizes if x <= n) for n in range(1, sizes[-1] + 1)])
        # next_chunk_size by frames already cut, filled as asked (the planner asks for every stream every step)
        object.__setattr__(self, "_next_sizes", {})

    @property
    def codec_sizes(self) -> list[int]:
        """`codec_sizes(first_chunk_frames, chunk_frames)`, computed once (do not mutate)."""
        return self._sizes  # type: ignore[attr-defined]

    def samples_before(self, first_frame: int) -> int:
        """Audio samples the listener holds before the chunk that starts at `first_frame`: a codec that lags
        its input (`codec_delay_samples`) releases its first chunk that much short (the rest comes with the
        last chunk), so every later chunk starts that much earlier in the audio than its frame index says."""
        # a first chunk cut short of the lag (a starved or early one) releases nothing yet
        return max(0, first_frame * self.samples_per_frame - self.codec_delay_samples)

    def chunk_samples(self, first_frame: int, num_frames: int, is_last: bool) -> int:
        """Audio samples a chunk releases: its frames' worth, the first chunk less the codec's lag and the last
        chunk with the lag's tail (`samples_before`); a request's chunks add up to its frames' worth."""
        end = (first_frame + num_frames) * self.samples_per_frame if is_last else self.samples_before(
            first_frame + num_frames)
        return end - self.samples_before(first_frame)

    def next_chunk_size(self, frames_chunked: int) -> int:
        """Frames of a request's next chunk, from the frames already cut: the first chunk, then each chunk as
        long as the audio before it (`samples_before`, in whole frames) plus a first chunk, at most
        `chunk_frames`, cut to a codec size. In the normal course this is the doubling schedule
        (`chunk_schedule`: 2, 4, 8, 16, 25 after 0, 2, 6, 14, 30 frames); after a chunk cut short (a starved or
        early chunk) it stays in step with the audio the listener holds, where counting chunks would ask twice
        as much of the next one. Behind a lagging codec it counts the audio released, not the frames cut
        (SNAC's lag with a 3-frame first chunk: 3, 3, 6, 12, where frames would give 3, 6, 12 and stall every
        stream after 58 ms of audio; Orpheus's 4-frame first chunk: 4, 4, 8, 12)."""
        table = self._next_sizes  # type: ignore[attr-defined]
        size = table.get(frames_chunked)
        if size is None:
            if frames_chunked == 0:
                size = self.first_chunk_frames
            else:
                audio_frames = self.samples_before(frames_chunked) // self.samples_per_frame
                size = self.largest_codec_size(min(self.chunk_frames, audio_frames + self.first_chunk_frames))
            table[frames_chunked] = size
        return size

    def largest_codec_size(self, available: int) -> int:
        """The largest codec size that fits in `available` (>= 1) frames."""
        if available < 1:
            raise ValueError(f"no codec size fits in {available} frames")
        table = self._largest  # type: ignore[attr-defined]
        return table[available if available < len(table) else -1]


class DecodeItem(NamedTuple):
    """One request's decode input of a step. A named tuple: immutable like a frozen dataclass, and built in
    about half its time (one a running request a step: 1.1 against 2.0 us each on the dev VM's CPU, loaded)."""

    request: Request
    text_id: int  # text-track input of this step; codec-track input is the request's last frame
    position: int  # position of this token in the request's sequence (== tokens already in KV)
    text_index: int = 0  # the request's text tokens consumed once this step has read its input


@dataclass(frozen=True, slots=True)
class CodecJob:
    request: Request
    first_frame: int
    num_frames: int  # may be 0 for an empty last chunk (nothing to decode)
    chunk_index: int
    is_last: bool
    deadline_ns: int | None = None  # when the listener needs it (policies with deadlines set it)
    lane: str = BACKGROUND  # URGENT or BACKGROUND; ignored without lanes
    is_early: bool = False  # cut before all its frames were there, so as not to be late (`next_chunk(early=)`)


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
