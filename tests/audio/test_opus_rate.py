"""Opus fed at the model's rate (`StreamEncoder(opus_rate="auto")`, voxrt/audio/encoder.py): which rate libopus
codes at, that the stream's counts stay at the wire rate, and that what a 48 kHz decoder hears is as close to
the model's audio as through the resampler, at the same bitrate."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from voxrt.audio import StreamEncoder
from voxrt.audio.encoder import opus_codec_rate
from voxrt.audio.opus import OpusDecoder, default_bitrate
from voxrt.audio.resample import SOXR_QUALITY


@pytest.mark.parametrize("in_rate, out_rate, opus_rate, expected", [
    (24000, 48000, "auto", 24000),   # Qwen3-TTS under a 48 kHz wire: no resampler
    (24000, 48000, "wire", 48000),   # asked for the wire rate: resampled, as before
    (16000, 48000, "auto", 16000),
    (8000, 16000, "auto", 8000),
    (12000, 48000, "auto", 12000),   # an Opus input rate the wire list leaves out is still one libopus takes
    (16000, 24000, "auto", 24000),   # 16 kHz does not divide 24 kHz: resampled
    (22050, 48000, "auto", 48000),   # not an Opus rate
    (44100, 48000, "auto", 48000),
    (48000, 24000, "auto", 24000),   # above the wire rate: down to what the client asked for
    (48000, 48000, "auto", 48000),
])
def test_codec_rate(in_rate, out_rate, opus_rate, expected):
    assert opus_codec_rate(in_rate, out_rate, opus_rate) == expected
    assert StreamEncoder("opus", in_rate, out_rate, 20, opus_rate=opus_rate).codec_rate == expected


def test_bad_opus_rate_is_a_clear_error():
    with pytest.raises(ValueError, match=r"opus_rate must be one of \['auto', 'wire'\]"):
        StreamEncoder("opus", 24000, 48000, 20, opus_rate="native")


def test_pcm_codecs_ignore_it():
    for codec in ("pcm16", "mulaw", "alaw"):
        assert StreamEncoder(codec, 24000, 48000 if codec == "pcm16" else 8000, 20).codec_rate in (48000, 8000)


def _speechlike(n: int, rate: int, seed: int = 0) -> np.ndarray:
    """Harmonics of a wandering pitch with an envelope, all below 10 kHz (a 24 kHz model's band)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(rng.uniform(0.2, 1.0) / k * np.sin(k * phase) for k in range(1, 60) if 140 * k < 9000)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    return (0.25 * x * envelope / np.abs(x).max()).astype(np.float32)


def _chunks(x: np.ndarray, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, len(x)), size=12, replace=False))
    return np.split(x, cuts)


def _stream(x: np.ndarray, opus_rate: str) -> tuple[StreamEncoder, list[bytes]]:
    encoder = StreamEncoder("opus", 24000, 48000, 20, opus_signal="music", opus_rate=opus_rate)
    packets = [p for c in _chunks(x, 5) for p in encoder.push(c)] + encoder.finish()
    return encoder, packets


def _snr_db(reference: np.ndarray, decoded: np.ndarray, lag: int) -> float:
    n = min(len(reference), len(decoded) - lag)
    ref, out = reference[2000:n - 2000], decoded[lag + 2000:lag + n - 2000]
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - out) ** 2)))


def test_same_counts_and_as_close_to_the_model_at_the_same_bitrate():
    x = _speechlike(24000 * 3 + 321, 24000)
    native, native_packets = _stream(x, "auto")
    resampled, resampled_packets = _stream(x, "wire")
    assert (native.codec_rate, resampled.codec_rate) == (24000, 48000)
    # the counts the gateway and the Ogg writer read are at the wire rate, and equal either way
    assert native.num_samples_out == resampled.num_samples_out == 2 * len(x)
    assert native.num_padding_samples == resampled.num_padding_samples
    assert native.lookahead_samples == resampled.lookahead_samples == 312  # the Ogg pre-skip at 48 kHz
    assert len(native_packets) == len(resampled_packets) == -(-2 * len(x) // 960)
    # the bitrate is libopus's own for the wire rate, not the half it would pick for 24 kHz input
    assert native._opus.bitrate == default_bitrate(48000, 20) == resampled._opus.bitrate
    native_bytes, resampled_bytes = sum(map(len, native_packets)), sum(map(len, resampled_packets))
    assert 0.85 < native_bytes / resampled_bytes < 1.15
    # a 48 kHz decoder gets 960 samples a packet from both, and the model's audio as closely from both
    reference = soxr.resample(x, 24000, 48000, quality=SOXR_QUALITY).astype(np.float32)
    snr = {}
    for name, packets in (("native", native_packets), ("resampled", resampled_packets)):
        decoder = OpusDecoder(48000)
        pieces = [decoder.decode(p, 960) for p in packets]
        assert all(len(piece) == 960 for piece in pieces)
        snr[name] = _snr_db(reference, np.concatenate(pieces), 312)
    assert snr["resampled"] > 12, snr  # the comparison means something: the codec is working
    assert snr["native"] > snr["resampled"] - 1.0, snr


def test_held_audio_is_only_the_partial_frame():
    encoder = StreamEncoder("opus", 24000, 48000, 20)
    frames = encoder.split(np.zeros(480 * 3 + 100, np.float32))
    assert len(frames) == 3 and all(f.shape == (480,) for f in frames)
    assert encoder.held_ms == pytest.approx(100 / 24)  # 100 samples at 24 kHz; no resampler holding audio
    assert encoder.num_samples_out == 2 * 480 * 3
    tail = encoder.split_finish()
    assert len(tail) == 1 and encoder.num_padding_samples == 2 * 380
    assert encoder.num_samples_out == 2 * (480 * 3 + 100)
