"""What a step costs, as the policies with deadlines estimate it (PURE).

Linear models: an LM step (talker decode + code predictor, one frame for every running request) costs
`lm_base_ms + lm_per_request_ms * batch`; a prefill adds `prefill_per_token_ms` per prompt token; a codec
launch costs `codec_base_ms + codec_per_frame_ms * batch * frames`. The defaults are the Qwen3-TTS-1.7B figures
measured on one H200 (bench/results/2026-11-29-qwen3-tts/: frame 13.4 ms at b1 and 15.4 ms at b64; codec 2.8 ms
for one 2-frame chunk, 29.4 ms for 16 chunks of 25 frames). The engine measures its own at start-up (or takes
them from flags) and replaces these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    lm_base_ms: float = 13.4
    lm_per_request_ms: float = 0.03
    prefill_per_token_ms: float = 0.02
    codec_base_ms: float = 2.7
    codec_per_frame_ms: float = 0.067

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value >= 0:  # also rejects NaN
                raise ValueError(f"cost {name} must be >= 0, got {value!r}")

    def lm_step_ms(self, batch: int, prefill_tokens: int = 0) -> float:
        return self.lm_base_ms + self.lm_per_request_ms * batch + self.prefill_per_token_ms * prefill_tokens

    def codec_ms(self, batch: int, frames: int) -> float:
        return self.codec_base_ms + self.codec_per_frame_ms * batch * frames

    @classmethod
    def fit(cls, lm_points: list[tuple[int, float]], codec_points: list[tuple[int, int, float]],
            prefill_per_token_ms: float | None = None) -> "CostModel":
        """Least-squares lines through measured (batch, ms) LM points and (batch, frames, ms) codec points."""
        lm_base, lm_slope = _line([(float(b), ms) for b, ms in lm_points])
        codec_base, codec_slope = _line([(float(b * f), ms) for b, f, ms in codec_points])
        default = cls()
        return cls(lm_base_ms=max(0.0, lm_base), lm_per_request_ms=max(0.0, lm_slope),
                   prefill_per_token_ms=default.prefill_per_token_ms if prefill_per_token_ms is None
                   else max(0.0, prefill_per_token_ms),
                   codec_base_ms=max(0.0, codec_base), codec_per_frame_ms=max(0.0, codec_slope))


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    if not points:
        raise ValueError("need at least one point")
    if len(points) == 1 or len({x for x, _ in points}) == 1:
        return sum(y for _, y in points) / len(points), 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    slope = sxy / sxx
    return my - slope * mx, slope
