"""The `ModelProgram` interface: everything model-specific the engine runs.

A program is an `nn.Module` holding the LM (talker), an optional depth model (code predictor) and the
codec. The runner owns the KV cache, batching, padding and CUDA graphs; the program only computes. Every
batched method takes tensors whose first dim is the (possibly padded) batch, so the runner can capture it
in a graph per batch-size bucket.

A frame is what the codec turns into `samples_per_frame` samples: a row of `num_codebooks` codes. How a
program makes one is its frame shape (`lm_tokens_per_frame`, `has_depth`), which fits the families we know:

- one LM token per frame and a depth stage (Qwen3-TTS, `tiny`): the LM step samples code 0 (`sample_code`),
  `generate_depth` the frame's other codes;
- several LM tokens per frame and no depth stage (Orpheus: 7 tokens, one code each): the runner runs the LM
  `lm_tokens_per_frame` times, the sub-step `sub` reading the token sub-step `sub - 1` wrote into the slot's
  frame row (`embed_step`'s `prev_codes`, `sub` 0 reading the previous frame's) and sampling code `sub`;
- one LM token per frame and no depth stage (a single-codebook model): code 0 is the frame.

Its prompt is per-position inputs on two tracks (`PromptTokens`: a text id and a code per position, -1 for
nothing), which covers dual-track prompts (Qwen3-TTS: text and codec summed), prompt-at-once text (Orpheus:
text ids alone), and prompts with codes only. Its stop rules are `ProgramSpec`'s (`eos_code`, the length
rules), its token-to-code mapping is its own (`sample_code` returns what the frame row holds; `decode_chunk`
reads that row), and its constants come from one place: `spec` (`ModelInfo` is built from it, engine side).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from voxrt.engine.errors import InvalidParamsError
from voxrt.engine.runtime.attention import AttentionContext
from voxrt.engine.runtime.sampling import SamplingTensors
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import PromptTokens, Request


FRAME_PATHS = ("auto", "reference", "fused")


def check_frame_path(path: str) -> None:
    if path not in FRAME_PATHS:
        raise InvalidParamsError(f"unknown frame path {path!r}; expected one of {', '.join(FRAME_PATHS)}")


@dataclass(frozen=True)
class LMGeometry:
    """Shapes of the paged KV cache the runner allocates for the LM."""

    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int


class ModelProgram(nn.Module, abc.ABC):
    name: str
    sample_rate: int
    samples_per_frame: int
    num_codebooks: int
    chunk_frames: int
    first_chunk_frames: int
    consumes_text_incrementally: bool
    voices: Sequence[str]
    default_voice: str
    # True: `build_prompt` puts `request.params.instructions` (a style instruction) into the prompt. The engine
    # refuses instructions for a program without them (EngineCore.submit), never ignores them.
    accepts_instructions: bool = False
    # The frame shape (module docstring): LM steps per frame, and whether a depth stage fills the frame after
    # them. `num_codebooks` codes a frame either way; with several LM steps and no depth, one code each.
    lm_tokens_per_frame: int = 1
    has_depth: bool = True
    # The streaming codec's output lags its input by this many samples (a codec that is not causal holds
    # back its lookahead): the runner drops them from the start of each request's audio and, after its last
    # chunk, appends what `finish_codec` returns, so that N frames are N * samples_per_frame samples. 0: causal.
    codec_delay_samples: int = 0
    # The background codec lane's share of the GPU's SMs when no split is given (--sm-modes): the LM lane gets
    # the rest. About half suits Qwen3-TTS, whose codec is compute-bound (2026-12-02-codec-flat; it takes 64 of 132,
    # measured at the knee); a codec that costs little beside its LM (Orpheus's SNAC) gives the LM most of the GPU.
    codec_sm_share: float = 0.5
    # SamplingParams fields a request gets when it sets none, or not these (EngineClient.submit): the checkpoint's
    # generation config or the reference's sampling; empty: SamplingParams' own defaults
    sampling_defaults: dict = {}

    @property
    def frame_rate_hz(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @property
    @abc.abstractmethod
    def spec(self) -> ProgramSpec:
        """Constants the pure scheduler needs (chunk sizes, stop rules, text pad)."""

    @property
    @abc.abstractmethod
    def lm_geometry(self) -> LMGeometry: ...

    def set_first_chunk_frames(self, frames: int) -> None:
        """Every request's first audio chunk is `frames` frames from now on (the engine's `--first-chunk-frames`;
        the chunks after it double up to `chunk_frames`, plan.chunk_schedule). Call before the engine builds its
        runner (the codec's graphs are captured per chunk size). ValueError, with the program unchanged, for a
        size the program cannot start with (above `chunk_frames`, or too short to release audio through its
        codec's delay)."""
        if not 1 <= frames <= self.chunk_frames:
            raise ValueError(f"first_chunk_frames must be between 1 and the program's chunk_frames "
                             f"({self.chunk_frames}), got {frames}")
        old = self.first_chunk_frames
        self.first_chunk_frames = frames
        try:
            checked_spec(self)  # the spec follows the attribute and accepts the size (ProgramSpec's checks)
        except ValueError:
            self.first_chunk_frames = old
            raise

    # ---- text and prompt (host side) ---------------------------------------------------------------------

    @abc.abstractmethod
    def tokenize(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Text -> (token ids, char spans relative to `text`)."""

    @abc.abstractmethod
    def build_prompt(self, request: Request) -> PromptTokens:
        """The prefill tracks for a request (voice, role and codec prefix; text per the program's mode)."""

    # ---- LM --------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def embed_prompt(self, text_ids: torch.Tensor, codec_ids: torch.Tensor) -> torch.Tensor:
        """[N], [N] (-1: none on that track) -> [N, H]."""

    @abc.abstractmethod
    def embed_step(self, text_ids: torch.Tensor, prev_codes: torch.Tensor) -> torch.Tensor:
        """Decode input: [B] text ids, [B, K] codes of the previous frame -> [B, H]."""

    def embed_substep(self, text_ids: torch.Tensor, prev_codes: torch.Tensor, sub: torch.Tensor) -> torch.Tensor:
        """Decode input of LM sub-step `sub` [B] (0 .. lm_tokens_per_frame - 1) of a frame: [B, K] the slot's frame
        row, whose codes before `sub` are this frame's and the rest the previous frame's -> [B, H]. One LM token
        per frame: `embed_step`."""
        return self.embed_step(text_ids, prev_codes)

    @abc.abstractmethod
    def lm_forward(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionContext) -> torch.Tensor:
        """[N, H] inputs at [N] positions -> [N, H] last hidden states. KV goes through `attn`."""

    @abc.abstractmethod
    def sample_first_code(self, hidden: torch.Tensor, sampling: SamplingTensors,
                          history: torch.Tensor) -> torch.Tensor:
        """[B, H] -> [B] code 0, with the repetition penalty over `history` [B, V] (bool)."""

    def sample_code(self, hidden: torch.Tensor, sampling: SamplingTensors, history: torch.Tensor,
                    sub: torch.Tensor) -> torch.Tensor:
        """[B, H] -> [B] the code of LM sub-step `sub` [B] (its column of the frame row; also the column of
        `history` [B, code0_vocab_size] it marks). One LM token per frame: `sample_first_code`."""
        return self.sample_first_code(hidden, sampling, history)

    # ---- depth (code predictor) --------------------------------------------------------------------------

    def generate_depth(self, hidden: torch.Tensor, code0: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        """[B, H], [B] -> [B, K] all codes of the frame (code 0 first). Programs with `has_depth`."""
        raise NotImplementedError(f"model {self.name!r} has no depth stage")

    # ---- codec -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def new_codec_state(self, num_slots: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Device-side per-request codec state, one row per slot (the last row is scratch for padding)."""

    @abc.abstractmethod
    def reset_codec_slots(self, state: dict[str, torch.Tensor], slots: torch.Tensor) -> None: ...

    @abc.abstractmethod
    def decode_chunk(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """Streaming decode: [B, F, K] codes, [B] slots -> [B, F * samples_per_frame] audio in [-1, 1];
        reads and advances each slot's state."""

    def finish_codec(self, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """After a request's last chunk: the last `codec_delay_samples` samples of each slot's audio [B, delay]
        (programs whose codec lags; a causal codec has nothing held back)."""
        return torch.zeros(slots.shape[0], self.codec_delay_samples, device=slots.device)

    @abc.abstractmethod
    def decode_offline(self, codes: torch.Tensor) -> torch.Tensor:
        """Reference decode of whole sequences [B, T, K] -> [B, T * samples_per_frame], no state."""

    @property
    def code0_vocab_size(self) -> int:
        raise NotImplementedError

    def warmup_note(self) -> str | None:
        """A line for the engine's log once its graphs are captured: what the program chose while they were
        (e.g. timed kernel choices); None: nothing to say."""
        return None

    # ---- tuning kept between starts (runtime/tuning_cache.py) -----------------------------------------------

    def tuning_key(self) -> dict | None:
        """What this program's timed choices depend on beyond the GPU, the libraries and the lanes (its code, its
        settings), as JSON values; None: it times nothing, no tuning file."""
        return None

    def tuning_state(self) -> dict:
        """What it chose by timing, as JSON values, for `restore_tuning` at the next start; {} when nothing."""
        return {}

    def restore_tuning(self, state: dict) -> int:
        """Take back `tuning_state`'s choices from an earlier start (before the graphs are captured, so those
        shapes are not timed again); how many it took. Anything it does not recognise it leaves out."""
        return 0

    # ---- execution path ------------------------------------------------------------------------------------

    def use_frame_path(self, path: str, device: torch.device) -> str:
        """Chooses how the LM frame runs, once the program is on its device and dtype; returns the path that
        runs. `reference`: the modules as loaded. `fused`: the program's fast path (packed weights, fused
        kernels; `FRAME_PATHS`), for programs that have one. `auto`: fused where it runs fast (CUDA with
        Triton), else reference. Programs without a fused path run the reference and refuse `fused`."""
        check_frame_path(path)
        if path == "fused":
            raise InvalidParamsError(f"model {self.name!r} has no fused frame path; use --frame-path reference or auto")
        return "reference"


# What a program states twice, as its attributes (the runner's) and in `spec` (the scheduler's, and what
# `ModelInfo` is built from): the engine refuses a program where the two disagree.
_SPEC_ATTRIBUTES = ("num_codebooks", "chunk_frames", "first_chunk_frames", "consumes_text_incrementally",
                    "samples_per_frame", "sample_rate", "lm_tokens_per_frame", "codec_delay_samples")


def checked_spec(program: ModelProgram) -> ProgramSpec:
    """The program's `spec`, once its attributes are known to say the same (ValueError naming each one that
    does not), and its frame shape is one the runner runs."""
    spec = program.spec
    wrong = [f"{name}: {getattr(program, name)!r} (spec {getattr(spec, name)!r})" for name in _SPEC_ATTRIBUTES
             if getattr(program, name) != getattr(spec, name)]
    if wrong:
        raise ValueError(f"model program {program.name!r} disagrees with its spec: {'; '.join(wrong)}")
    if program.lm_tokens_per_frame > 1 and program.has_depth:
        raise ValueError(f"model program {program.name!r}: several LM tokens a frame and a depth stage is no "
                         f"frame shape the runner knows (ModelProgram's docstring)")
    return spec
