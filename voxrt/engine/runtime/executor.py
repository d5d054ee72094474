"""Where a step's audio chunks run: the codec executor, with `submit` and `collect`.

The engine's step reads schedule -> submit the chunks -> run the LM step -> collect (runtime/core.py); what
differs between the time-shared loop and the lanes is this strategy, not the loop:

- `TimeSharedExecutor` (`--lanes off`, the CPU): the chunks wait until `collect`, which decodes them at once
  after the LM step, in one launch (the loop every result is compared against).
- `LaneExecutor` (lanes `green`, `streams`, `inline`): chunks queue on their lane (urgent or background) and a
  lane launches its queue when its previous launch has completed (one launch in flight per lane, polled by
  CUDA event); `collect` returns the finished launches and refills the lanes. Launches run beside the LM step.

Jobs of requests that ended while they waited are never decoded: `live` (the engine's filter) completes them
undecoded at launch time, so their slots return.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from voxrt.engine.runtime.runner import CodecLaunch, ModelRunner
from voxrt.engine.sched.plan import BACKGROUND, LANES, URGENT, CodecJob

LiveFilter = Callable[[list[CodecJob]], list[CodecJob]]


@dataclass
class Finished:
    """A completed launch: its jobs' audio, in job order, or `audio=None` when the launch failed."""

    lane: str  # "loop" for the time-shared executor
    jobs: list[CodecJob]
    audio: list[np.ndarray] | None
    launched_ns: int
    gpu_ms: float | None = None
    error: BaseException | None = None


class CodecExecutor(abc.ABC):
    def __init__(self, runner: ModelRunner, live: LiveFilter) -> None:
        self.runner = runner
        self.live = live

    @abc.abstractmethod
    def lanes_free(self) -> dict[str, bool]:
        """Which lane can take a launch now (the scheduler's `lanes_free`)."""

    @abc.abstractmethod
    def submit(self, jobs: Sequence[CodecJob]) -> None:
        """Takes the step's chunks (each job names its lane)."""

    @abc.abstractmethod
    def collect(self) -> list[Finished]:
        """The launches finished since the last call."""

    @abc.abstractmethod
    def is_busy(self) -> bool:
        """Chunks queued or in flight (a cancelled request's launch must still complete for its slot)."""

    def wait(self) -> None:
        """Blocks until some launch completes (the step had no LM work). Returns at once when none runs."""


class TimeSharedExecutor(CodecExecutor):
    """The synchronous loop's codec step: everything submitted runs at `collect`, in one launch."""

    def __init__(self, runner: ModelRunner, live: LiveFilter) -> None:
        super().__init__(runner, live)
        self._pending: list[CodecJob] = []

    def lanes_free(self) -> dict[str, bool]:
        return {lane: True for lane in LANES}

    def submit(self, jobs: Sequence[CodecJob]) -> None:
        self._pending.extend(jobs)

    def collect(self) -> list[Finished]:
        pending, self._pending = self._pending, []
        jobs = self.live(pending)  # a request ended during the LM step: its chunk is not decoded
        if not jobs:
            return []
        t0 = time.monotonic_ns()
        try:
            audio = self.runner.run_codec(jobs)
        except Exception as exc:  # noqa: BLE001 (the engine fails the launch's requests)
            return [Finished("loop", jobs, None, t0, error=exc)]
        return [Finished("loop", jobs, audio, t0)]

    def is_busy(self) -> bool:
        return bool(self._pending)


class LaneExecutor(CodecExecutor):
    """One launch in flight per lane; the urgent lane launches first."""

    def __init__(self, runner: ModelRunner, live: LiveFilter, timing: bool = False) -> None:
        super().__init__(runner, live)
        self.timing = timing  # CUDA events around each launch (the trace's GPU time)
        self._in_flight: dict[str, CodecLaunch | None] = {lane: None for lane in LANES}
        self._queued: dict[str, list[CodecJob]] = {lane: [] for lane in LANES}
        self._failed: list[Finished] = []

    def lanes_free(self) -> dict[str, bool]:
        return {lane: self._in_flight[lane] is None and not self._queued[lane] for lane in LANES}

    @property
    def background_in_flight(self) -> bool:
        return self._in_flight[BACKGROUND] is not None

    @property
    def num_background_queued(self) -> int:
        return len(self._queued[BACKGROUND])

    def submit(self, jobs: Sequence[CodecJob]) -> None:
        for job in jobs:
            self._queued[job.lane if job.lane in LANES else BACKGROUND].append(job)
        self._launch()  # before the LM step, so that the codec runs beside it

    def collect(self) -> list[Finished]:
        done, self._failed = self._failed, []
        for lane, launch in self._in_flight.items():
            if launch is None or not launch.is_done():
                continue
            self._in_flight[lane] = None
            try:
                audio = launch.results()
            except Exception as exc:  # noqa: BLE001 (a device error surfaces here)
                done.append(Finished(lane, launch.jobs, None, launch.launched_ns, error=exc))
                continue
            done.append(Finished(lane, launch.jobs, audio, launch.launched_ns, launch.gpu_ms()))
        self._launch()
        return done + self._take_failed()

    def is_busy(self) -> bool:
        return any(x is not None for x in self._in_flight.values()) or any(self._queued.values())

    def wait(self) -> None:
        running = [x for x in self._in_flight.values() if x is not None]
        if running:
            min(running, key=lambda x: x.launched_ns).wait()

    def _launch(self) -> None:
        """Starts the queued chunks of every free lane (urgent first), up to one launch per lane."""
        for lane in (URGENT, BACKGROUND):
            if self._in_flight[lane] is not None or not self._queued[lane]:
                continue
            queued, self._queued[lane] = self._queued[lane], []
            jobs = self.live(queued)  # cancelled while queued: never decoded
            if not jobs:
                continue
            t0 = time.monotonic_ns()
            try:
                self._in_flight[lane] = self.runner.launch_codec(jobs, lane, timing=self.timing)
            except Exception as exc:  # noqa: BLE001
                self._failed.append(Finished(lane, jobs, None, t0, error=exc))

    def _take_failed(self) -> list[Finished]:
        failed, self._failed = self._failed, []
        return failed


def make_executor(runner: ModelRunner, live: LiveFilter, lanes_enabled: bool, timing: bool) -> CodecExecutor:
    return LaneExecutor(runner, live, timing) if lanes_enabled else TimeSharedExecutor(runner, live)
