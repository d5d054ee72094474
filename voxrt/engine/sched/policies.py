"""Scheduler policies by name (`voxrt serve --scheduler-type`)."""

from __future__ import annotations

from voxrt.engine.errors import InvalidParamsError
from voxrt.engine.sched.base_policy import BaseScheduler
from voxrt.engine.sched.scheduler import Scheduler

POLICIES: dict[str, type[Scheduler]] = {"base": BaseScheduler}


def policy_class(name: str) -> type[Scheduler]:
    try:
        return POLICIES[name]
    except KeyError:
        raise InvalidParamsError(f"unknown scheduler type {name!r}; available: {sorted(POLICIES)}") from None
