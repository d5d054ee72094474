"""PyAV container encoding and atempo time-stretch, without a server: streamed pushes decode to the input's
duration; a stretch by `speed` lasts 1/speed as long."""

from __future__ import annotations

import numpy as np
import pytest

from compat_audio import decoded_seconds
from voxrt.gateway.compat.av_codec import ContainerEncoder, TimeStretcher, atempo_factors

RATE = 24000
TONE = (0.3 * np.sin(2 * np.pi * 440 * np.arange(RATE * 2) / RATE)).astype(np.float32)  # 2 s


def pushed(obj, pcm, step=1920):
    parts = [obj.push(pcm[i:i + step]) for i in range(0, len(pcm), step)]
    return parts + [obj.finish()]


@pytest.mark.parametrize("fmt", ["mp3", "aac", "flac", "opus"])
def test_container_streams_decode_to_the_duration(fmt):
    data = b"".join(pushed(ContainerEncoder(fmt, RATE), TONE))
    seconds, _ = decoded_seconds(data)
    assert abs(seconds - 2.0) < 0.1, (fmt, seconds)


def test_mp3_rate_and_bad_format_are_refused():
    with pytest.raises(ValueError):
        ContainerEncoder("wma", RATE)
    with pytest.raises(ValueError):
        ContainerEncoder("mp3", RATE, out_rate=23000)


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 4.0])
def test_time_stretch_changes_duration_by_speed(speed):
    out = np.concatenate(pushed(TimeStretcher(RATE, speed), TONE))
    assert abs(len(out) / RATE - 2.0 / speed) < 0.02 * 2.0 / speed + 0.06, (speed, len(out) / RATE)


def test_atempo_factors_stay_in_range():
    assert atempo_factors(0.25) == [0.5, 0.5]
    assert atempo_factors(2.0) == [2.0]
    with pytest.raises(ValueError):
        atempo_factors(5.0)
