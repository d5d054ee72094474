"""`voxrt serve --dp-size 2` on the CPU: two tiny-lite engine processes under one gateway (engine/replicas.py).

New contexts go to the replica with the most SLO headroom, a killed replica fails only its own contexts and
restarts while the other serves, cancel and close reach the replica that holds each context, /readyz and
/metrics speak per replica. No timing is asserted: waits are bounded polls of the state the server holds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import pytest

from conftest import connect, live_server, recv_json, run, start_session  # noqa: F401

# 8 decode slots a replica; a first chunk due a minute after its request arrives, no delivery margin and no
# modelled step costs, so that the slack of the few streams these tests run does not decide a route on a
# loaded CPU (the routing rule's slack part is tested in tests/engine/test_headroom.py)
ENGINE = dict(max_batch_size=8, deadline_startup_ms=60_000, deadline_margin_ms=0,
              costs=(("lm_base_ms", 0.0), ("lm_per_request_ms", 0.0), ("codec_base_ms", 0.0),
                     ("codec_per_frame_ms", 0.0)))
BURST = {"mode": "burst"}


@pytest.fixture(scope="module")
def live():
    with live_server(engine_kwargs=ENGINE, dp_size=2, allow_pinned_lengths=True) as server:
        yield server


def on_loop(live, coro, timeout_s: float = 30):
    """Runs a coroutine on the server's event loop (the engine clients belong to it)."""
    return asyncio.run_coroutine_threadsafe(coro, live.state.loop).result(timeout_s)


def wait_for(predicate, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def replica_of(live, context_id: str) -> int:
    """Which replica holds an open context (its runner's engine, engine/replicas.py's ReplicaClient)."""
    for session in list(live.state.sessions):
        runner = session.runners.get(context_id)
        if runner is not None:
            return runner.engine.replica
    raise KeyError(context_id)


def metrics_text(live) -> str:
    return httpx.get(f"{live.http}/metrics", timeout=10).text


def series(text: str, name: str, replica: int) -> float:
    prefix = f'{name}{{replica="{replica}"'
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(prefix)


async def until_done(ws, context_ids: set[str], timeout_s: float = 60) -> dict[str, dict]:
    """Reads until every context in `context_ids` is done: {context id: {"frames": n, "messages": [...]}}."""
    seen = {c: {"frames": 0, "messages": []} for c in context_ids}
    indexes: dict[int, str] = {}
    done: set[str] = set()
    while done != context_ids:
        message = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(message, bytes):
            index = int.from_bytes(message[2:4], "big")
            if index in indexes:
                seen[indexes[index]]["frames"] += 1
            continue
        data = json.loads(message)
        cid = data.get("context_id")
        if data["type"] == "context.started":
            indexes[data["index"]] = cid
        if cid in seen:
            seen[cid]["messages"].append(data)
            if data["type"] == "context.done":
                done.add(cid)
    return seen


def assert_all_returned(live) -> None:
    engine = live.state.engine
    wait_for(lambda: engine.num_streams == 0, "every engine stream to end")
    for stats in on_loop(live, engine.replica_stats(check_pools=True)):
        assert stats is not None and stats.num_requests == 0 and stats.pool_ok
        assert stats.num_pages_free == stats.num_pages_total and stats.num_slots_free == stats.num_slots_total
    # and the routing sees it: the next load reports say so (the next test's routes start from idle replicas)
    wait_for(lambda: all(c.load is not None and c.load.num_requests == 0 and c.num_unreported_submits == 0
                         for c in engine.replicas), "idle load reports")


def test_ready_with_two_replicas_and_per_replica_metrics(live):
    body = httpx.get(f"{live.http}/readyz", timeout=10).json()
    assert body["status"] == "ready" and body["replicas"] == {"ready": 2, "total": 2}
    wait_for(lambda: all(c.load is not None for c in live.state.engine.replicas), "load reports")
    text = metrics_text(live)
    for replica in (0, 1):
        assert series(text, "voxrt_replica_ready", replica) == 1
        assert series(text, "voxrt_replica_headroom", replica) == 1.0  # idle
        assert series(text, "voxrt_replica_max_batch_size", replica) == 8
        assert series(text, "voxrt_replica_restarts_total", replica) == 0
    assert 'voxrt_replica_info{device="cpu",replica="1"} 1.0' in text


def test_new_contexts_go_to_the_replica_with_headroom(live):
    replicas = live.state.engine.replicas
    busy = replicas[0]
    # twelve requests held on replica 0 (no text yet: queued, as an open context's is): past its 8 slots
    held = [on_loop(live, busy.submit(text="", final=False)) for _ in range(12)]
    wait_for(lambda: busy.load.num_waiting == 12 and busy.num_unreported_submits == 0, "replica 0's report")
    routed_before = [c.num_contexts for c in replicas]

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, pacing=BURST)
            for cid in ("a", "b", "c"):
                await ws.send(json.dumps({"type": "text", "context_id": cid, "text": "Routed by headroom."}))
                await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
            return await until_done(ws, {"a", "b", "c"})

    try:
        results = run(scenario())
    finally:
        for rid in held:
            on_loop(live, busy.cancel(rid))
    # replica 0's headroom is 1 - 12/8 = -0.5; replica 1's stays above it with three contexts (1, 7/8, 6/8;
    # its streams' slack would have to be 100 ms past a deadline to bring it under)
    assert [c.num_contexts - n for c, n in zip(replicas, routed_before)] == [0, 3]
    for result in results.values():
        assert result["messages"][-1]["reason"] == "completed" and result["messages"][-1]["audio_ms"] > 0
    assert_all_returned(live)


