"""The simulated listener on hand-made timelines (times in seconds, exact binary fractions)."""

import pytest

from voxrt.loadgen.listener import Listener


def test_no_stall_when_audio_keeps_ahead():
    lis = Listener(start_s=10.0)
    lis.on_audio(10.125, 0.5)  # plays 10.125 .. 10.625
    lis.on_audio(10.25, 0.5)  # buffered: plays until 11.125
    lis.on_audio(11.125, 0.25, is_last=True)  # arrives exactly as the buffer runs dry: no stall
    assert lis.ttfa_ms == 125.0
    assert lis.num_stalls == 0 and lis.stall_ms == 0.0
    assert lis.audio_s == 1.25
    assert lis.is_finished


def test_stalls_counted_with_their_durations():
    lis = Listener(start_s=0.0)
    lis.on_audio(0.5, 0.25)  # plays 0.5 .. 0.75
    lis.on_audio(1.0, 0.5)  # dry from 0.75 to 1.0: stall of 0.25; plays 1.0 .. 1.5
    lis.on_audio(1.25, 0.25)  # buffered until 1.75
    lis.on_audio(2.75, 0.125, is_last=True)  # dry from 1.75 to 2.75: stall of 1.0 (the last frame counts)
    assert lis.ttfa_ms == 500.0
    assert lis.num_stalls == 2
    assert lis.stall_durations_s == [0.25, 1.0]
    assert lis.stall_ms == 1250.0
    assert lis.audio_s == 1.125


def test_played_audio_over_time():
    lis = Listener(start_s=0.0)
    assert lis.played_s(5.0) == 0.0  # nothing before the first audio
    lis.on_audio(1.0, 0.5)
    assert lis.played_s(1.0) == 0.0
    assert lis.played_s(1.25) == 0.25
    assert lis.played_s(3.0) == 0.5  # ran dry at 1.5
    lis.on_audio(3.0, 1.0)  # stall 1.5 .. 3.0
    assert lis.played_s(3.5) == 1.0
    assert lis.stall_ms == 1500.0


def test_no_audio_means_no_ttfa():
    lis = Listener(start_s=0.0)
    assert lis.ttfa_ms is None and lis.num_stalls == 0 and lis.audio_s == 0.0


def test_audio_after_the_last_frame_is_refused():
    lis = Listener(start_s=0.0)
    lis.on_audio(0.0, 0.5, is_last=True)
    with pytest.raises(ValueError):
        lis.on_audio(1.0, 0.5)
