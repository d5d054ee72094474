from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from audio_signals import sine, speechlike
from voxrt.audio import FRAME_MS, SAMPLE_RATES_HZ, OpusDecoder, OpusEncoder


def best_lag_correlation(x: np.ndarray, y: np.ndarray, lag: int) -> float:
    n = min(len(x), len(y) - lag)
    return float(np.corrcoef(x[:n], y[lag : lag + n])[0, 1])


def test_round_trip_440hz_48k_20ms():
    x = sine(440, 1.0, 48000)
    encoder, decoder = OpusEncoder(48000, 20), OpusDecoder(48000)
    packets = [encoder.encode(x[i : i + 960]) for i in range(0, 48000, 960)]
    assert len(packets) == 50 and all(isinstance(p, bytes) and p for p in packets)
    y = np.concatenate([decoder.decode(p, 960) for p in packets])
    assert y.dtype == np.float32 and len(y) == 48000
    assert encoder.lookahead_samples == 312  # 6.5 ms: the Ogg Opus pre-skip at 48 kHz
    assert best_lag_correlation(x, y, encoder.lookahead_samples) > 0.999


@pytest.mark.parametrize("sample_rate", SAMPLE_RATES_HZ)
@pytest.mark.parametrize("frame_ms", FRAME_MS)
def test_every_rate_and_frame_size(sample_rate, frame_ms):
    frame_samples = sample_rate * frame_ms // 1000
    x = speechlike(frame_samples * 6)
    encoder, decoder = OpusEncoder(sample_rate, frame_ms), OpusDecoder(sample_rate)
    assert encoder.frame_samples == frame_samples
    y = np.concatenate([decoder.decode(encoder.encode(f), frame_samples) for f in np.split(x, 6)])
    assert len(y) == len(x)
    assert best_lag_correlation(x, y, encoder.lookahead_samples) > 0.9


@pytest.mark.parametrize("application", ["audio", "voip", "restricted_lowdelay"])
def test_applications_and_bitrate(application):
    encoder = OpusEncoder(24000, 20, application=application, bitrate=16000, complexity=5)
    assert encoder.bitrate == 16000
    packets = [encoder.encode(f) for f in np.split(speechlike(480 * 25), 25)]
    expected_bytes = 16000 * 0.020 / 8  # 40 bytes per 20 ms frame at 16 kb/s
    assert expected_bytes / 2 < np.mean([len(p) for p in packets]) < expected_bytes * 2


def test_wrong_frame_length_is_rejected():
    encoder = OpusEncoder(48000, 20)
    with pytest.raises(ValueError, match="960 samples"):
        encoder.encode(np.zeros(959, dtype=np.float32))
    with pytest.raises(ValueError, match="1-D"):
        encoder.encode(np.zeros((960, 2), dtype=np.float32))


def test_bad_settings_name_the_allowed_values():
    with pytest.raises(ValueError, match=r"\[8000, 12000, 16000, 24000, 48000\]"):  # what libopus takes
        OpusEncoder(44100, 20)
    with pytest.raises(ValueError, match=r"\[10, 20, 40, 60\]"):
        OpusEncoder(48000, 25)
    with pytest.raises(ValueError, match="restricted_lowdelay"):
        OpusEncoder(48000, 20, application="music")
    with pytest.raises(ValueError, match="6000..510000"):
        OpusEncoder(48000, 20, bitrate=100)
    with pytest.raises(ValueError, match=r"\[8000, 16000, 24000, 48000\]"):
        OpusDecoder(22050)


def test_decoder_conceals_a_lost_packet_and_rejects_garbage():
    decoder = OpusDecoder(48000)
    assert decoder.decode(b"", 960).shape == (960,)
    with pytest.raises(ValueError, match="Opus decode failed"):
        decoder.decode(b"\xff\xff\xff", 960)  # code-3 packet claiming 63 frames: too long
    with pytest.raises(ValueError, match="frame_samples"):
        decoder.decode(b"\x00", 0)


def test_missing_libopus_gives_install_hint(tmp_path):
    """opuslib raises a bare Exception at import when libopus is absent; simulate that with a stub."""
    (tmp_path / "opuslib").mkdir()
    (tmp_path / "opuslib" / "__init__.py").write_text(
        "raise Exception('Could not find Opus library. Make sure it is installed.')\n"
    )
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        try:
            import voxrt.audio.opus
        except ImportError as error:
            print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert "apt-get install libopus0" in result.stdout, result.stdout + result.stderr


def test_out_of_range_nan_and_inf_are_clipped_like_pcm16():
    """float32 goes to libopus as float, with float_to_int16's rules: clipped to [-1, 1], NaN as silence."""
    x = sine(440, 0.2, 48000)
    frames = [x[i : i + 960] for i in range(0, len(x), 960)]
    bad = [f * 3.0 for f in frames]  # clipped: decodes like a full-scale square-ish wave, never louder than 1
    bad[3] = np.full(960, np.nan, dtype=np.float32)
    bad[4] = np.full(960, np.inf, dtype=np.float32)
    encoder, decoder = OpusEncoder(48000, 20), OpusDecoder(48000)
    packets = [encoder.encode(f) for f in bad]
    y = [decoder.decode(p, 960) for p in packets]
    assert all(np.isfinite(f).all() for f in y) and max(np.abs(f).max() for f in y) <= 1.0
    assert packets[0] != packets[1] and packets[0] == bytes(packets[0])  # each call returns its own bytes
    quiet = OpusEncoder(48000, 20)
    silence = [decoder.decode(quiet.encode(np.full(960, np.nan, dtype=np.float32)), 960) for _ in range(5)]
    assert np.abs(silence[-1]).max() < 1e-3
