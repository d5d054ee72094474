"""Streaming resampling equals one-shot resampling of the whole signal."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from audio_signals import odd_chunks, sine, speechlike
from voxrt.audio import StreamResampler
from voxrt.audio.resample import SOXR_QUALITY


def expected_length(num_samples: int, in_rate: int, out_rate: int) -> int:
    """libsoxr rounds half up (6172.5 -> 6173), not to even as Python's round() does."""
    return (2 * num_samples * out_rate + in_rate) // (2 * in_rate)


@pytest.mark.parametrize(
    "in_rate, out_rate", [(24000, 8000), (24000, 16000), (24000, 48000), (22050, 48000), (48000, 24000), (16000, 24000)]
)
@pytest.mark.parametrize("num_samples", [1, 999, 12_345])
def test_streaming_equals_one_shot(in_rate, out_rate, num_samples):
    signal = speechlike(num_samples, seed=num_samples)
    resampler = StreamResampler(in_rate, out_rate)
    parts = [resampler.process(chunk) for chunk in odd_chunks(signal, seed=in_rate + out_rate)]
    streamed = np.concatenate([*parts, resampler.flush()])
    reference = soxr.resample(signal, in_rate, out_rate, quality=SOXR_QUALITY)
    assert streamed.dtype == np.float32
    assert len(streamed) == len(reference) == expected_length(num_samples, in_rate, out_rate)
    np.testing.assert_allclose(streamed, reference, atol=1e-5)


def test_output_is_time_aligned_sine():
    """soxr compensates its filter delay: output sample k is the input at time k / out_rate."""
    resampler = StreamResampler(24000, 16000)
    x = sine(1000, 0.5, 24000)
    y = np.concatenate([resampler.process(c) for c in odd_chunks(x)] + [resampler.flush()])
    expected = sine(1000, 0.5, 16000)
    middle = slice(800, 7200)  # away from the edges, where the filter sees the signal's start and end
    assert np.max(np.abs(y[middle] - expected[middle])) < 1e-3


def test_identity_is_a_copy_free_passthrough():
    resampler = StreamResampler(24000, 24000)
    x = speechlike(480)
    assert resampler.process(x) is x
    assert resampler.flush().shape == (0,)
    assert resampler.delay_samples == 0


def test_flush_resets_for_the_next_stream():
    x = speechlike(2400)
    resampler = StreamResampler(24000, 8000)
    first = np.concatenate([resampler.process(x), resampler.flush()])
    second = np.concatenate([resampler.process(x), resampler.flush()])
    np.testing.assert_array_equal(first, second)


def test_holds_samples_until_flush():
    resampler = StreamResampler(24000, 48000)
    out = resampler.process(speechlike(480))  # 20 ms: less than libsoxr's block
    assert len(out) < 960
    assert len(out) + len(resampler.flush()) == 960


def test_accepts_strided_and_float64_input():
    x = speechlike(4800).astype(np.float64)[::2]  # non-contiguous float64 view
    resampler = StreamResampler(12000, 24000)
    y = np.concatenate([resampler.process(x), resampler.flush()])
    np.testing.assert_allclose(y, soxr.resample(x.astype(np.float32), 12000, 24000), atol=1e-5)


@pytest.mark.parametrize("bad", [0, -8000, 8000.5, "24000"])
def test_bad_rates(bad):
    with pytest.raises(ValueError, match="positive integers"):
        StreamResampler(bad, 8000)
    with pytest.raises(ValueError, match="positive integers"):
        StreamResampler(8000, bad)


def test_rejects_multichannel():
    with pytest.raises(ValueError, match="1-D"):
        StreamResampler(24000, 8000).process(np.zeros((10, 2), dtype=np.float32))


def test_process_pcm16_chunks_equal_one_shot_and_flush_at_the_end():
    from voxrt.audio.pcm import pcm16_decode, pcm16_encode

    data = pcm16_encode(speechlike(24000))
    expected = soxr.resample(pcm16_decode(data), 48000, 22050, quality=SOXR_QUALITY)
    resampler = StreamResampler(48000, 22050)
    step = 1920  # 20 ms of s16 at 48 kHz
    pieces = [resampler.process_pcm16(data[i:i + step], last=i + step >= len(data)) for i in range(0, len(data), step)]
    out = np.concatenate(pieces)
    assert out.dtype == np.float32 and len(out) == len(expected)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    with pytest.raises(ValueError, match="even number"):
        resampler.process_pcm16(b"\x00", last=True)
