"""Decoding helpers for the compat tests (tests/compat/): durations of encoded and raw audio."""

from __future__ import annotations

import io

import av

TINY_CHARS_PER_S = 15  # the tiny model stops after a length proportional to its text (README)


def decoded_seconds(data: bytes, fmt: str | None = None) -> tuple[float, int]:
    """(duration, sample rate) of an encoded file by decoding every frame with PyAV (FFmpeg)."""
    with av.open(io.BytesIO(data), format=fmt) as container:
        num_samples, rate = 0, None
        for frame in container.decode(audio=0):
            num_samples += frame.samples
            rate = frame.sample_rate
    assert rate, "no audio frames decoded"
    return num_samples / rate, rate


def s16_seconds(data: bytes, rate: int) -> float:
    assert len(data) % 2 == 0
    return len(data) / 2 / rate
