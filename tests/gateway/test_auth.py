"""Auth on: API keys on HTTP and WebSocket, minted browser tokens, expiry."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets

from conftest import live_server, recv_json, run

KEY = "sk-test-123"


@pytest.fixture(scope="module")
def secured():
    with live_server(api_keys=(KEY,)) as server:
        yield server


async def _ws_close_code(url: str, headers=None) -> int:
    async with websockets.connect(url, additional_headers=headers or {}) as ws:
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 30)
        except websockets.ConnectionClosed:
            return ws.close_code


async def _start(url: str, headers=None) -> dict:
    async with websockets.connect(url, additional_headers=headers or {}) as ws:
        await ws.send(json.dumps({"type": "session.start"}))
        return await recv_json(ws)


def test_missing_or_wrong_key_closes_4001(secured):
    assert run(_ws_close_code(secured.ws)) == 4001
    assert run(_ws_close_code(secured.ws, {"Authorization": "Bearer wrong"})) == 4001
    assert run(_start(secured.ws, {"Authorization": f"Bearer {KEY}"}))["type"] == "session.started"


def test_minted_token_works_and_expired_token_is_refused(secured):
    assert httpx.post(f"{secured.http}/v1/tokens", timeout=10).status_code == 401
    response = httpx.post(f"{secured.http}/v1/tokens", headers={"Authorization": f"Bearer {KEY}"},
                          json={"ttl_s": 60}, timeout=10)
    assert response.status_code == 200
    token = response.json()["token"]
    assert response.json()["expires_at"] > time.time()
    assert run(_start(f"{secured.ws}?token={token}"))["type"] == "session.started"
    # a token cannot mint tokens
    assert httpx.post(f"{secured.http}/v1/tokens", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 401
    expired, _ = secured.state.auth.mint(60, now_s=time.time() - 120)
    assert run(_ws_close_code(f"{secured.ws}?token={expired}")) == 4001
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    assert run(_ws_close_code(f"{secured.ws}?token={tampered}")) == 4001


def test_http_endpoints_need_the_key(secured):
    assert httpx.get(f"{secured.http}/v1/voices", timeout=10).status_code == 401
    assert httpx.get(f"{secured.http}/v1/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code == 200
    assert httpx.get(f"{secured.http}/healthz", timeout=10).status_code == 200
