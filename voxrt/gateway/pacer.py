"""One timer for every stream's frames in a gateway process.

A realtime session sends a frame every 20 ms; with one task and one `asyncio.sleep` per frame per session,
the event loop ran a timer, a future and a task step for each of them. Here every stream (an `AudioOut`,
audio_out.py) says when its next frame is due, and one timer callback sends every frame that is due within
`TICK_MS` of now, of every stream, then re-arms itself for TICK_MS before the earliest next due time: at most
~1000 wake-ups a second whatever the number of sessions (frames sent up to TICK_MS early: the listener's
buffer is lead_ms, 300 ms by default, ahead anyway; never knowingly late).

The timer callback never waits. A send is started eagerly (`start_eagerly`): run until it first suspends,
which a WebSocket send does only when the connection cannot take more (uvicorn pauses writing when its
transport buffer is full) or another send of the session holds its lock. Such a send goes on in a task of its
own, and its stream is paused until the task ends, so one slow client never delays the others.
"""

from __future__ import annotations

import asyncio
import collections.abc
import heapq
import itertools
import logging
import math
import sys
import time
import weakref
from typing import Any, Coroutine, Protocol

log = logging.getLogger("voxrt.gateway.pacer")

TICK_MS = 1.0  # frames due within this of now leave in this wake-up


def now_ms() -> float:
    return time.monotonic_ns() / 1e6


class PacedStream(Protocol):
    def on_due(self, now_ms: float) -> float | None:
        """Send what is due now; return when the next frame is due (monotonic ms), or None when nothing is
        queued or the stream is paused (whoever queues frames or unpauses it schedules it again)."""

    def prepare(self) -> None:
        """Work for the stream's next frames that can wait until every frame due in this tick is out (AudioOut:
        encoding ahead); called once a tick for each stream the tick served."""


