"""`--sm-mode adaptive`: the pure rule that moves the codec lane's SM share with its backlog."""

from __future__ import annotations

import pytest

from voxrt.engine.sched.sm_modes import AdaptiveSmMode, SmModeSignals

MS = 1_000_000


def sig(t_ms: float, waiting: int = 0, in_flight: bool = False, urgent: int = 0) -> SmModeSignals:
    return SmModeSignals(round(t_ms * MS), background_waiting=waiting, background_in_flight=in_flight,
                         urgent_continuations=urgent)


def test_up_when_the_background_lane_falls_behind_down_after_it_idles():
    rule = AdaptiveSmMode([64, 32, 48], dec_batch=4, dwell_ms=100, idle_ms=300, start=1)  # start at 32 SMs
    assert rule.choose(sig(0, waiting=7, in_flight=True)) == 1  # under 2 x dec_batch: stay
    assert rule.choose(sig(10, waiting=8, in_flight=True)) == 2  # behind: 48 SMs
    assert rule.choose(sig(50, waiting=20, in_flight=True)) == 2  # within the dwell time: no second move
    assert rule.choose(sig(120, in_flight=True, urgent=1)) == 0  # continuations went urgent: 64 SMs
    assert rule.choose(sig(300, waiting=30, in_flight=True)) == 0  # the most there is
    assert rule.choose(sig(400)) == 0  # idle from 400 ms
    assert rule.choose(sig(650)) == 0  # not idle for 300 ms yet
    assert rule.choose(sig(700)) == 2  # idle 300 ms: one step down (48)
    assert rule.choose(sig(900)) == 2  # a new idle period starts at the move
    assert rule.choose(sig(1000)) == 1  # and another step down (32)
    assert rule.choose(sig(1400)) == 1  # the fewest codec SMs there are
    assert rule.num_switches == 4


def test_work_in_between_restarts_the_idle_clock():
    rule = AdaptiveSmMode([32, 64], dec_batch=8, dwell_ms=0, idle_ms=200, start=1)
    assert rule.choose(sig(0)) == 1
    assert rule.choose(sig(150, waiting=1)) == 1  # busy: the idle period is over
    assert rule.choose(sig(250)) == 1  # idle again since 250
    assert rule.choose(sig(449)) == 1
    assert rule.choose(sig(450)) == 0


def test_needs_two_modes():
    with pytest.raises(ValueError, match="at least two"):
        AdaptiveSmMode([32], dec_batch=8)
