"""`voxrt loadgen --procs N`: one load point spread over N processes, so the load generator's own event loop
is not what limits a run (issue 21: report its loop lag, and spread it when needed).

The point's Poisson arrival times and workload rows are drawn once, as for one process (`runner.run_point`);
request i goes to process i mod N. Every process is started and connected to its target before the point
begins, then all are given the same start instant on the system's monotonic clock (CLOCK_MONOTONIC is one
clock for every process of a Linux host), so the arrivals are the same as with one process. The parent merges
the records in arrival order; the loop lag reported is the worst process's, and the CPU the sum.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from dataclasses import dataclass

from voxrt.gcpause import raise_young_threshold, settle_heap
from voxrt.loadgen.metrics import RequestRecord
from voxrt.loadgen.workload import WorkItem
from voxrt.timing import LoopLagMonitor

START_MARGIN_S = 0.5  # the shared start instant is this far after every child said it is ready
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TargetSpec:
    """What a child process needs to build its own target (the parent's cannot be pickled)."""

    url: str | None = None  # WebSocket
    engine_socket: str | None = None  # engine-direct, through a running engine's socket
    engine_authkey: bytes | None = None
    api_key: str | None = None
    voice: str | None = None
    pin_frames: bool = True


async def _make_target(spec: TargetSpec):
    from voxrt.loadgen.runner import EngineTarget, WebSocketTarget  # noqa: PLC0415

    if spec.url:
        return WebSocketTarget(spec.url, api_key=spec.api_key, voice=spec.voice, pin_frames=spec.pin_frames), None
    from voxrt.engine.client import EngineClient  # noqa: PLC0415

    client = await EngineClient.connect(spec.engine_socket, spec.engine_authkey)
    return EngineTarget(client, voice=spec.voice, pin_frames=spec.pin_frames), client


async def _child(spec: TargetSpec, rows: list[WorkItem], rate: float, duration_s: float, seed: int,
                 tokens_per_s: float | None, max_requests: int | None, share: tuple[int, int], conn) -> None:
    from voxrt.loadgen.runner import run_point  # noqa: PLC0415

    target, client = await _make_target(spec)
    # start-up's objects (the rows, the modules) out of the point's garbage collections, which hold the loop that
    # timestamps every frame (voxrt/gcpause.py); a child process serves one point, so what it freezes is only
    # kept until it exits
    settle_heap()
    raise_young_threshold()  # rarer young collections in the loop that timestamps every frame
    monitor = LoopLagMonitor()
    monitor.start()
    try:
        conn.send("ready")
        start_at = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        monitor.window()
        records = await run_point(target, rows, rate, duration_s, seed=seed, tokens_per_s=tokens_per_s,
                                  max_requests=max_requests, share=share, start_at=start_at)
        own = monitor.window()
        at = own["max_at_s"]
        conn.send({"records": records, "loop_lag": own["loop_lag"], "cpu_cores": own["cpu_cores"],
                   "max_lag_at_s": None if at is None else round(at - start_at, 3)})
    finally:
        await monitor.stop()
        if client is not None:
            await client.close()


def _child_main(*args) -> None:
    conn = args[-1]
    from voxrt.gateway.event_loop import run  # noqa: PLC0415

    try:
        run(_child(*args))  # uvloop where installed: ~35% less client CPU (bench/results/2026-12-05-gateway-11/)
    except BaseException as exc:  # noqa: BLE001 (the parent reports it)
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
        raise


async def run_point_procs(spec: TargetSpec, num_procs: int, rows: list[WorkItem], rate: float, duration_s: float,
                          *, seed: int, tokens_per_s: float | None = None,
                          max_requests: int | None = None) -> tuple[list[RequestRecord], dict]:
    """`run_point` over `num_procs` processes. Returns the records in arrival order and the load generator's own
    figures: the worst process's loop lag, and the CPU of every process together (cores)."""
    if num_procs < 1:
        raise ValueError(f"num_procs must be >= 1, got {num_procs}")
    if not spec.url and not spec.engine_socket:
        raise ValueError("--procs needs a target every process can reach: --url, or --engine-direct with "
                         "--engine-socket")
    ctx = mp.get_context("spawn")
    loop = asyncio.get_running_loop()
    pipes, procs = [], []
    try:
        for k in range(num_procs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child_main, daemon=True, name=f"voxrt-loadgen-{k}",
                               args=(spec, rows, rate, duration_s, seed, tokens_per_s, max_requests,
                                     (k, num_procs), child))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        for parent in pipes:
            message = await _recv(loop, parent, READY_TIMEOUT_S)
            if message != "ready":
                raise RuntimeError(f"a load generator process failed to start: {message}")
        start_at = time.monotonic() + START_MARGIN_S
        for parent in pipes:
            parent.send(start_at)
        results = [await _recv(loop, parent, None) for parent in pipes]
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        raise RuntimeError(f"a load generator process failed: {failed[0]}")
    records = sorted((rec for r in results for rec in r["records"]), key=lambda rec: rec.arrival_s)
    lags = [r["loop_lag"] for r in results]
    worst = max(results, key=lambda r: r["loop_lag"]["max_ms"] or 0.0)
    own = {"loop_lag": {"p99_ms": max((lag["p99_ms"] or 0.0) for lag in lags),
                        "max_ms": max((lag["max_ms"] or 0.0) for lag in lags)},
           # when the worst process's worst lag ended, in s after the point's arrivals began
           "max_lag_at_s": worst.get("max_lag_at_s"),
           "cpu_cores": round(sum(r["cpu_cores"] for r in results), 4), "procs": num_procs}
    return records, own


async def _recv(loop, conn, timeout_s: float | None):
    def wait():
        if timeout_s is not None and not conn.poll(timeout_s):
            return {"error": f"no answer within {timeout_s:g} s"}
        try:
            return conn.recv()
        except EOFError:
            return {"error": "the process exited"}
    return await loop.run_in_executor(None, wait)
