"""Opus frames converted once per chunk (`StreamEncoder.split`: 16-bit PCM, `float_to_int16`) code exactly as
frames converted one by one (`OpusEncoder.encode`); libopus's float entry (`encode_clean`, the path before
round 12) stays equal to opuslib's own float call. tests/audio/test_opus_int16.py holds the 16-bit entry's
equalities with the float audio."""

import numpy as np
import opuslib
import pytest

from voxrt.audio import OpusEncoder, StreamEncoder
from voxrt.audio.opus import clean_float
from voxrt.protocol.frames import decode_audio_frame, encode_audio_frame


def _bad_signal(n: int) -> np.ndarray:
    x = (1.5 * np.sin(np.arange(n) * 2 * np.pi * 440 / 48000)).astype(np.float32)
    x[100] = np.nan
    x[200] = np.inf
    x[300] = -np.inf
    return x


def test_clean_float_follows_the_pcm16_rules():
    x = _bad_signal(960)
    out = clean_float(x.copy(), in_place=False)
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    assert out.max() <= 1.0 and out.min() >= -1.0
    assert out[100] == 0.0 and out[200] == 1.0 and out[300] == -1.0
    kept = x.copy()
    clean_float(kept, in_place=False)
    assert np.isnan(kept[100])  # not in place: the caller's array is untouched
    assert clean_float(np.zeros(0, dtype=np.float32), in_place=True).shape == (0,)


def test_encode_clean_is_libopus_float_entry_on_a_clean_frame():
    # (before round 12 this compared `encode`, then the float entry too, with `encode_clean`; `encode` now
    # converts to 16-bit PCM, so the float entry is compared with opuslib's own float call)
    x = clean_float(_bad_signal(960 * 10), in_place=True)
    reference, b = opuslib.Encoder(48000, 1, "audio"), OpusEncoder(48000, 20)
    frames = np.split(x, 10)
    assert [reference.encode_float(f.tobytes(), 960) for f in frames] == [b.encode_clean(f) for f in frames]
    with pytest.raises(ValueError, match="960"):
        b.encode_clean(np.zeros(959, dtype=np.float32))


# with a resampler, without (its output is the input), and libopus at the model's 24 kHz (no resampler either)
@pytest.mark.parametrize("in_rate, opus_rate", [(24000, "wire"), (48000, "auto"), (24000, "auto")])
def test_stream_encoder_frames_equal_per_frame_clipping(in_rate, opus_rate):
    x = _bad_signal(in_rate // 10 * 3)
    original = x.copy()
    stream = StreamEncoder("opus", in_rate, 48000, 20, opus_rate=opus_rate)
    rate = stream.codec_rate
    assert rate == (24000 if (in_rate, opus_rate) == (24000, "auto") else 48000)
    frames = []
    for chunk in np.array_split(x, 3):
        frames += stream.split(chunk)
    frames += stream.split_finish()
    assert all(f.dtype == np.int16 and f.shape == (rate // 50,) and np.abs(f.astype(np.int32)).max() <= 32767
               for f in frames)
    np.testing.assert_array_equal(x[~np.isnan(original)], original[~np.isnan(original)])  # input not modified
    reference = OpusEncoder(rate, 20, bitrate=None if rate == 48000 else 51000)
    assert [stream.encode(f) for f in frames] == [reference.encode(f) for f in frames]


def test_audio_frame_header_fast_path_and_checks():
    data = encode_audio_frame(3, 7, 140, b"xyz", is_first=True, is_last=False)
    header, payload = decode_audio_frame(data)
    assert (header.flags, header.index, header.seq, header.pts_ms, payload) == (1, 3, 7, 140, b"xyz")
    assert encode_audio_frame(3, 7, 140, bytearray(b"xyz"), is_first=True, is_last=False) == data
    with pytest.raises(ValueError, match="index must be in"):
        encode_audio_frame(70000, 0, 0, b"", is_first=False, is_last=False)
    with pytest.raises(ValueError, match="seq must be an int"):
        encode_audio_frame(1, True, 0, b"", is_first=False, is_last=False)
    with pytest.raises(ValueError, match="pts_ms must be in"):
        encode_audio_frame(1, 0, -1, b"", is_first=False, is_last=False)
    with pytest.raises(ValueError, match="payload must be bytes"):
        encode_audio_frame(1, 0, 0, "text", is_first=False, is_last=False)
