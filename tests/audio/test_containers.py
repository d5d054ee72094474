"""WAV headers read back by the standard library's `wave`; Ogg Opus pages parsed back here field by field
(RFC 3533 §6, RFC 7845 §5) and their packets decoded."""

from __future__ import annotations

import io
import struct
import wave
from dataclasses import dataclass

import numpy as np
import pytest

from audio_signals import odd_chunks, speechlike
from voxrt.audio import OggOpusWriter, OpusDecoder, StreamEncoder, pcm16_encode, wav_header
from voxrt.audio.containers import ogg_crc32, opus_packet_samples_48k

# --- WAV ---


def test_wav_header_with_known_size_reads_back():
    pcm = pcm16_encode(speechlike(1234))
    data = wav_header(24000, data_bytes=len(pcm)) + pcm
    assert len(data) - len(pcm) == 44
    with wave.open(io.BytesIO(data)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (1, 2, 24000)
        assert reader.getnframes() == 1234
        assert reader.readframes(1234) == pcm
    assert struct.unpack_from("<I", data, 4)[0] == 36 + len(pcm)


def test_wav_streaming_header():
    header = wav_header(8000, num_channels=2, bits_per_sample=16)
    riff, riff_bytes, wave_id, fmt, fmt_bytes, audio_format, channels, rate, byte_rate, align, bits, data_id, size = (
        struct.unpack("<4sI4s4sIHHIIHH4sI", header)
    )
    assert (riff, wave_id, fmt, data_id) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert riff_bytes == size == 0xFFFFFFFF
    assert (fmt_bytes, audio_format, channels, rate, byte_rate, align, bits) == (16, 1, 2, 8000, 32000, 4, 16)


def test_wav_rejects_bad_arguments():
    with pytest.raises(ValueError, match="bits_per_sample"):
        wav_header(8000, bits_per_sample=12)
    with pytest.raises(ValueError, match="data_bytes"):
        wav_header(8000, data_bytes=-1)
    with pytest.raises(ValueError, match="sample_rate"):
        wav_header(0)


# --- Ogg CRC ---


def reference_crc(data: bytes) -> int:
    """Bit by bit, straight from RFC 3533 §6: poly 0x04C11DB7, init 0, MSB first, no final XOR."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def test_ogg_crc_matches_the_reference():
    assert ogg_crc32(b"123456789") == 0x89A1897F  # the catalogued check value of this CRC
    assert ogg_crc32(b"") == 0
    rng = np.random.default_rng(7)
    for size in (1, 3, 255, 1000):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert ogg_crc32(data) == reference_crc(data)


# --- Ogg pages ---


@dataclass
class Page:
    flags: int
    granule: int
    serial: int
    sequence: int
    segments: list[int]
    body: bytes


def parse_pages(stream: bytes) -> list[Page]:
    pages, offset = [], 0
    while offset < len(stream):
        assert stream[offset : offset + 4] == b"OggS", f"no capture pattern at {offset}"
        fields = struct.unpack_from("<BBqIIIB", stream, offset + 4)
        version, flags, granule, serial, sequence, crc, num_segments = fields
        assert version == 0
        segments = list(stream[offset + 27 : offset + 27 + num_segments])
        end = offset + 27 + num_segments + sum(segments)
        raw = bytearray(stream[offset:end])
        raw[22:26] = b"\0\0\0\0"
        assert reference_crc(bytes(raw)) == crc, f"bad CRC on page {sequence}"
        pages.append(Page(flags, granule, serial, sequence, segments, stream[offset + 27 + num_segments : end]))
        offset = end
    return pages


def packets_of(page: Page) -> list[bytes]:
    """Undoes the lacing (whole packets only: the writer never continues a packet across pages)."""
    packets, start, length = [], 0, 0
    for value in page.segments:
        length += value
        if value < 255:
            packets.append(page.body[start : start + length])
            start, length = start + length, 0
    assert length == 0, "packet continues on the next page"
    return packets


def write_stream(duration_samples_24k: int, packets_per_page: int = 5) -> tuple[bytes, StreamEncoder, list[bytes]]:
    encoder = StreamEncoder("opus", 24000, 48000, 20)
    writer = OggOpusWriter(48000, 20, pre_skip_samples=encoder.lookahead_samples)
    out = [writer.header_pages()]
    pending: list[bytes] = []
    all_packets: list[bytes] = []
    for chunk in odd_chunks(speechlike(duration_samples_24k)):
        pending += encoder.push(chunk)
        while len(pending) > packets_per_page:  # keep some back so the EOS page holds the padded one
            out.append(writer.page(pending[:packets_per_page], is_last=False))
            all_packets += pending[:packets_per_page]
            pending = pending[packets_per_page:]
    pending += encoder.finish()
    out.append(writer.page(pending, is_last=True, num_padding_samples=encoder.num_padding_samples))
    all_packets += pending
    return b"".join(out), encoder, all_packets


@pytest.mark.parametrize("duration_samples_24k", [24000, 24100, 24300, 24400])  # padding 0, 760, 360, 160
def test_ogg_opus_stream_parses_and_decodes(duration_samples_24k):
    stream, encoder, packets = write_stream(duration_samples_24k)
    pages = parse_pages(stream)

    assert [p.sequence for p in pages] == list(range(len(pages)))
    assert {p.serial for p in pages} == {0x766F7872}
    assert [p.flags for p in pages] == [0x02] + [0] * (len(pages) - 2) + [0x04]  # BOS first, EOS last only

    head, tags = packets_of(pages[0]), packets_of(pages[1])
    magic, version, channels, pre_skip, input_rate, gain, family = struct.unpack("<8sBBHIhB", head[0])
    assert (magic, version, channels, pre_skip, input_rate, gain, family) == (b"OpusHead", 1, 1, 312, 48000, 0, 0)
    assert tags[0][:8] == b"OpusTags"
    vendor_bytes = struct.unpack_from("<I", tags[0], 8)[0]
    assert tags[0][12 : 12 + vendor_bytes] == b"voxrt"
    assert struct.unpack_from("<I", tags[0], 12 + vendor_bytes)[0] == 0  # no user comments
    assert pages[0].granule == pages[1].granule == 0

    audio_pages = pages[2:]
    assert [pkt for page in audio_pages for pkt in packets_of(page)] == packets
    granules = [p.granule for p in audio_pages]
    assert all(b > a for a, b in zip(granules, granules[1:]))
    counted = 0
    for page in audio_pages[:-1]:
        counted += 960 * len(packets_of(page))
        assert page.granule == counted  # RFC 7845 §4: samples in all packets completed so far

    decoder = OpusDecoder(48000)
    decoded = np.concatenate([decoder.decode(p, 960) for p in packets])
    assert len(decoded) == 960 * len(packets) == 960 * encoder.num_frames_out
    # end trimming (RFC 7845 §4.4): playback = final granule - pre-skip = the real samples, unless the
    # padding was shorter than the pre-skip (then the decoded total bounds it)
    assert granules[-1] == min(pre_skip + encoder.num_samples_out, len(decoded))


def test_many_packets_split_across_pages():
    encoder = StreamEncoder("opus", 48000, 48000, 10)
    packets = [p for chunk in odd_chunks(speechlike(48000 * 4)) for p in encoder.push(chunk)] + encoder.finish()
    assert len(packets) == 400  # 400 packets of >= 1 lacing value: more than one page can hold
    writer = OggOpusWriter(48000, 10)
    stream = writer.header_pages() + writer.page(packets, is_last=True)
    audio_pages = parse_pages(stream)[2:]
    assert len(audio_pages) >= 2 and all(len(p.segments) <= 255 for p in audio_pages)
    assert [pkt for page in audio_pages for pkt in packets_of(page)] == packets
    assert [p.flags for p in audio_pages] == [0] * (len(audio_pages) - 1) + [0x04]
    assert audio_pages[-1].granule == 480 * 400


def test_empty_eos_page_after_the_audio():
    encoder = StreamEncoder("opus", 24000, 24000, 20)
    packets = encoder.push(speechlike(4800))
    writer = OggOpusWriter(24000, 20, pre_skip_samples=312)
    stream = writer.header_pages() + writer.page(packets, is_last=False) + writer.page([], is_last=False)
    stream += writer.page([], is_last=True)
    pages = parse_pages(stream)
    assert len(pages) == 4  # the empty non-final page was not written
    assert pages[-1].segments == [] and pages[-1].flags == 0x04
    assert pages[-2].granule == 960 * 10
    assert pages[-1].granule == -1  # RFC 3533 §6: no packet completes on it (opusinfo warns otherwise)


def test_writer_state_and_packet_checks():
    writer = OggOpusWriter(48000, 20)
    with pytest.raises(RuntimeError, match="headers_pending"):
        writer.page([b"\x08"], is_last=False)
    writer.header_pages()
    with pytest.raises(RuntimeError, match="actual: audio"):
        writer.header_pages()
    ten_ms_celt = bytes([(18 << 3) | 0, 0])  # CELT 10 ms
    with pytest.raises(ValueError, match="frame_ms=20"):
        writer.page([ten_ms_celt], is_last=False)
    with pytest.raises(ValueError, match="empty"):
        writer.page([b""], is_last=False)
    with pytest.raises(ValueError, match="is_last"):
        writer.page([bytes([(19 << 3), 0])], is_last=False, num_padding_samples=100)
    writer.page([bytes([(19 << 3), 0])], is_last=True)
    with pytest.raises(RuntimeError, match="actual: ended"):
        writer.page([], is_last=True)


@pytest.mark.parametrize("sample_rate", [8000, 16000, 24000, 48000])
@pytest.mark.parametrize("frame_ms", [10, 20, 40, 60])
def test_packet_duration_from_the_toc_byte(sample_rate, frame_ms):
    encoder = StreamEncoder("opus", sample_rate, sample_rate, frame_ms)
    packets = encoder.push(speechlike(encoder.samples_per_frame * 2))
    assert [opus_packet_samples_48k(p) for p in packets] == [48 * frame_ms] * 2


def test_toc_frame_counts():
    assert opus_packet_samples_48k(bytes([(16 << 3) | 1])) == 2 * 120  # code 1: two 2.5 ms CELT frames
    assert opus_packet_samples_48k(bytes([(1 << 3) | 3, 3])) == 3 * 960  # code 3: three 20 ms SILK frames
    with pytest.raises(ValueError, match="frame count"):
        opus_packet_samples_48k(bytes([3]))
