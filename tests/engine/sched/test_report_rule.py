"""The rule for which playback reports reach the engine (`report_moves_deadlines`), shared by the gateway and
the engine-direct load generator."""

from __future__ import annotations

from voxrt.engine.sched.listener import PLAYBACK_TOLERANCE_MS, report_moves_deadlines


def test_first_report_stall_changes_and_drift_past_the_tolerance_are_sent():
    assert report_moves_deadlines(None, 0.0, 1000.0, False)  # the first
    last = (100.0, 1100.0, False)
    assert not report_moves_deadlines(last, 200.0, 1200.0, False)  # real time: the engine extrapolates it
    assert not report_moves_deadlines(last, 200.0 - PLAYBACK_TOLERANCE_MS / 2, 1200.0, False)
    assert report_moves_deadlines(last, 200.0 - PLAYBACK_TOLERANCE_MS, 1200.0, False)  # drift at the tolerance
    assert report_moves_deadlines(last, 200.0 + 2 * PLAYBACK_TOLERANCE_MS, 1200.0, False)  # ahead as well
    assert report_moves_deadlines(last, 200.0, 1200.0, True)  # the stall state changed


def test_a_stalled_listener_is_reported_once_its_drift_passes_the_tolerance():
    """A listener whose buffer ran dry stops playing while the clock goes on: with reports every 100 ms the
    first one after the stall began is already 100 ms off the extrapolation and goes out."""
    last = (500.0, 1500.0, False)
    assert report_moves_deadlines(last, 520.0, 1600.0, False)  # stalled at 520 ms played
