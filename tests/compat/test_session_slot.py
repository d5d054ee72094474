"""Adapter sessions open under the native rule (AppState.can_open_session): refused while draining, while the
engine restarts, and past the slots plus the queue; counted in the sessions gauge while open."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from voxrt.gateway.app import AppState
from voxrt.gateway.auth import Authenticator
from voxrt.gateway.compat.bridge import session_slot
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.metrics import GatewayMetrics


def _state(**config) -> AppState:
    cfg = GatewayConfig(**config)
    state = AppState(config=cfg, engine_config=None, auth=Authenticator(cfg.api_keys, cfg.token_secret),
                     metrics=GatewayMetrics())
    state.engine, state.engine_ready = SimpleNamespace(is_ready=True), True
    return state


async def _opens(state: AppState) -> bool:
    async with session_slot(state) as ok:
        return ok


def test_adapter_sessions_follow_the_native_rule():
    state = _state(max_sessions=1, max_queue=1)
    assert asyncio.run(_opens(state)) and state.num_sessions == 0  # counted while open, returned after
    state.num_sessions = 2  # the slot and the queue are taken
    assert not asyncio.run(_opens(state))
    state.num_sessions = 1
    assert asyncio.run(_opens(state))
    state.draining = True  # SIGTERM: a native session would be refused too
    assert not asyncio.run(_opens(state))
    state.draining = False
    state.engine.is_ready = False  # the engine restarting after a crash
    assert not asyncio.run(_opens(state))
    assert state.num_sessions == 1
