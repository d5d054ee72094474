"""The `base` policy: prefill new requests, decode all running ones, decode audio chunks as soon as ready.

No deadlines: it is the baseline that later policies (online, offline, deadline) are measured against.
"""

from __future__ import annotations

from voxrt.engine.sched.plan import StepPlan
from voxrt.engine.sched.scheduler import Scheduler


class BaseScheduler(Scheduler):
    name = "base"

    def plan_step(self, now_ns: int) -> StepPlan:
        plan = StepPlan()
        running = self.running()  # before admission: a request admitted now is prefilled, not decoded
        self.admit(plan, self.waiting(), len(running))  # first come, first served
        self.decode(plan, running)
        for request in list(self.requests.values()):
            job = self.next_chunk(request)
            if job is not None:
                plan.codec.append(job)
        return plan
