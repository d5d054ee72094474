"""Engine supervision: when to call an engine process frozen and how long to wait between restarts.

Pure (no clocks, no I/O; time is an argument): `EngineClient` (client.py) sends a `Heartbeat` every
`heartbeat_interval_s`, which the engine answers from its step loop, and asks `Supervision` what to do.
An engine whose loop has not answered for `heartbeat_timeout_s` is frozen (a stopped process, a deadlock, a
step that never returns): the client kills it. A dead engine (its pipe closed: a crash, `kill -9`, a
kill for freezing) fails every request it held at once and is started again after a backoff that doubles
from `restart_backoff_s` up to `max_restart_backoff_s`, back to the start once an engine stayed up for
`stable_after_s`. While it restarts the client is not ready (`/readyz` 503, new sessions refused with
`retry_after_ms`), and `num_restarts` counts the restarts that became ready (`voxrt_engine_restarts`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SupervisorConfig:
    heartbeat_interval_s: float = 1.0
    # > the longest step a healthy engine takes (warm-up comes before ready): milliseconds on a GPU, but a CPU
    # engine on a loaded machine has been seen to take over 10 s for one step
    heartbeat_timeout_s: float = 30.0
    restart_backoff_s: float = 0.5
    max_restart_backoff_s: float = 30.0
    stable_after_s: float = 60.0
    is_restart_enabled: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_s < self.heartbeat_timeout_s:
            raise ValueError("need 0 < heartbeat_interval_s < heartbeat_timeout_s")
        if not 0 <= self.restart_backoff_s <= self.max_restart_backoff_s:
            raise ValueError("need 0 <= restart_backoff_s <= max_restart_backoff_s")


class Supervision:
    """The supervisor's decisions for one engine slot, over successive engine processes."""

    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self._last_ack_s: float | None = None
        self._ready_since_s: float | None = None
        self._next_backoff_s = config.restart_backoff_s

    def on_ready(self, now_s: float) -> None:
        self._last_ack_s = now_s
        self._ready_since_s = now_s

    def on_ack(self, now_s: float) -> None:
        self._last_ack_s = now_s

    def is_frozen(self, now_s: float) -> bool:
        return self._last_ack_s is not None and now_s - self._last_ack_s > self.config.heartbeat_timeout_s

    def restart_delay_s(self, now_s: float) -> float:
        """The wait before starting the next engine after one died at `now_s`."""
        if self._ready_since_s is not None and now_s - self._ready_since_s >= self.config.stable_after_s:
            self._next_backoff_s = self.config.restart_backoff_s  # it had been up long enough: start over
        delay = self._next_backoff_s
        self._next_backoff_s = min(self.config.max_restart_backoff_s, max(2 * delay, 0.1))
        self._last_ack_s = self._ready_since_s = None
        return delay
