"""The `base` policy: prefill new requests, decode all running ones, decode audio chunks as soon as ready.

No deadlines: it is the baseline that later policies (online, offline, deadline) are measured against.
"""

from __future__ import annotations

from voxrt.engine.sched.plan import StepPlan
from voxrt.engine.sched.request import RequestState
from voxrt.engine.sched.scheduler import Scheduler


class BaseScheduler(Scheduler):
    name = "base"

    def schedule(self, now_ns: int) -> StepPlan:
        plan = StepPlan()
        running = self.running()  # before admission: a request admitted now is prefilled, not decoded
        budget = self.config.max_prefill_tokens
        for request in self.waiting():
            if len(running) + len(plan.prefill) >= self.config.max_batch_size:
                break
            taken = self.try_admit(request, budget)
            if taken:
                budget -= taken
                plan.prefill.append(request)
        blocked = []
        for request in running:
            item = self.next_decode(request)
            if item is not None:
                plan.decode.append(item)
            elif request.state is RequestState.RUNNING:
                blocked.append(request)  # waits for a page
        if blocked and not plan.prefill and not plan.decode and not self.pages.can_allocate(1):
            self.fail_one_blocked_on_pages(blocked)
        for request in list(self.requests.values()):
            job = self.next_chunk(request)
            if job is not None:
                plan.codec.append(job)
        return plan
