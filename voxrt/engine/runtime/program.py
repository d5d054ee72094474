"""The `ModelProgram` interface: everything model-specific the engine runs.

A program is an `nn.Module` holding the LM (talker), an optional depth model (code predictor) and the
codec. The runner owns the KV cache, batching, padding and CUDA graphs; the program only computes. Every
batched method takes tensors whose first dim is the (possibly padded) batch, so the runner can capture it
in a graph per batch-size bucket.
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

    @abc.abstractmethod
    def lm_forward(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionContext) -> torch.Tensor:
        """[N, H] inputs at [N] positions -> [N, H] last hidden states. KV goes through `attn`."""

    @abc.abstractmethod
    def sample_first_code(self, hidden: torch.Tensor, sampling: SamplingTensors,
                          history: torch.Tensor) -> torch.Tensor:
        """[B, H] -> [B] code 0, with the repetition penalty over `history` [B, V] (bool)."""

    # ---- depth (code predictor) --------------------------------------------------------------------------

    @abc.abstractmethod
    def generate_depth(self, hidden: torch.Tensor, code0: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        """[B, H], [B] -> [B, K] all codes of the frame (code 0 first)."""

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

    @abc.abstractmethod
    def decode_offline(self, codes: torch.Tensor) -> torch.Tensor:
        """Reference decode of whole sequences [B, T, K] -> [B, T * samples_per_frame], no state."""

    @property
    def code0_vocab_size(self) -> int:
        raise NotImplementedError

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
