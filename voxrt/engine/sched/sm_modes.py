"""`--sm-mode adaptive`: which SM split the LM and the background codec lane run on, step by step (PURE).

The modes are the background codec lane's SM counts (`--sm-modes`, e.g. 32,64), the LM lane on the rest.
The LM is bandwidth-bound and loses little to a smaller partition, the codec is compute-bound and scales with
SMs (`voxrt profile-split`), so the codec's share should follow its backlog:

- up (the next mode with more codec SMs) when the background lane falls behind: the chunks waiting for it
  (ready, or queued behind its launch in flight) reach `2 * dec_batch`, or chunks that were not first chunks
  had to go to the urgent lane because the background lane could not deliver them in time;
- down (the next mode with fewer codec SMs, more for the LM) once the background lane has been idle, nothing
  in flight and nothing waiting, for `idle_ms`;
- at most one move every `dwell_ms`, so that a burst does not make the split flap.

The engine reads the signals after each plan and switches before the step's LM work (`Lanes.set_mode`).

`VOXRT_LM_LANE=idle` (runtime/lanes.py) has its own two modes over one codec split, the LM on its partition (0)
or on the whole GPU below the codec partition's priority (1), and `CodecIdleLmMode` picks one a step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SmModeSignals:
    now_ns: int
    background_waiting: int  # chunks ready or queued for the background lane, not yet launched
    background_in_flight: bool
    urgent_continuations: int  # chunks past the first that this step sent to the urgent lane
    background_planned: int = 0  # chunks this step's plan sends to the background lane


class AdaptiveSmMode:
    reads_backlog = True  # `background_waiting` is its signal to move up

    def __init__(self, codec_sms: list[int], dec_batch: int, dwell_ms: float = 250.0, idle_ms: float = 500.0,
                 start: int = 0) -> None:
        if len(codec_sms) < 2:
            raise ValueError("adaptive SM modes need at least two --sm-modes")
        # modes in ascending codec SMs: "up" gives the codec more
        self.order = sorted(range(len(codec_sms)), key=lambda i: codec_sms[i])
        self.dec_batch = dec_batch
        self.dwell_ns = round(dwell_ms * 1e6)
        self.idle_ns = round(idle_ms * 1e6)
        self.current = start
        self.last_switch_ns: int | None = None
        self.idle_since_ns: int | None = None
        self.num_switches = 0

    def choose(self, s: SmModeSignals) -> int:
        """The mode index to run this step with (updates the state)."""
        is_idle = not s.background_in_flight and s.background_waiting == 0
        if not is_idle:
            self.idle_since_ns = None
        elif self.idle_since_ns is None:
            self.idle_since_ns = s.now_ns
        if self.last_switch_ns is not None and s.now_ns - self.last_switch_ns < self.dwell_ns:
            return self.current
        rank = self.order.index(self.current)
        behind = s.background_waiting >= 2 * self.dec_batch or s.urgent_continuations > 0
        if behind and rank + 1 < len(self.order):
            return self._switch(self.order[rank + 1], s.now_ns)
        if is_idle and s.now_ns - self.idle_since_ns >= self.idle_ns and rank > 0:
            self.idle_since_ns = s.now_ns  # another full idle period before the next step down
            return self._switch(self.order[rank - 1], s.now_ns)
        return self.current

    def _switch(self, mode: int, now_ns: int) -> int:
        self.current = mode
        self.last_switch_ns = now_ns
        self.num_switches += 1
        return mode


class CodecIdleLmMode:
    """`VOXRT_LM_LANE=idle`: the LM's step on the whole GPU (mode `whole`) when it starts with the background codec
    lane idle, no launch in flight and none in this step's plan; on its partition (mode `partition`) otherwise.
    The loop launches background work only at step boundaries, so a background launch can meet only the tail of
    one whole-GPU step (the one the GPU is still running when the launch goes out), not a run of them. Chunks
    ready but not planned do not count: under load some always are, and the plan is what launches."""

    reads_backlog = False  # the engine then skips counting `background_waiting` (a scan of every live request)

    def __init__(self, partition: int = 0, whole: int = 1) -> None:
        self.partition, self.whole = partition, whole
        self.current = partition
        self.num_switches = 0  # (the engine counts the LM steps of each mode: EngineStats.lm_steps_by_sm_mode)

    def choose(self, s: SmModeSignals) -> int:
        idle = not s.background_in_flight and s.background_planned == 0
        mode = self.whole if idle else self.partition
        if mode != self.current:
            self.current = mode
            self.num_switches += 1
        return mode


class EveryStepSmMode:
    """A chooser that moves to the next mode every step: the check (CPU test, GPU smoke) that per-mode graphs
    and the switch keep every request's state in order, as often as a switch can happen."""

    def __init__(self, num_modes: int = 2) -> None:
        self.num_modes = num_modes
        self.calls = 0

    def choose(self, signals: SmModeSignals) -> int:
        self.calls += 1
        return self.calls % self.num_modes