class Pacer:
    """A heap of (due time, stream) served by one `loop.call_at` callback. One per event loop
    (`Pacer.for_running_loop`), shared by every session of the process."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tick_ms: float = TICK_MS) -> None:
        self._loop = loop
        self.tick_ms = tick_ms
        self._heap: list[tuple[float, int, PacedStream]] = []
        self._due: dict[int, float] = {}  # id(stream) -> the due time of its live heap entry
        self._order = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms: float | None = None
        self._is_ticking = False  # inside _tick, which arms the timer once at its end
        self.num_wakeups = 0
        # uvloop (libuv) keeps timers in whole milliseconds of its own clock (`loop.time()`, the monotonic clock
        # truncated to the millisecond) and rounds a delay to the nearest millisecond: see `_arm`
        self._ms_timers = type(loop).__module__.partition(".")[0] == "uvloop"

    @classmethod
    def for_running_loop(cls) -> "Pacer":
        loop = asyncio.get_running_loop()
        pacer = _PACERS.get(loop)
        if pacer is None:
            pacer = _PACERS[loop] = cls(loop)
        return pacer

    @property
    def num_streams(self) -> int:
        return len(self._due)

    def schedule(self, stream: PacedStream, due_ms: float) -> None:
        """`stream` has a frame due at `due_ms` (now or in the past: at the next wake-up, without waiting for
        the loop's timer resolution). An earlier entry of the same stream wins; a later one is replaced."""
        key = id(stream)
        current = self._due.get(key)
        if current is not None and current <= due_ms:
            return
        self._due[key] = due_ms
        heapq.heappush(self._heap, (due_ms, next(self._order), stream))
        if not self._is_ticking and (self._armed_ms is None or due_ms < self._armed_ms):
            self._arm(due_ms)

    def remove(self, stream: PacedStream) -> None:
        """The stream is closed: its heap entries are skipped from now on."""
        self._due.pop(id(stream), None)

    def _arm(self, due_ms: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_ms = due_ms
        now = now_ms()
        if due_ms - now <= self.tick_ms:
            self._handle = self._loop.call_soon(self._tick)
        elif self._ms_timers:
            # libuv fires a timer at the first millisecond of its clock at or after its start plus its delay
            # (whole ms), up to ~1 ms before the exact time, and a delay under 0.5 ms rounds to none: the
            # tick-before-due request below made wake-ups that served nothing and re-armed at once, ~34 a
            # frame (bench/results/2026-12-05-gateway-11/). Here the wake-up is asked for the first whole
            # millisecond of that clock at or after tick_ms before the due time: never before it (nothing
            # wasted), and within the millisecond after it (the frame still leaves before its due time).
            loop_ms = self._loop.time() * 1000
            self._handle = self._loop.call_at((loop_ms + math.ceil(due_ms - self.tick_ms - loop_ms)) / 1000,
                                              self._tick)
        else:
            # A wake-up serves what is due within tick_ms of it, so it is asked for tick_ms before the due time:
            # the selector rounds its timeout up to whole milliseconds (epoll), so a timer fires up to ~1 ms
            # after its time, and asking for the due time itself made every frame ~0.5-1 ms late (the p50 of
            # the send jitter, bench/results/2026-12-01-gateway-3/). loop.time() is time.monotonic() in
            # asyncio's default loops.
            self._handle = self._loop.call_at(self._loop.time() + (due_ms - self.tick_ms - now) / 1000, self._tick)

    def _tick(self) -> None:
        self._handle, self._armed_ms = None, None
        self._is_ticking = True
        self.num_wakeups += 1
        heap, due, tick_ms, order = self._heap, self._due, self.tick_ms, self._order
        heappop, heappush, clock_ns = heapq.heappop, heapq.heappush, time.monotonic_ns
        served: list[PacedStream] = []
        try:
            while heap:
                now = clock_ns() / 1e6
                due_ms, _, stream = heap[0]
                if due_ms > now + tick_ms:
                    break
                heappop(heap)
                key = id(stream)
                if due.get(key) != due_ms:
                    continue  # a stale entry: removed, or scheduled again earlier
                del due[key]
                try:
                    next_ms = stream.on_due(now)
                except Exception:  # noqa: BLE001 (a broken stream must not stop the others)
                    log.exception("a paced stream failed; it is dropped")
                    continue
                served.append(stream)
                if next_ms is not None:  # `schedule`, inline (once a frame)
                    current = due.get(key)
                    if current is None or next_ms < current:
                        due[key] = next_ms
                        heappush(heap, (next_ms, next(order), stream))
            for stream in served:  # after every due frame of the tick is out
                try:
                    stream.prepare()
                except Exception:  # noqa: BLE001
                    log.exception("a paced stream failed to prepare")
        finally:
            self._is_ticking = False
            while heap and due.get(id(heap[0][2])) != heap[0][0]:
                heapq.heappop(heap)  # stale
            if heap:
                self._arm(heap[0][0])


_PACERS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer]" = weakref.WeakKeyDictionary()


def start_eagerly(coro: Coroutine[Any, Any, Any]) -> asyncio.Future | None:
    """Runs `coro` now, up to its first suspension. Returns None when it finished (re-raising what it raised),
    else the task that goes on with it. Python 3.12's eager tasks (`eager_start=True`, as
    `asyncio.eager_task_factory`); before 3.12 the same by hand (`start_eagerly_compat`)."""
    if sys.version_info >= (3, 12):
        task = asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)
        if task.done():
            task.result()
            return None
        return task
    return start_eagerly_compat(coro)


def start_eagerly_compat(coro: Coroutine[Any, Any, Any]) -> asyncio.Future | None:
    """`start_eagerly` for any Python: the first step here; if the coroutine suspended (on a future, as every
    asyncio await does), a task continues it from that future."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_Resumed(coro, waiting_on))


_NOT_YET = object()


class _Resumed(collections.abc.Coroutine):
    """A started coroutine, for a task to go on with: the task's first step gets the future it suspended on
    (the task then waits for it as for any await); every later step, and a cancellation even before the first,
    goes into the coroutine itself, so its `finally` blocks run when the task is cancelled."""

    def __init__(self, coro, waiting_on) -> None:
        self._coro, self._waiting_on = coro, waiting_on

    def send(self, value):
        waiting_on, self._waiting_on = self._waiting_on, _NOT_YET
        if waiting_on is not _NOT_YET:
            return waiting_on
        return self._coro.send(value)

    def throw(self, exc, *rest):
        self._waiting_on = _NOT_YET
        return self._coro.throw(exc, *rest)

    def close(self) -> None:
        self._coro.close()

    def __await__(self):
        return (yield from self._coro.__await__())
