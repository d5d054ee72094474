"""G.711 mu-law and A-law (ITU-T Rec. G.711, 11/1988): 8-bit logarithmic telephony codes, vectorized.

The companding follows the Recommendation's tables (mu-law: Tables 2a/2b, A-law: Tables 1a/1b) as coded in
the public-domain Sun Microsystems `g711.c` (the same algorithm as ITU-T G.191's STL `g711.c` and Python's
former `audioop.lin2ulaw`/`lin2alaw`). Both laws are computed once for all 65536 16-bit inputs and all 256
codes at import, so encoding is one table lookup per sample and the per-sample logic below is never on the
hot path. `audioop` is deprecated (PEP 594) and gone in Python 3.13, so it is not used.

Input is float32 in [-1, 1], converted to 16-bit linear by `pcm.float_to_int16` (same clipping and
rounding as pcm16), then companded. Decoding returns float32 on the same scale.
"""

from __future__ import annotations

import numpy as np

from voxrt.audio.pcm import float_to_int16, int16_to_float

# mu-law (G.711 §3, Table 2): the sign bit, 3 segment bits and 4 step bits, all inverted on the wire.
# The magnitude is coded from 14-bit linear with a bias of 33 (132 at 16 bits) so that every segment
# starts at a power of two; segment ends below are in those biased 14-bit units.
_MULAW_BIAS_14BIT = 0x21
_MULAW_CLIP_14BIT = 8159  # the largest magnitude that, biased, still fits segment 7
_MULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])

# A-law (G.711 §2, Table 1): 13-bit linear, segments 0 and 1 share one step size; even bits are inverted
# on the wire (XOR 0x55) to keep enough ones for line clock recovery.
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


def _mulaw_compress(linear_16bit: np.ndarray) -> np.ndarray:
    """int16 -> mu-law codes (uint8). Sun g711.c `linear2ulaw`, vectorized."""
    value = linear_16bit.astype(np.int32) >> 2  # 14-bit, arithmetic shift as in g711.c
    is_negative = value < 0
    mask = np.where(is_negative, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(value), _MULAW_CLIP_14BIT) + _MULAW_BIAS_14BIT
    segment = np.searchsorted(_MULAW_SEGMENT_ENDS, magnitude, side="left")  # first end >= magnitude
    code = (segment << 4) | ((magnitude >> (segment + 1)) & 0xF)
    code = np.where(segment >= 8, 0x7F, code)  # unreachable after the clip; kept as in g711.c
    return (code ^ mask).astype(np.uint8)


def _mulaw_expand(codes: np.ndarray) -> np.ndarray:
    """mu-law codes -> int16 (range +-32124). Sun g711.c `ulaw2linear`, vectorized."""
    inverted = ~codes.astype(np.int32) & 0xFF
    bias_16bit = _MULAW_BIAS_14BIT << 2
    magnitude = (((inverted & 0x0F) << 3) + bias_16bit) << ((inverted & 0x70) >> 4)
    return np.where(inverted & 0x80, bias_16bit - magnitude, magnitude - bias_16bit).astype(np.int16)


def _alaw_compress(linear_16bit: np.ndarray) -> np.ndarray:
    """int16 -> A-law codes (uint8). Sun g711.c `linear2alaw`, vectorized."""
    value = linear_16bit.astype(np.int32) >> 3  # 13-bit
    is_negative = value < 0
    mask = np.where(is_negative, 0x55, 0xD5)  # sign bit set for positive values, then even-bit inversion
    magnitude = np.where(is_negative, -value - 1, value)  # one's complement: -1 codes like 0
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude, side="left")
    shift = np.where(segment < 2, 1, segment)  # segments 0 and 1 share the smallest step (Table 1)
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> shift) & 0xF)
    code = np.where(segment >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)


def _alaw_expand(codes: np.ndarray) -> np.ndarray:
    """A-law codes -> int16 (range +-32256). Sun g711.c `alaw2linear`, vectorized."""
    value = codes.astype(np.int32) ^ 0x55
    step_bits = (value & 0x0F) << 4
    segment = (value & 0x70) >> 4
    magnitude = np.where(
        segment == 0,
        step_bits + 8,  # the middle of the step: the decoder's reconstruction level
        (step_bits + 0x108) << np.maximum(segment - 1, 0),
    )
    return np.where(value & 0x80, magnitude, -magnitude).astype(np.int16)


# Index = the int16 sample's bit pattern read as uint16, so negative samples need no offset.
_ALL_INT16 = np.arange(1 << 16, dtype=np.uint16).view(np.int16)
_ALL_CODES = np.arange(256, dtype=np.uint8)
_MULAW_ENCODE_TABLE = _mulaw_compress(_ALL_INT16)  # [65536] uint8
_ALAW_ENCODE_TABLE = _alaw_compress(_ALL_INT16)  # [65536] uint8
_MULAW_DECODE_TABLE = int16_to_float(_mulaw_expand(_ALL_CODES))  # [256] float32
_ALAW_DECODE_TABLE = int16_to_float(_alaw_expand(_ALL_CODES))  # [256] float32


def mulaw_encode(pcm: np.ndarray) -> bytes:
    """float32 [-1, 1] -> one mu-law byte per sample. 0.0 -> 0xFF, +1.0 -> 0x80, -1.0 -> 0x00."""
    return _MULAW_ENCODE_TABLE[float_to_int16(pcm).view(np.uint16)].tobytes()


def mulaw_decode(data: bytes) -> np.ndarray:
    """mu-law bytes -> float32 samples (full-scale codes decode to +-32124/32767 = +-0.980)."""
    return _MULAW_DECODE_TABLE[np.frombuffer(data, dtype=np.uint8)]


def alaw_encode(pcm: np.ndarray) -> bytes:
    """float32 [-1, 1] -> one A-law byte per sample. 0.0 -> 0xD5, +1.0 -> 0xAA, -1.0 -> 0x2A."""
    return _ALAW_ENCODE_TABLE[float_to_int16(pcm).view(np.uint16)].tobytes()


def alaw_decode(data: bytes) -> np.ndarray:
    """A-law bytes -> float32 samples (full-scale codes decode to +-32256/32767 = +-0.984)."""
    return _ALAW_DECODE_TABLE[np.frombuffer(data, dtype=np.uint8)]
