"""Scheduler policies by name (`voxrt serve --scheduler-type`).

- `base`: first come, first served; every chunk decoded as soon as it is ready (the baseline).
- `online`: pressing streams (no audio yet, or a short buffer) first, on the urgent lane.
- `offline`: throughput for batch jobs: the codec waits for big batches.
- `deadline`: chunks by deadline, urgent ones on the urgent lane, prefills deferred to save running streams.
"""

from __future__ import annotations

from voxrt.engine.errors import InvalidParamsError
from voxrt.engine.sched.base_policy import BaseScheduler
from voxrt.engine.sched.deadline_policy import DeadlineScheduler
from voxrt.engine.sched.offline_policy import OfflineScheduler
from voxrt.engine.sched.online_policy import OnlineScheduler
from voxrt.engine.sched.scheduler import Scheduler

POLICIES: dict[str, type[Scheduler]] = {
    "base": BaseScheduler,
    "online": OnlineScheduler,
    "offline": OfflineScheduler,
    "deadline": DeadlineScheduler,
}


def policy_class(name: str) -> type[Scheduler]:
    try:
        return POLICIES[name]
    except KeyError:
        raise InvalidParamsError(f"unknown scheduler type {name!r}; available: {sorted(POLICIES)}") from None
