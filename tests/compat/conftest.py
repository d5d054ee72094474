"""A live server (tiny model, CPU engine) per test module, and decoding helpers for the compat tests."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from voxrt_live import live_server  # tests/support, on pytest's pythonpath

TINY_CHARS_PER_S = 15  # the tiny model stops after a length proportional to its text (README)


@pytest.fixture(scope="module")
def live():
    with live_server() as server:
        yield server


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


def rms(data: bytes) -> float:
    pcm = np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float64)
    return float(np.sqrt(np.mean(pcm ** 2))) if len(pcm) else 0.0
