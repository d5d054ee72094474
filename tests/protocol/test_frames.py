"""Binary audio frame headers: exact layout, round trip, flags, ranges, errors."""

from __future__ import annotations

import struct

import pytest

from voxrt.protocol.frames import (FLAG_FIRST, FLAG_LAST, HEADER_BYTES, KIND_AUDIO, AudioFrameHeader,
                                   decode_audio_frame, encode_audio_frame)


def test_constants_match_protocol():
    assert (KIND_AUDIO, FLAG_FIRST, FLAG_LAST, HEADER_BYTES) == (1, 1, 2, 12)


def test_layout_is_big_endian_and_exact():
    data = encode_audio_frame(0x0102, 0x03040506, 0x0708090A, b"\xAA\xBB", is_first=True, is_last=False)
    assert data == bytes([1, 1, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0xAA, 0xBB])
    assert struct.unpack(">BBHII", data[:12]) == (1, 1, 0x0102, 0x03040506, 0x0708090A)


@pytest.mark.parametrize(("is_first", "is_last", "flags"), [(False, False, 0), (True, False, 1), (False, True, 2),
                                                            (True, True, 3)])
def test_flags(is_first, is_last, flags):
    header, _ = decode_audio_frame(encode_audio_frame(1, 0, 0, b"", is_first=is_first, is_last=is_last))
    assert header.flags == flags
    assert header.is_first is is_first and header.is_last is is_last


@pytest.mark.parametrize(("index", "seq", "pts_ms"), [(0, 0, 0), (1, 7, 140), (0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF)])
def test_round_trip(index, seq, pts_ms):
    payload = bytes(range(256)) * 3
    header, body = decode_audio_frame(encode_audio_frame(index, seq, pts_ms, payload, is_first=False, is_last=True))
    assert header == AudioFrameHeader(KIND_AUDIO, FLAG_LAST, index, seq, pts_ms)
    assert body == payload


def test_payload_may_be_bytearray_or_memoryview_and_empty():
    assert encode_audio_frame(1, 0, 0, bytearray(b"ab"), is_first=True, is_last=True)[12:] == b"ab"
    assert encode_audio_frame(1, 0, 0, memoryview(b"cd"), is_first=True, is_last=True)[12:] == b"cd"
    assert len(encode_audio_frame(1, 0, 0, b"", is_first=True, is_last=True)) == HEADER_BYTES


@pytest.mark.parametrize(("field", "value"), [("index", -1), ("index", 0x10000), ("seq", -1), ("seq", 1 << 32),
                                              ("pts_ms", -1), ("pts_ms", 1 << 32), ("index", 1.0), ("seq", True)])
def test_encode_rejects_out_of_range(field, value):
    args = {"index": 1, "seq": 0, "pts_ms": 0, field: value}
    with pytest.raises(ValueError, match=field):
        encode_audio_frame(args["index"], args["seq"], args["pts_ms"], b"", is_first=False, is_last=False)


def test_encode_rejects_non_bytes_payload():
    with pytest.raises(ValueError, match="payload"):
        encode_audio_frame(1, 0, 0, "text", is_first=False, is_last=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 11])
def test_decode_rejects_short(size):
    with pytest.raises(ValueError, match="12"):
        decode_audio_frame(b"\x01" * size)


@pytest.mark.parametrize("kind", [0, 2, 255])
def test_decode_rejects_unknown_kind(kind):
    data = bytes([kind]) + encode_audio_frame(1, 0, 0, b"x", is_first=False, is_last=False)[1:]
    with pytest.raises(ValueError, match="kind"):
        decode_audio_frame(data)


def test_decode_keeps_unknown_flag_bits():
    data = bytearray(encode_audio_frame(1, 0, 0, b"", is_first=True, is_last=False))
    data[1] |= 0x80
    header, _ = decode_audio_frame(bytes(data))
    assert header.flags == 0x81 and header.is_first and not header.is_last


def test_header_is_frozen():
    header = AudioFrameHeader(1, 0, 1, 0, 0)
    with pytest.raises(AttributeError):
        header.seq = 3  # type: ignore[misc]
