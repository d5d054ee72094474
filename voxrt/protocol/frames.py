"""Binary audio frames, server -> client: a 12-byte big-endian header, then one frame of audio.

    offset size field
    0      1    kind      = 1 (audio)
    1      1    flags     bit 0: first frame of the context, bit 1: last frame of the context
    2      2    index     the context's index from `context.started` (u16)
    4      4    seq       frame number within the context, from 0, no gaps (u32)
    8      4    pts_ms    start time of the frame in the context's audio (u32)

protocol.md, "Binary audio frames". Big-endian ("network order") so that a browser reads it with the
DataView defaults.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

KIND_AUDIO = 1
FLAG_FIRST = 1
FLAG_LAST = 2
HEADER_BYTES = 12

MAX_U16 = 0xFFFF
MAX_U32 = 0xFFFF_FFFF

_HEADER = struct.Struct(">BBHII")
assert _HEADER.size == HEADER_BYTES


@dataclass(frozen=True)
class AudioFrameHeader:
    kind: int
    flags: int
    index: int
    seq: int
    pts_ms: int

    @property
    def is_first(self) -> bool:
        return bool(self.flags & FLAG_FIRST)

    @property
    def is_last(self) -> bool:
        return bool(self.flags & FLAG_LAST)


def _check_range(name: str, value: int, maximum: int) -> None:
    # bool is an int subclass; a True index is a caller bug, not index 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= maximum:
        raise ValueError(f"{name} must be in [0, {maximum}], got {value}")


def encode_audio_frame(index: int, seq: int, pts_ms: int, payload: bytes, *, is_first: bool,
                       is_last: bool) -> bytes:
    """Header + payload, ready for a binary WebSocket frame. A one-frame context is both first and last."""
    flags = (FLAG_FIRST if is_first else 0) | (FLAG_LAST if is_last else 0)
    # The gateway's per-frame path: plain ints and bytes in range pack at once (struct range-checks them);
    # anything else takes the checks below, which say what is wrong.
    if type(index) is int and type(seq) is int and type(pts_ms) is int and type(payload) is bytes:
        try:
            return _HEADER.pack(KIND_AUDIO, flags, index, seq, pts_ms) + payload
        except struct.error:
            pass
    _check_range("index", index, MAX_U16)
    _check_range("seq", seq, MAX_U32)
    _check_range("pts_ms", pts_ms, MAX_U32)
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise ValueError(f"payload must be bytes, got {type(payload).__name__}")
    return _HEADER.pack(KIND_AUDIO, flags, index, seq, pts_ms) + bytes(payload)


def decode_audio_frame(data: bytes) -> tuple[AudioFrameHeader, bytes]:
    """The inverse of `encode_audio_frame`, for clients and tests. Flag bits other than FIRST and LAST are
    kept in `flags` (a later version may define them) rather than rejected."""
    if len(data) < HEADER_BYTES:
        raise ValueError(f"audio frame must hold at least {HEADER_BYTES} header bytes, got {len(data)}")
    kind, flags, index, seq, pts_ms = _HEADER.unpack_from(data, 0)
    if kind != KIND_AUDIO:
        raise ValueError(f"unknown frame kind: expected {KIND_AUDIO} (audio), got {kind}")
    return AudioFrameHeader(kind, flags, index, seq, pts_ms), bytes(data[HEADER_BYTES:])
