"""Graceful drain on SIGTERM (`voxrt serve --drain-grace-s`, default 30).

What a rolling update or a scale-down needs from one server:
1. it stops taking work at once: `/readyz` answers 503 (the load balancer stops routing to it), new WebSocket
   sessions are refused with `server_busy` / close 4029 and a `retry_after_ms` (the client retries, reaching
   another replica), HTTP synthesis answers 503 `shutting_down`;
2. running contexts finish: a session is closed as soon as it has no running context (so an idle agent
   connection leaves at once and reconnects elsewhere), the others when their last context is done;
3. at the grace period's end what is left is closed with a clear reason: a fatal `server_shutting_down`
   `error`, then close 1001 (going away); its contexts are cancelled and their pages and slots return;
4. then uvicorn's usual shutdown runs (in-flight HTTP responses, the lifespan's engine shutdown).

A second SIGTERM, or SIGINT (Ctrl-C), skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("voxrt.gateway.drain")

POLL_S = 0.1
GRACE_EXPIRED_MESSAGE = "the server is shutting down; reconnect to continue (another replica takes new sessions)"
IDLE_MESSAGE = "the server is shutting down; this session has no running context, reconnect to continue"


async def drain(state, grace_s: float) -> None:
    """Runs steps 1-3 above on the app's state (gateway/app.py `AppState`); returns when no session is left."""
    state.draining = True
    start = time.monotonic()
    deadline = start + grace_s
    running = sum(len(s.runners) for s in state.sessions)
    log.info("draining: %d sessions, %d running contexts; grace period %.0f s", len(state.sessions), running,
             grace_s)
    while state.sessions and time.monotonic() < deadline:
        for session in list(state.sessions):
            if not session.has_running_contexts:
                await session.shut_down(IDLE_MESSAGE)
        await asyncio.sleep(POLL_S)
    left = list(state.sessions)
    if left:
        log.warning("drain grace period over: closing %d sessions with %d running contexts", len(left),
                    sum(len(s.runners) for s in left))
        for session in left:
            await session.shut_down(GRACE_EXPIRED_MESSAGE)
    log.info("drained in %.1f s", time.monotonic() - start)
