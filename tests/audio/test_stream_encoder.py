"""StreamEncoder: the frame count and sizes the gateway paces by, for every codec and wire rate, with
input chunks that never line up with frames."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soxr

from audio_signals import odd_chunks, speechlike
from voxrt.audio import (
    CODECS,
    OpusDecoder,
    StreamEncoder,
    alaw_decode,
    mulaw_decode,
    pcm16_decode,
)
from voxrt.audio.resample import SOXR_QUALITY

IN_RATE = 24000
OUT_RATES = (8000, 16000, 24000, 48000)
BYTES_PER_SAMPLE = {"pcm16": 2, "mulaw": 1, "alaw": 1}
DECODERS = {"pcm16": pcm16_decode, "mulaw": mulaw_decode, "alaw": alaw_decode}


def encode_stream(encoder: StreamEncoder, signal: np.ndarray, seed: int = 0) -> list[bytes]:
    packets = [packet for chunk in odd_chunks(signal, seed=seed) for packet in encoder.push(chunk)]
    return packets + encoder.finish()


def expected_out_samples(num_in_samples: int, out_rate: int) -> int:
    return (2 * num_in_samples * out_rate + IN_RATE) // (2 * IN_RATE)  # libsoxr rounds half up


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("out_rate", OUT_RATES)
@pytest.mark.parametrize("duration_s", [1.0, 0.55])  # whole frames at every rate; a partial last frame
def test_frame_count_and_sizes(codec, out_rate, duration_s):
    signal = speechlike(round(duration_s * IN_RATE))
    encoder = StreamEncoder(codec, IN_RATE, out_rate, 20)
    packets = encode_stream(encoder, signal, seed=out_rate)
    num_out = expected_out_samples(len(signal), out_rate)
    spf = out_rate // 50
    assert encoder.samples_per_frame == spf and encoder.frame_ms == 20
    assert len(packets) == math.ceil(num_out / spf) == encoder.num_frames_out
    assert encoder.num_samples_out == num_out
    last_samples = num_out - spf * (len(packets) - 1)
    if codec == "opus":
        assert all(isinstance(p, bytes) and len(p) > 0 for p in packets)
        assert encoder.num_padding_samples == spf - last_samples
    else:
        sizes = [len(p) for p in packets]
        width = BYTES_PER_SAMPLE[codec]
        assert sizes[:-1] == [width * spf] * (len(packets) - 1)
        assert sizes[-1] == width * last_samples  # left short, not padded
        assert encoder.num_padding_samples == 0


@pytest.mark.parametrize("codec", ["pcm16", "mulaw", "alaw"])
@pytest.mark.parametrize("out_rate", [8000, 48000])
def test_pcm_codecs_carry_the_resampled_signal(codec, out_rate):
    signal = speechlike(13_201)
    encoder = StreamEncoder(codec, IN_RATE, out_rate, 20)
    decoded = DECODERS[codec](b"".join(encode_stream(encoder, signal)))
    reference = soxr.resample(signal, IN_RATE, out_rate, quality=SOXR_QUALITY)
    tolerance = 1e-4 if codec == "pcm16" else 0.02  # G.711 at ~-14 dBFS: steps of ~1/32 of the level
    np.testing.assert_allclose(decoded, reference, atol=tolerance)


@pytest.mark.parametrize("out_rate", OUT_RATES)
def test_opus_decodes_to_the_resampled_signal(out_rate):
    signal = speechlike(IN_RATE)
    encoder = StreamEncoder("opus", IN_RATE, out_rate, 20)
    packets = encode_stream(encoder, signal)
    decoder = OpusDecoder(out_rate)
    decoded = np.concatenate([decoder.decode(p, encoder.samples_per_frame) for p in packets])
    assert len(decoded) == len(packets) * encoder.samples_per_frame
    reference = soxr.resample(signal, IN_RATE, out_rate, quality=SOXR_QUALITY)
    lag = encoder.lookahead_samples
    n = len(reference) - lag
    assert np.corrcoef(reference[:n], decoded[lag : lag + n])[0, 1] > 0.95


@pytest.mark.parametrize("frame_ms", [10, 40, 60])
def test_other_frame_durations(frame_ms):
    encoder = StreamEncoder("opus", IN_RATE, 48000, frame_ms)
    packets = encode_stream(encoder, speechlike(10_000))
    assert encoder.samples_per_frame == 48 * frame_ms
    assert len(packets) == math.ceil(20_000 / (48 * frame_ms))


def test_identity_rate_exact_frames_leave_nothing_for_finish():
    encoder = StreamEncoder("pcm16", 24000, 24000, 20)
    packets = encoder.push(speechlike(480 * 3))
    assert [len(p) for p in packets] == [960] * 3
    assert encoder.finish() == []
    assert encoder.num_samples_out == 1440


def test_finish_without_input_is_empty():
    for codec in CODECS:
        encoder = StreamEncoder(codec, IN_RATE, 16000, 20)
        assert encoder.finish() == []
        assert encoder.num_samples_out == 0 and encoder.num_frames_out == 0


def test_finished_encoder_rejects_more_input():
    encoder = StreamEncoder("mulaw", IN_RATE, 8000, 20)
    encoder.push(speechlike(100))
    encoder.finish()
    assert encoder.is_finished
    with pytest.raises(RuntimeError, match="finished"):
        encoder.push(speechlike(100))
    with pytest.raises(RuntimeError, match="finished"):
        encoder.finish()


def test_audio_ms_from_num_samples_out():
    encoder = StreamEncoder("opus", IN_RATE, 48000, 20)
    encode_stream(encoder, speechlike(IN_RATE * 3 // 4))  # 750 ms
    assert encoder.num_samples_out * 1000 / 48000 == 750.0
    assert encoder.num_frames_out * encoder.frame_ms == 760  # 38 frames, the last padded


def test_bad_arguments_name_the_allowed_values():
    with pytest.raises(ValueError, match=r"\['opus', 'pcm16', 'mulaw', 'alaw'\]"):
        StreamEncoder("mp3", IN_RATE, 48000, 20)
    with pytest.raises(ValueError, match=r"\[8000, 16000, 24000, 48000\]"):
        StreamEncoder("opus", IN_RATE, 44100, 20)
    with pytest.raises(ValueError, match=r"\[10, 20, 40, 60\]"):
        StreamEncoder("pcm16", IN_RATE, 16000, 30)
    with pytest.raises(ValueError, match="input rate"):
        StreamEncoder("pcm16", 0, 16000, 20)
