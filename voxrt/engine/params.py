"""Per-request generation parameters, validated once at submit (a typed error, never a crash later)."""

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
    """

    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    greedy: bool = False
    num_frames: int | None = None
    max_frames: int | None = None

    def __post_init__(self) -> None:
        problems = []
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


def _is_finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
