from __future__ import annotations

import numpy as np
import pytest

from voxrt.audio import pcm16_decode, pcm16_encode


def test_known_values_clipped_and_rounded():
    x = np.array([0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-5, np.nan, np.inf, -np.inf], dtype=np.float32)
    codes = np.frombuffer(pcm16_encode(x), dtype="<i2")
    assert codes.tolist() == [0, 32767, -32767, 16384, 32767, -32767, 0, 0, 32767, -32767]


def test_little_endian_layout():
    assert pcm16_encode(np.array([1.0, -1.0 / 32767], dtype=np.float32)) == b"\xff\x7f\xff\xff"


def test_round_trip_within_half_a_step(rng):
    x = rng.uniform(-1, 1, 10_000).astype(np.float32)
    y = pcm16_decode(pcm16_encode(x))
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.max(np.abs(y - x)) <= 0.5 / 32767 + 1e-7


def test_decode_full_scale_and_errors():
    assert pcm16_decode(np.array([-32768, 32767], dtype="<i2").tobytes()).tolist() == [-1.0, 1.0]
    assert pcm16_decode(b"").shape == (0,)
    with pytest.raises(ValueError, match="even"):
        pcm16_decode(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="1-D"):
        pcm16_encode(np.zeros((2, 3), dtype=np.float32))


def test_accepts_float64_and_lists():
    assert pcm16_encode([0.0, 1.0]) == pcm16_encode(np.array([0.0, 1.0], dtype=np.float64))
