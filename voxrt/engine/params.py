"""Per-request generation parameters, validated once at submit (a typed error, never a crash later), and the
rule for a request's style instructions (which programs take them, and how long they may be)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from voxrt.engine.errors import InvalidParamsError


@dataclass(frozen=True)
class SamplingParams:
    """Sampling of the LM's codes. `greedy` overrides temperature, top-k and top-p.

    `top_k == 0` and `top_p == 1.0` disable those filters. The repetition penalty applies to the first
    codebook (code 0), as in the Qwen3-TTS reference (`generate()` of the talker).
    `num_frames`: benchmark control. Pins the output length: stop rules are suppressed until exactly this
    many frames were generated. `max_frames`: a hard cap (None: the engine's default).
    `instructions`: a natural-language style instruction ("Speak slowly, in a warm voice"), a prompt input for
    programs that take one (`ModelProgram.accepts_instructions`; `instructions_problem` is the rule); None, an
    empty or a blank string mean none (normalized to None here).
    """

    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    greedy: bool = False
    num_frames: int | None = None
    max_frames: int | None = None
    instructions: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.instructions, str) and not self.instructions.strip():
            object.__setattr__(self, "instructions", None)  # "" and blanks are no instruction (one form of none)
        if self.instructions is not None and not isinstance(self.instructions, str):
            problems.append(f"instructions must be a string or null (got {type(self.instructions).__name__})")
        elif self.instructions is not None and not _is_utf8(self.instructions):
            problems.append("instructions must be Unicode text without lone surrogates")
        if not _is_finite(self.temperature) or self.temperature <= 0.0:
            problems.append(f"temperature must be > 0 (got {self.temperature!r}); use greedy=true for argmax")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            problems.append(f"top_k must be an integer >= 0, 0 disables it (got {self.top_k!r})")
        if not _is_finite(self.top_p) or not (0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1] (got {self.top_p!r})")
        if not _is_finite(self.repetition_penalty) or self.repetition_penalty <= 0.0:
            problems.append(f"repetition_penalty must be > 0 (got {self.repetition_penalty!r})")
        if not isinstance(self.greedy, bool):
            problems.append(f"greedy must be a boolean (got {self.greedy!r})")
        for name in ("num_frames", "max_frames"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                problems.append(f"{name} must be a positive integer or null (got {value!r})")
        if problems:
            raise InvalidParamsError("; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict) -> "SamplingParams":
        """Builds from a user-supplied mapping; unknown keys are an error, not silently dropped."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidParamsError(f"unknown sampling parameters {unknown}; known: {sorted(known)}")
        return cls(**data)


# An instruction is part of the prompt, so it takes KV cache that the request's frames would otherwise use: it may
# hold at most a quarter of the sequence budget (EngineConfig.max_seq_len tokens; 1024 at the default 4096). The
# limit is counted in UTF-8 bytes, which the gateway counts without the model's tokenizer: a byte-level BPE token
# (Qwen3-TTS's) covers at least one byte, so an instruction takes about as many tokens as its bytes at most (plus
# its turn's few markers; NFC normalization seldom lengthens text), well inside the sequence.
INSTRUCTIONS_SHARE_OF_SEQUENCE = 4


def max_instructions_bytes(max_seq_len: int) -> int:
    return max_seq_len // INSTRUCTIONS_SHARE_OF_SEQUENCE


def instructions_problem(instructions: str | None, model: str, accepts: bool, max_bytes: int) -> tuple[str, str] | None:
    """None when `instructions` (as SamplingParams normalizes them) may go to `model`; else (code, message) for
    the caller's typed error. `accepts` and `max_bytes` are the served model's (ModelInfo.accepts_instructions,
    ModelInfo.max_instructions_bytes). A model that does not take instructions refuses them rather than
    speak as if they had not been sent."""
    if instructions is None:
        return None
    if not accepts:
        return "unsupported_parameter", f"model {model} does not take 'instructions'; send the request without them"
    num_bytes = len(instructions.encode("utf-8"))
    if num_bytes > max_bytes:
        return "instructions_too_long", (f"'instructions' hold {num_bytes} bytes of UTF-8; model {model} takes at "
                                         f"most {max_bytes} (a quarter of its sequence budget, so that the prompt "
                                         f"leaves room for the audio)")
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
