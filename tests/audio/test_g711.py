"""G.711 against the Recommendation's code values, its quantization bounds, and (exhaustively, where the
interpreter still ships it) the reference `audioop` implementation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from voxrt.audio import alaw_decode, alaw_encode, mulaw_decode, mulaw_encode

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int32)
ALL_AS_FLOAT = np.maximum(ALL_INT16 / 32767.0, -1.0).astype(np.float32)  # encodes back to the same int16


def f(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_mulaw_known_codes():
    assert mulaw_encode(f(0.0, 1.0, -1.0)) == b"\xff\x80\x00"
    # the smallest negative value is the first negative step; negative zero (0x7F) is never produced
    assert mulaw_encode(f(-1 / 32767)) == b"\x7e"
    assert mulaw_decode(b"\xff\x7f\x80\x00").tolist() == pytest.approx([0.0, 0.0, 32124 / 32767, -32124 / 32767])


def test_alaw_known_codes():
    assert alaw_encode(f(0.0, 1.0, -1.0)) == b"\xd5\xaa\x2a"
    assert alaw_encode(f(-1 / 32767)) == b"\x55"
    expected = [8 / 32767, -8 / 32767, 32256 / 32767, -32256 / 32767]  # A-law has no zero level
    assert alaw_decode(b"\xd5\x55\xaa\x2a").tolist() == pytest.approx(expected)


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_matches_reference_implementation_exhaustively(law):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # removed in Python 3.13 (PEP 594)
    encode, decode = (mulaw_encode, mulaw_decode) if law == "ulaw" else (alaw_encode, alaw_decode)
    lin2x, x2lin = (audioop.lin2ulaw, audioop.ulaw2lin) if law == "ulaw" else (audioop.lin2alaw, audioop.alaw2lin)
    assert encode(ALL_AS_FLOAT) == lin2x(ALL_INT16.astype("<i2").tobytes(), 2)
    codes = bytes(range(256))
    expected = np.frombuffer(x2lin(codes, 2), dtype="<i2") / 32767.0
    np.testing.assert_allclose(decode(codes), expected, atol=1e-7)


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_round_trip_error_within_half_a_step(law):
    """G.711 steps double per segment: half a step is at most |x|/32 plus a floor in the first segments
    (mu-law: bias 132 -> (|x| + 132) / 32; A-law: segments 0 and 1 share a step of 16 -> 8), plus the
    encoder's truncation to 14 (mu-law, < 4) or 13 (A-law, < 8) bits, all in 16-bit units."""
    encode, decode = (mulaw_encode, mulaw_decode) if law == "ulaw" else (alaw_encode, alaw_decode)
    magnitude = np.abs(ALL_INT16).astype(np.float64)
    error = np.abs(decode(encode(ALL_AS_FLOAT)).astype(np.float64) * 32767.0 - ALL_INT16)
    if law == "ulaw":
        bound = (magnitude + 132) / 32 + 4
    else:
        bound = np.maximum(8, magnitude / 32) + 8
    assert np.all(error <= bound + 0.01), float(np.max(error - bound))
    # sanity against a broken table: uniform error over half a step averages ~1/128 of the magnitude
    assert np.mean(error / (magnitude + 132)) < 1 / 64


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_monotonic(law):
    encode, decode = (mulaw_encode, mulaw_decode) if law == "ulaw" else (alaw_encode, alaw_decode)
    decoded = decode(encode(ALL_AS_FLOAT))
    assert np.all(np.diff(decoded) >= 0)
    assert len(np.unique(decoded)) == (255 if law == "ulaw" else 256)  # mu-law has +0 and -0


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_codes_survive_decode_then_encode(law):
    encode, decode = (mulaw_encode, mulaw_decode) if law == "ulaw" else (alaw_encode, alaw_decode)
    codes = bytes(code for code in range(256) if not (law == "ulaw" and code == 0x7F))  # -0 re-encodes as +0
    assert encode(decode(codes)) == codes


def test_lengths_and_dtype(rng):
    x = rng.uniform(-1, 1, 1001).astype(np.float32)
    for encode, decode in ((mulaw_encode, mulaw_decode), (alaw_encode, alaw_decode)):
        data = encode(x)
        assert isinstance(data, bytes) and len(data) == 1001
        y = decode(data)
        assert y.dtype == np.float32 and y.shape == (1001,)
        assert encode(np.zeros(0, dtype=np.float32)) == b""
