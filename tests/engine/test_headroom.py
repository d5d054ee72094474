"""The routing rule (voxrt/engine/headroom.py): most SLO headroom first, never a replica that is not ready."""

from __future__ import annotations

import pytest

from voxrt.engine.headroom import SLACK_FULL_MS, ReplicaLoad, choose_replica, headroom

IDLE = ReplicaLoad(is_ready=True, max_batch_size=8)


def test_an_idle_replica_has_full_headroom():
    assert headroom(IDLE) == 1.0


def test_a_replica_that_is_not_ready_has_none_and_is_never_chosen():
    down = ReplicaLoad(is_ready=False, max_batch_size=8)
    assert headroom(down) is None
    assert choose_replica([down, ReplicaLoad(is_ready=True, max_batch_size=8, num_running=8)]) == 1
    assert choose_replica([down, down]) is None
    assert choose_replica([]) is None


def test_batch_room_counts_admitted_queued_and_unreported_work():
    assert headroom(ReplicaLoad(True, 8, num_running=4)) == 0.5
    assert headroom(ReplicaLoad(True, 8, num_running=2, num_waiting=1, num_unreported=1)) == 0.5
    assert headroom(ReplicaLoad(True, 8, num_running=8, num_waiting=4)) == -0.5  # queued past the batch


def test_slack_room_falls_as_the_most_urgent_stream_nears_its_deadline():
    assert headroom(ReplicaLoad(True, 8, num_running=1, min_slack_ms=10 * SLACK_FULL_MS)) == 1 - 1 / 8
    assert headroom(ReplicaLoad(True, 8, num_running=1, min_slack_ms=SLACK_FULL_MS / 4)) == 0.25
    assert headroom(ReplicaLoad(True, 8, num_running=1, min_slack_ms=-100 * SLACK_FULL_MS)) == -1.0  # clamped


def test_the_loaded_replica_loses_to_the_idle_one_whatever_their_order():
    busy = ReplicaLoad(True, 8, num_running=6)
    assert choose_replica([busy, IDLE]) == 1
    assert choose_replica([IDLE, busy]) == 0


def test_late_streams_outweigh_a_fuller_batch():
    """Not round robin, nor fewest requests: a replica with free batch slots whose streams are already late
    has less headroom than a fuller one whose streams are safe."""
    late = ReplicaLoad(True, 8, num_running=1, min_slack_ms=-20)
    safe = ReplicaLoad(True, 8, num_running=5, min_slack_ms=400)
    assert choose_replica([late, safe]) == 1


def test_unreported_routes_spread_a_burst():
    """Contexts routed since the latest reports count against their replica: with two idle replicas and no
    new report, consecutive routes alternate."""
    counts = [0, 0]
    for _ in range(6):
        loads = [ReplicaLoad(True, 8, num_unreported=n) for n in counts]
        counts[choose_replica(loads)] += 1
    assert counts == [3, 3]


def test_ties_go_to_batch_room_then_fewer_requests_then_the_lower_index():
    # both slack-bound at 0.25, the second has more batch room
    a = ReplicaLoad(True, 8, num_running=4, min_slack_ms=SLACK_FULL_MS / 4)
    b = ReplicaLoad(True, 8, num_running=1, min_slack_ms=SLACK_FULL_MS / 4)
    assert choose_replica([a, b]) == 1
    c = ReplicaLoad(True, 8, num_running=2, num_requests=3)
    d = ReplicaLoad(True, 8, num_running=2, num_requests=2)
    assert choose_replica([c, d]) == 1
    assert choose_replica([IDLE, IDLE, IDLE]) == 0


def test_bad_figures_are_refused():
    with pytest.raises(ValueError, match="max_batch_size"):
        ReplicaLoad(True, 0)
    with pytest.raises(ValueError, match=">= 0"):
        ReplicaLoad(True, 8, num_running=-1)
