"""libopus fed 16-bit PCM (round 12): what reaches libopus is the float audio of the path before it (resampled,
clipped, NaN made silence) rounded to 16 bits and nothing else, and the packets are exactly the ones opuslib's
own 16-bit call (the gateway benchmark's floor, voxrt/engine/standin.py) makes of `float_to_int16` of those
frames."""

import numpy as np
import opuslib
import pytest
import soxr

from audio_signals import odd_chunks, speechlike
from voxrt.audio import Framer, OpusDecoder, OpusEncoder, StreamEncoder
from voxrt.audio.opus import clean_float
from voxrt.audio.pcm import FULL_SCALE, float_to_int16
from voxrt.audio.resample import SOXR_QUALITY


def _loud(num_samples: int, in_rate: int) -> np.ndarray:
    """Speech-like audio driven past full scale, with NaN and infinities: every rule of the conversion."""
    x = 4.0 * speechlike(num_samples)
    x[[10, num_samples // 2]] = np.nan
    x[777], x[778] = np.inf, -np.inf
    return x.astype(np.float32)


def _float_frames(signal: np.ndarray, chunks: list[np.ndarray], in_rate: int) -> np.ndarray:
    """The path before round 12: the resampled chunks, clipped and cleaned (`clean_float`), one array."""
    if in_rate == 48000:
        pieces = [clean_float(c, in_place=False) for c in chunks]
    else:
        stream = soxr.ResampleStream(in_rate, 48000, 1, dtype="float32", quality=SOXR_QUALITY)
        pieces = [clean_float(stream.resample_chunk(np.ascontiguousarray(c)), in_place=True) for c in chunks]
        pieces.append(clean_float(stream.resample_chunk(np.zeros(0, np.float32), last=True), in_place=True))
    return np.concatenate(pieces)


@pytest.mark.parametrize("in_rate", [24000, 48000])  # resampled to the wire rate, and as it is
def test_the_stream_feeds_libopus_the_float_audio_rounded_to_16_bits(in_rate):
    signal = _loud(in_rate // 2 + 123, in_rate)
    original = signal.copy()
    chunks = odd_chunks(signal, seed=3, max_chunk=3000)
    stream = StreamEncoder("opus", in_rate, 48000, 20, opus_rate="wire")
    frames = [f for c in chunks for f in stream.split(c)] + stream.split_finish()
    assert all(f.dtype == np.int16 and f.shape == (960,) for f in frames)
    fed = np.concatenate(frames)
    reference = _float_frames(signal, chunks, in_rate)
    n = len(reference)
    assert stream.num_padding_samples == len(fed) - n and stream.num_samples_out == n
    # within the rounding to 16 bits of the float audio, and exactly its `float_to_int16`
    assert np.abs(fed[:n] / FULL_SCALE - reference).max() <= 0.5 / FULL_SCALE + 1e-7
    np.testing.assert_array_equal(fed[:n], float_to_int16(reference))
    assert not fed[n:].any()  # the last frame's padding is silence
    np.testing.assert_array_equal(signal[~np.isnan(original)], original[~np.isnan(original)])  # input untouched
    # the packets: opuslib's own 16-bit call (the floor's) on those frames, byte for byte
    floor = opuslib.Encoder(48000, 1, "audio")
    assert [stream.encode(f) for f in frames] == [floor.encode(f.tobytes(), 960) for f in frames]


def test_encode_converts_float_frames_as_float_to_int16_then_the_16_bit_entry():
    x = clean_float(_loud(9600, 48000), in_place=True)
    ours, floor = OpusEncoder(48000, 20, signal="music"), opuslib.Encoder(48000, 1, "audio")
    floor.signal = 3002
    frames = np.split(x, 10)
    expected = [floor.encode(float_to_int16(f).tobytes(), 960) for f in frames]
    assert [ours.encode(f) for f in frames] == expected
    a, b = OpusEncoder(48000, 20, signal="music"), OpusEncoder(48000, 20, signal="music")
    assert [a.encode(float_to_int16(f)) for f in frames] == expected  # int16 in: as it is
    assert [b.encode_int16(float_to_int16(f)) for f in frames] == expected
    # float64 and lists take encode's conversion; wrong shapes its errors
    assert OpusEncoder(48000, 20).encode_int16(frames[0].astype(np.float64)) == \
        OpusEncoder(48000, 20).encode(frames[0])
    with pytest.raises(ValueError, match="960"):
        OpusEncoder(48000, 20).encode_int16(np.zeros(959, dtype=np.int16))
    with pytest.raises(ValueError, match="1-D"):
        OpusEncoder(48000, 20).encode_int16(np.zeros((2, 960), dtype=np.int16))


@pytest.mark.parametrize("signal", ["auto", "music"])
def test_decoded_audio_is_as_close_to_the_input_as_from_the_float_entry(signal):
    """The 16-bit entry codes the audio at least as faithfully as the float entry: decoded, its error against
    the input (the codec's own loss) is no larger (measured here: equal within 2% with the mode left to libopus,
    ~10% smaller in CELT, "music"). Not sample for sample: a lossy codec's noise moves with any change of its
    input, here the 16-bit rounding (~-100 dBFS, against the codec's ~-20 to -26 dB on this signal)."""
    x = clean_float(soxr.resample(speechlike(48000), 24000, 48000, quality=SOXR_QUALITY), in_place=True)
    frames = np.split(x[: len(x) // 960 * 960], len(x) // 960)
    old, new = OpusEncoder(48000, 20, signal=signal), OpusEncoder(48000, 20, signal=signal)
    d_old, d_new = OpusDecoder(48000), OpusDecoder(48000)
    a = np.concatenate([d_old.decode(old.encode_clean(f), 960) for f in frames])
    b = np.concatenate([d_new.decode(new.encode_int16(float_to_int16(f)), 960) for f in frames])
    lag = old.lookahead_samples
    ref = x[: len(a) - lag]
    loss_old = np.sqrt(np.mean((a[lag:] - ref) ** 2))
    loss_new = np.sqrt(np.mean((b[lag:] - ref) ** 2))
    assert loss_new <= 1.03 * loss_old, (loss_old, loss_new)
    assert loss_new < 0.2 * np.sqrt(np.mean(ref ** 2))  # the codec working, not noise


def test_int16_framer_takes_only_int16():
    framer = Framer(4, np.int16)
    frames = framer.push(np.arange(6, dtype=np.int16))
    assert [f.tolist() for f in frames] == [[0, 1, 2, 3]] and frames[0].dtype == np.int16
    assert framer.finish().tolist() == [4, 5] and framer.finish() is None
    with pytest.raises(ValueError, match="int16"):
        framer.push(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="float32 or int16"):
        Framer(4, np.float64)


def test_float_to_int16_in_place_gives_the_same_result():
    x = _loud(5000, 24000)
    expected = float_to_int16(x)
    scratch = x.copy()
    np.testing.assert_array_equal(float_to_int16(scratch, in_place=True), expected)
    readonly = x.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(float_to_int16(readonly, in_place=True), expected)
    np.testing.assert_array_equal(float_to_int16(x.astype(np.float64), in_place=True), expected)
