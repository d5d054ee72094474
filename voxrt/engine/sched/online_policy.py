"""The `online` policy: interactive streams, pressing ones first.

A request is pressing until its first chunk is delivered, and again while its listener's buffer is short: its
next chunk is due (`deadlines.chunk_deadline_ns`) within `2 * urgent_ms` of now. Admission and the LM are the
base policy's (first come, first served; every running request decodes a frame each step). The codec takes
every ready chunk, pressing ones first and then by deadline, at most `max_codec_batch` in one launch. With
lanes, pressing chunks go to the urgent lane and the others to the background lane, each only while its lane
is free (a chunk not cut stays ready for the next step); without lanes they all run after the LM step, in
that order.
"""

from __future__ import annotations

from dataclasses import replace

from voxrt.engine.sched.deadlines import with_deadline
from voxrt.engine.sched.plan import BACKGROUND, URGENT, CodecJob, StepPlan
from voxrt.engine.sched.scheduler import Scheduler


class OnlineScheduler(Scheduler):
    name = "online"

    def plan_step(self, now_ns: int) -> StepPlan:
        plan = StepPlan()
        running = self.running()
        self.admit(plan, self.waiting(), len(running))
        self.decode(plan, running)
        self._plan_codec(plan, now_ns)
        return plan

    def is_pressing(self, job: CodecJob, now_ns: int) -> bool:
        """`job` carries its deadline (`with_deadline`)."""
        assert job.deadline_ns is not None
        if job.request.first_chunk_ns is None:
            return True
        return job.deadline_ns - now_ns <= 2 * self.config.urgent_ms * 1e6

    def _plan_codec(self, plan: StepPlan, now_ns: int) -> None:
        startup_ns = round(self.config.deadline_startup_ms * 1e6)
        jobs = []
        for job in self.ready_chunks():
            job = with_deadline(job, self.spec, startup_ns, round(self.config.deadline_margin_ms * 1e6))
            jobs.append(replace(job, lane=URGENT if self.is_pressing(job, now_ns) else BACKGROUND))
        jobs.sort(key=lambda j: (j.lane != URGENT, j.deadline_ns))  # stable: arrival order breaks ties
        limit = self.config.max_codec_batch
        if not self.has_lanes:
            plan.codec.extend(self.cut(job) for job in jobs[:limit])
            return
        for lane in (URGENT, BACKGROUND):
            if self.is_lane_free(lane):
                plan.codec.extend(self.cut(job) for job in [j for j in jobs if j.lane == lane][:limit])
