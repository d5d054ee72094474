"""The playback clock: real time from the first send without reports, reports re-anchor, never past what was
sent, stalls counted when playback resumes, deadlines from the anchor. All times in ms, passed in."""

from __future__ import annotations

import pytest

from voxrt.protocol.clock import PlaybackClock


def test_before_any_audio():
    clock = PlaybackClock()
    assert not clock.is_started and not clock.is_stalled(100)
    assert clock.played_ms(100) == 0 and clock.buffered_ms(100) == 0
    assert clock.play_time_ms(0) is None
    clock.on_report(500, 100)  # nothing to have played: ignored
    assert not clock.is_started


def test_real_time_from_the_first_send():
    clock = PlaybackClock()
    clock.on_audio_sent(200, now_ms=1000)
    assert clock.is_started and clock.sent_ms == 200
    assert clock.played_ms(1000) == 0
    assert clock.played_ms(1080) == 80
    assert clock.buffered_ms(1080) == 120
    clock.on_audio_sent(200, now_ms=1100)  # more before it ran dry: no re-anchor, no stall
    assert clock.played_ms(1300) == 300 and clock.num_stalls == 0


def test_played_is_capped_at_sent_and_never_negative():
    clock = PlaybackClock()
    clock.on_audio_sent(100, now_ms=1000)
    assert clock.played_ms(5000) == 100 and clock.buffered_ms(5000) == 0
    assert clock.played_ms(900) == 0  # a time before the anchor


def test_report_re_anchors():
    clock = PlaybackClock()
    clock.on_audio_sent(1000, now_ms=0)
    clock.on_report(300, now_ms=500)  # the client started late (jitter buffer): it is behind the assumption
    assert clock.played_ms(500) == 300
    assert clock.played_ms(600) == 400
    assert clock.play_time_ms(1000) == 1200


@pytest.mark.parametrize(("reported", "anchored"), [(-50, 0), (5000, 1000)])
def test_report_is_clamped_to_what_was_sent(reported, anchored):
    clock = PlaybackClock()
    clock.on_audio_sent(1000, now_ms=0)
    clock.on_report(reported, now_ms=100)
    assert clock.played_ms(100) == anchored


def test_stall_is_counted_when_playback_resumes():
    clock = PlaybackClock()
    clock.on_audio_sent(100, now_ms=0)
    assert not clock.is_stalled(99)
    assert clock.is_stalled(100)  # ran dry at 100
    assert clock.is_stalled(130)
    assert clock.num_stalls == 0 and clock.stall_ms == 0  # counted when it resumes
    clock.on_audio_sent(100, now_ms=150)  # resumes at 150 from position 100
    assert clock.num_stalls == 1 and clock.stall_ms == 50
    assert not clock.is_stalled(150)
    assert clock.played_ms(150) == 100 and clock.played_ms(200) == 150
    assert clock.play_time_ms(200) == 250
    clock.on_audio_sent(20, now_ms=300)  # dry at 250 again
    assert clock.num_stalls == 2 and clock.stall_ms == 100


def test_audio_arriving_exactly_when_dry_is_no_stall():
    clock = PlaybackClock()
    clock.on_audio_sent(100, now_ms=0)
    clock.on_audio_sent(100, now_ms=100)
    assert clock.num_stalls == 0 and clock.played_ms(150) == 150


def test_stall_measured_from_a_reported_position():
    clock = PlaybackClock()
    clock.on_audio_sent(400, now_ms=0)
    clock.on_report(100, now_ms=200)  # listener behind: dry at 200 + 300 = 500, not 400
    clock.on_audio_sent(100, now_ms=450)
    assert clock.num_stalls == 0
    clock.on_audio_sent(100, now_ms=700)  # dry at 600
    assert clock.num_stalls == 1 and clock.stall_ms == 100


def test_finished_clock_running_dry_is_not_a_stall():
    clock = PlaybackClock()
    clock.on_audio_sent(100, now_ms=0)
    clock.mark_finished()
    assert clock.is_finished and not clock.is_stalled(500)
    assert clock.played_ms(500) == 100
    clock.on_audio_sent(20, now_ms=600)  # e.g. a padding frame after the mark: still counted
    assert clock.sent_ms == 120 and not clock.is_stalled(1000)


def test_play_time_is_the_deadline_for_a_position():
    clock = PlaybackClock()
    clock.on_audio_sent(240, now_ms=10_000)
    assert clock.play_time_ms(0) == 10_000
    assert clock.play_time_ms(240) == 10_240  # the next chunk is due when the sent audio runs out
    assert clock.play_time_ms(480) == 10_480
    clock.on_report(100, now_ms=10_200)  # behind by 100 ms: deadlines move later
    assert clock.play_time_ms(240) == 10_340


def test_negative_duration_is_rejected():
    with pytest.raises(ValueError):
        PlaybackClock().on_audio_sent(-1, now_ms=0)


def test_on_audio_sent_until_is_on_audio_sent_then_play_time_ms():
    import random
    rng = random.Random(12)
    for _ in range(200):
        a, b = PlaybackClock(), PlaybackClock()
        now = 1000.0
        for _ in range(30):
            now += rng.choice([0.0, 5.0, 20.0, 60.0, 400.0])  # sometimes past the buffer's end: a stall
            if rng.random() < 0.2:
                played = rng.uniform(-10, a.sent_ms + 10)
                a.on_report(played, now)
                b.on_report(played, now)
            duration = rng.choice([20.0, 40.0, 0.0])
            a.on_audio_sent(duration, now)
            assert b.on_audio_sent_until(duration, now) == a.play_time_ms(a.sent_ms)
            assert vars(a) == vars(b)
    clock = PlaybackClock()
    with pytest.raises(ValueError):
        clock.on_audio_sent_until(-1, 0.0)
