"""Which replica a new context goes to: the one with the most SLO headroom (PURE: data in, data out).

`voxrt serve --dp-size N` runs N engine processes (one per GPU) under one gateway (replicas.py). Each pushes
its load about every 50 ms (`EngineLoad`, voxrt/engine/sched/load.py); a new context, and every request of it,
goes to the replica this rule ranks first. Headroom is the smaller of two fractions, each 1 on an idle engine:

- batch room, `1 - (admitted + queued + unreported) / max_batch_size`: the share of one LM step's batch still
  free. `unreported` counts what the gateway sent that the latest report cannot count yet (submits made
  after it, contexts routed here that have not submitted), so a burst of new contexts spreads out instead of
  piling onto the replica that looked emptiest 50 ms ago. A queue past the batch drives it below 0.
- slack room, `least_slack_ms / SLACK_FULL_MS` clamped to [-1, 1]: how close the engine's most urgent stream
  is to missing its next chunk (deadline less now, less the LM steps and codec launch it still needs). 1
  when no stream generates or the least slack is `SLACK_FULL_MS` or more; below 0 once a stream is late.

A replica that is not ready (starting, restarting, dead) has no headroom (None) and is never chosen. Ties go to
the larger batch room, then the fewer live requests, then the lower index, so the choice is deterministic.
Round robin would send a new turn to a replica whose streams are already late; this rule sends it where
the SLO is least at risk.
"""

from __future__ import annotations

from dataclasses import dataclass

# Slack at which a replica counts as fully safe: a first chunk's own budget (--deadline-startup-ms' default,
# the TTFA target), so a replica whose most urgent stream has less than one TTFA budget left loses headroom.
SLACK_FULL_MS = 200.0


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica as the router sees it: its latest report's figures plus what the gateway knows since."""

    is_ready: bool
    max_batch_size: int
    num_running: int = 0  # admitted (holding pages and a slot)
    num_waiting: int = 0  # queued for admission
    min_slack_ms: float | None = None  # least slack of its generating streams; None: none generates
    num_unreported: int = 0  # submits and routed contexts its latest report does not count yet
    num_requests: int = 0  # live requests (tie-break)

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if min(self.num_running, self.num_waiting, self.num_unreported, self.num_requests) < 0:
            raise ValueError("request counts must be >= 0")

    @property
    def batch_room(self) -> float:
        occupied = self.num_running + self.num_waiting + self.num_unreported
        return 1.0 - occupied / self.max_batch_size

    @property
    def slack_room(self) -> float:
        if self.min_slack_ms is None:
            return 1.0
        return max(-1.0, min(1.0, self.min_slack_ms / SLACK_FULL_MS))


def headroom(load: ReplicaLoad) -> float | None:
    """The replica's SLO headroom (see the module docstring); None when it is not ready."""
    if not load.is_ready:
        return None
    return min(load.batch_room, load.slack_room)


def choose_replica(loads: list[ReplicaLoad]) -> int | None:
    """The index of the replica a new context goes to; None when none is ready."""
    best: tuple | None = None
    best_index = None
    for index, load in enumerate(loads):
        room = headroom(load)
        if room is None:
            continue
        key = (room, load.batch_room, -(load.num_requests + load.num_unreported), -index)
        if best is None or key > best:
            best, best_index = key, index
    return best_index
