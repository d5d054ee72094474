"""Admission and fairness: one limit on concurrent work for WebSocket sessions and HTTP syntheses, a bounded
queue in front of it, and a per-session message rate limit.

- `Admission`: `--max-sessions` slots shared by realtime sessions (a slot from `session.start` until the
  session ends) and HTTP synthesis requests (`/v1/audio/speech`, `/generate`: a slot while they generate).
  When every slot is taken a newcomer waits in a FIFO queue of at most `--max-queue` for up to
  `--queue-timeout-s`; past either it is refused with a retry hint (`server_busy` with `retry_after_ms`
  before close 4029 on the WebSocket, HTTP 429 with `Retry-After` and `retry_after_ms`).
- `TokenBucket`: each session may send `--max-messages-per-s` messages with bursts of twice that; past it the
  session's reader waits for tokens (the transport stops reading, so TCP pushes back on the client) and
  its flood costs the event loop no more than the rate allows, whatever it sends.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time


class Busy(Exception):
    """No slot now and none soon: retry after `retry_after_ms`."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_ms = retry_after_ms


class Admission:
    def __init__(self, max_active: int, max_queued: int, queue_timeout_s: float, retry_after_ms: int = 1000) -> None:
        if max_active < 1 or max_queued < 0 or queue_timeout_s < 0:
            raise ValueError("need max_active >= 1, max_queued >= 0, queue_timeout_s >= 0")
        self.max_active = max_active
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self.retry_after_ms = retry_after_ms
        self.num_active = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self.num_refused = 0

    @property
    def num_queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        """A slot now, or after waiting in the queue; `Busy` when the queue is full or the wait timed out.
        Every successful acquire needs one `release()`."""
        if self.num_active < self.max_active and not self._waiters:
            self.num_active += 1
            return
        if len(self._waiters) >= self.max_queued or self.queue_timeout_s == 0:
            self.num_refused += 1
            raise Busy(f"server at capacity ({self.max_active} active, {len(self._waiters)} queued); retry "
                       f"later", self.retry_after_ms)
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            if waiter.done() and not waiter.cancelled():  # granted just as the wait ended: hand it on
                self.release()
            else:
                waiter.cancel()
                self._waiters.remove(waiter)
            self.num_refused += 1
            if asyncio.current_task().cancelling():
                raise
            raise Busy(f"server at capacity: no slot within {self.queue_timeout_s:g} s; retry later",
                       self.retry_after_ms) from None

    def release(self) -> None:
        """Returns a slot, to the longest waiter when there is one."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter: num_active is unchanged
                return
        self.num_active -= 1
        assert self.num_active >= 0, "release without acquire"


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up. `delay_s()` takes one token and says how long to wait
    for it (0 when one was there)."""

    def __init__(self, rate: float, burst: float, now_s: float | None = None) -> None:
        if not (rate > 0 and burst >= 1 and math.isfinite(rate)):
            raise ValueError("need a finite rate > 0 and burst >= 1")
        self.rate, self.burst = rate, burst
        self._tokens = burst
        self._at_s = time.monotonic() if now_s is None else now_s

    def delay_s(self, now_s: float | None = None) -> float:
        now = time.monotonic() if now_s is None else now_s
        self._tokens = min(self.burst, self._tokens + (now - self._at_s) * self.rate)
        self._at_s = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def try_take(self, now_s: float | None = None) -> bool:
        """Takes a token if one is there now (`delay_s()` would say 0); else takes nothing and says False."""
        now = time.monotonic() if now_s is None else now_s
        tokens = min(self.burst, self._tokens + (now - self._at_s) * self.rate)
        if tokens < 1:
            return False
        self._tokens, self._at_s = tokens - 1, now
        return True