def test_cancel_reaches_each_contexts_replica(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, pacing=BURST)
            for cid in ("x", "y"):  # two idle replicas: the second context goes where the first did not
                await ws.send(json.dumps({"type": "text", "context_id": cid, "text": "A long turn to cancel.",
                                          "num_frames": 2000}))
            started = set()
            while started != {"x", "y"}:
                data = await recv_json(ws)
                if data["type"] == "context.started":
                    started.add(data["context_id"])
            placed = {replica_of(live, "x"), replica_of(live, "y")}
            await ws.send(json.dumps({"type": "cancel", "context_id": "*"}))
            results = await until_done(ws, {"x", "y"})
            return placed, results

    placed, results = run(scenario())
    assert placed == {0, 1}
    for result in results.values():
        assert [m["type"] for m in result["messages"]][-2:] == ["cancelled", "context.done"]
        assert result["messages"][-1]["reason"] == "cancelled"
    assert_all_returned(live)  # both replicas freed their pages and slots


def test_a_killed_replica_fails_only_its_contexts_and_restarts(live):
    """Last in the module: a replica restarts."""
    replicas = live.state.engine.replicas

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, pacing=BURST)
            await ws.send(json.dumps({"type": "text", "context_id": "doomed", "text": "Speaking when it dies.",
                                      "num_frames": 2000}))
            while (await recv_json(ws))["type"] != "context.started":
                pass
            doomed = replica_of(live, "doomed")
            # the survivor goes to the other replica: the doomed one holds a running stream
            await ws.send(json.dumps({"type": "text", "context_id": "survivor", "text": "I finish my turn."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "survivor"}))
            while (await recv_json(ws))["type"] != "context.started":
                pass
            survivor = replica_of(live, "survivor")
            while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):  # audio is flowing
                pass
            pid = replicas[doomed].pid
            os.kill(pid, signal.SIGKILL)  # kill -9
            results = await until_done(ws, {"doomed", "survivor"})
            return doomed, survivor, pid, results

    doomed, survivor, pid, results = run(scenario())
    assert doomed != survivor
    errors = [m for m in results["doomed"]["messages"] if m["type"] == "error"]
    assert errors and errors[0]["code"] == "engine_unavailable"
    assert results["doomed"]["messages"][-1]["reason"] == "error"
    survivor_done = results["survivor"]["messages"][-1]
    assert survivor_done["reason"] == "completed" and survivor_done["audio_ms"] > 0
    assert httpx.get(f"{live.http}/readyz", timeout=10).status_code == 200  # the other replica serves

    wait_for(lambda: replicas[doomed].is_ready, "the killed replica's restart", timeout_s=120)
    assert replicas[doomed].pid != pid and replicas[doomed].num_restarts == 1
    assert replicas[survivor].num_restarts == 0
    text = metrics_text(live)
    assert series(text, "voxrt_replica_restarts_total", doomed) == 1
    assert series(text, "voxrt_replica_restarts_total", survivor) == 0

    async def served_again():  # the restarted replica serves a request of its own
        engine = replicas[doomed]
        rid = await engine.submit(text="Back again.", final=True)
        return sum([chunk.num_frames async for chunk in engine.stream(rid)])

    assert on_loop(live, served_again(), timeout_s=60) > 0
    assert_all_returned(live)
