"""The `offline` policy: throughput for batch jobs, where nobody listens while the audio is made.

Admission and the LM are the base policy's. The codec waits so that it runs in big batches: chunks are cut
only while nothing generates (the plan has no prefill and no decode), or when at least `max_codec_batch`
chunks are ready; in between, only the chunks of requests whose generation is done (DRAINING: their slots
return when their audio is decoded). Draining requests' chunks go first, then arrival order; at most
`max_codec_batch` chunks a step, on the background lane (only while it is free).
"""

from __future__ import annotations

from dataclasses import replace

from voxrt.engine.sched.plan import BACKGROUND, StepPlan
from voxrt.engine.sched.scheduler import Scheduler


class OfflineScheduler(Scheduler):
    name = "offline"

    def plan_step(self, now_ns: int) -> StepPlan:
        plan = StepPlan()
        running = self.running()
        self.admit(plan, self.waiting(), len(running))
        self.decode(plan, running)
        self._plan_codec(plan)
        return plan

    def _plan_codec(self, plan: StepPlan) -> None:
        if not self.is_lane_free(BACKGROUND):
            return
        ready = self.ready_chunks()
        ready.sort(key=lambda job: not job.request.is_generation_done)  # stable: arrival order within
        limit = self.config.max_codec_batch
        is_generating = bool(plan.prefill or plan.decode)
        if is_generating and len(ready) < limit:
            ready = [job for job in ready if job.request.is_generation_done]
        plan.codec.extend(self.cut(replace(job, lane=BACKGROUND)) for job in ready[:limit])
