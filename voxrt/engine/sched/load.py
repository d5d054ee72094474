"""What an engine reports of its load, for a gateway that routes new contexts across replicas (PURE).

The engine process pushes these figures every ~50 ms (`EngineLoad`, process.py); the gateway's headroom rule
(voxrt/engine/headroom.py) turns them into a choice of replica. Everything here is host-side scheduler state:
computing it never waits for the device.

The slack of a stream is `deadline_policy.next_chunk_slack_ns` (its next chunk's deadline from the playback
clock, less now, less the LM steps its missing frames still take and its codec launch), the same figure the
deadline policy orders its decode batch by. It is computed for the admitted streams that generate (RUNNING):
a stream starved of text waits for its agent, not for this engine, and a request nobody plays as it comes
(`streaming=False`) has no deadline.
"""

from __future__ import annotations

from typing import Iterable

from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.deadline_policy import next_chunk_slack_ns
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import Request, RequestState


def least_slack_ms(requests: Iterable[Request], now_ns: int, spec: ProgramSpec, costs: CostModel,
                   startup_ms: float, margin_ms: float) -> float | None:
    """The least slack (ms) of the generating streams' next chunks at `now_ns`; None when none generates."""
    streams = [r for r in requests if r.state is RequestState.RUNNING and r.is_streaming]
    if not streams:
        return None
    step_ms = costs.lm_step_ms(len(streams))
    startup_ns, margin_ns = round(startup_ms * 1e6), round(margin_ms * 1e6)
    return min(next_chunk_slack_ns(r, now_ns, spec, costs, step_ms, startup_ns, margin_ns) for r in streams) / 1e6
