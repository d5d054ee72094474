"""The long form of the reliability suite (tests/reliability/ is the bounded form CI runs).

Starts a server in this process (tiny on the CPU, or --model), then:
  1. fuzz: --messages protocol messages (lone surrogates included) over --connections connections, with a
     canary session before, during and after;
  2. disconnects: --disconnects clients that vanish at every stage of a session (voxrt.loadgen.chaos);
  3. kill: kill -9 of the engine under load; time to the sessions' `error` and to a working new session;
  4. soak: --soak-s seconds of steady well-behaved sessions (and a little fuzz), RSS of the gateway
     process and of the engine process every 10 s, with the least-squares slope.
After each phase every resource is checked back to zero (engine requests, KV pages, codec slots, engine client
streams, sessions, admission slots, server tasks). Writes summary.json (and soak_rss.csv) to --out.

    PYTHONPATH=. python bench/reliability.py --out bench/results/<date>-reliability --messages 100000 --disconnects 1000 \\
        --soak-s 1800
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import websockets

from voxrt.engine.messages import EngineConfig
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.server import make_server
from voxrt.loadgen.chaos import DROP_POINTS, FuzzStats, canary, disconnect, fuzz_connection, fuzz_messages
from voxrt.protocol.config import Limits


class UnraisableRecorder:
    """A `sys.unraisablehook` that keeps what a failing finalizer raised, to report it later. It may run deep in
    the stack (the 2026-12-01 full run: the default hook itself hit the recursion limit, so what failed was never
    printed), so it only keeps references (at most `limit`) and formats them in `report()`, at a shallow stack."""

    def __init__(self, limit: int = 50) -> None:
        self.limit, self.count, self.kept = limit, 0, []

    def __call__(self, unraisable) -> None:
        self.count += 1
        if len(self.kept) < self.limit:
            self.kept.append((unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback,
                              unraisable.err_msg, unraisable.object))

    def report(self) -> dict:
        import traceback  # noqa: PLC0415

        seen: dict[str, int] = {}
        for exc_type, exc_value, tb, err_msg, obj in self.kept:
            frames = traceback.extract_tb(tb) if tb is not None else []
            where = " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in frames[-6:][::-1])
            try:
                what = repr(obj)[:160]
            except Exception:  # noqa: BLE001
                what = type(obj).__name__
            key = f"{getattr(exc_type, '__name__', exc_type)}: {str(exc_value)[:160]} | {err_msg} | {what} | {where}"
            seen[key] = seen.get(key, 0) + 1
        self.kept.clear()
        count, self.count = self.count, 0
        return {"count": count, "kinds": seen}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 3600 * sum((t - mx) * (v - my) for t, v in points) / var if var else float("nan")


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        gateway = GatewayConfig(max_sessions=args.max_sessions, max_queue=16, queue_timeout_s=5.0,
                                limits=Limits(inactivity_timeout_s=10.0, start_timeout_s=5.0))
        engine = EngineConfig(model=args.model, device=args.device, max_batch_size=32, max_seq_len=args.max_seq_len)
        self.server = make_server(gateway, engine, "127.0.0.1", 0, log_level="warning")
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.host, self.port = "127.0.0.1", port
        self.ws, self.http = f"ws://127.0.0.1:{port}/v1/realtime", f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(60)

    @property
    def state(self):
        return self.server.config.app.state.voxrt

    def on_loop(self, fn, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(fn(), self.state.loop).result(timeout_s)

    def resources(self) -> dict:
        state = self.state

        async def read():
            stats = await state.engine.stats(check_pools=True)
            return stats, len(asyncio.all_tasks())

        stats, tasks = self.on_loop(read)
        return {"engine_requests": stats.num_requests, "pages_used": stats.num_pages_total - stats.num_pages_free,
                "slots_used": stats.num_slots_total - stats.num_slots_free, "pool_ok": stats.pool_ok,
                "client_streams": state.engine.num_streams, "sessions": state.num_sessions,
                "admitted": state.admission.num_active, "queued": state.admission.num_queued, "tasks": tasks}

    def settle(self, baseline_tasks: int, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            r = self.resources()
            r["tasks_over_baseline"] = r.pop("tasks") - baseline_tasks
            clean = r["pool_ok"] and not any(v for k, v in r.items() if k != "pool_ok")
            if clean or time.monotonic() > deadline:
                r["all_returned"] = clean
                return r
            time.sleep(0.5)


async def fuzz_phase(b: Bench, n: int, connections: int, seed: int) -> dict:
    messages = fuzz_messages(random.Random(seed), n)
    stats = FuzzStats()
    share = -(-n // connections)
    t0 = time.monotonic()
    before = await canary(b.ws)
    during = asyncio.ensure_future(canary(b.ws, "The canary sings through the fuzz.", timeout_s=600))
    await asyncio.gather(*(fuzz_connection(b.ws, messages[i * share:(i + 1) * share], stats)
                           for i in range(connections)))
    after = await canary(b.ws)
    return {"messages_sent": stats.num_sent, "with_lone_surrogates": stats.num_surrogates,
            "connections": stats.num_connections, "replies": stats.num_replies,
            "close_codes": {str(k): v for k, v in stats.close_codes.items()}, "errors_by_code": stats.errors,
            "canary": [before[0], (await during)[0], after[0]], "seconds": round(time.monotonic() - t0, 1),
            "engine_restarts": b.state.engine.num_restarts}


async def disconnect_phase(b: Bench, n: int, seed: int) -> dict:
    rng = random.Random(seed)
    points = [DROP_POINTS[i % len(DROP_POINTS)] for i in range(n)]
    t0 = time.monotonic()
    failures = 0
    for i in range(0, n, 20):
        results = await asyncio.gather(*(disconnect(b.ws, b.host, b.port, p, rng) for p in points[i:i + 20]),
                                       return_exceptions=True)
        failures += sum(isinstance(r, Exception) for r in results)
    return {"disconnects": n, "by_point": {p: points.count(p) for p in DROP_POINTS},
            "client_side_exceptions": failures, "canary": (await canary(b.ws))[0],
            "seconds": round(time.monotonic() - t0, 1)}


async def kill_phase(b: Bench, num_sessions: int = 4) -> dict:
    got_audio = [asyncio.Event() for _ in range(num_sessions)]
    errors_at: list[float] = []

    async def session(ev: asyncio.Event):
        async with websockets.connect(b.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await ws.send(json.dumps({"type": "text", "context_id": "t", "text": "Speaking as the engine dies. " * 4}))
            while True:
                m = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(m, bytes):
                    ev.set()
                elif json.loads(m)["type"] == "error":
                    errors_at.append(time.monotonic())
                    return

    tasks = [asyncio.ensure_future(session(ev)) for ev in got_audio]
    await asyncio.gather(*(ev.wait() for ev in got_audio))
    t_kill = time.monotonic()
    os.kill(b.state.engine.pid, signal.SIGKILL)
    await asyncio.gather(*tasks)
    ready_s = None
    while ready_s is None:
        if b.state.engine_is_ready:
            ready_s = time.monotonic() - t_kill
        await asyncio.sleep(0.05)
    reason = (await canary(b.ws))[0]
    return {"sessions": num_sessions, "error_after_kill_s_max": round(max(errors_at) - t_kill, 3),
            "engine_ready_after_kill_s": round(ready_s, 2),
            "new_session_completed_after_kill_s": round(time.monotonic() - t_kill, 2), "new_session": reason,
            "restarts": b.state.engine.num_restarts}


async def soak_phase(b: Bench, seconds: float, out: Path) -> dict:
    gateway_pid, rows, stop = os.getpid(), [], time.monotonic() + seconds
    counts = {"completed": 0, "other": 0}

    async def speaker(i: int):
        rng = random.Random(i)
        while time.monotonic() < stop:
            reason, _ = await canary(b.ws, rng.choice(["Short answer.", "A slightly longer answer to speak.",
                                                       "Yes. No. Maybe, who knows?"]), timeout_s=300)
            counts["completed" if reason == "completed" else "other"] += 1

    async def sampler():
        t0 = time.monotonic()
        while time.monotonic() < stop:
            rows.append((round(time.monotonic() - t0, 1), rss_mb(gateway_pid), rss_mb(b.state.engine.pid)))
            await asyncio.sleep(10)

    async def fuzzer():
        seed = 1000
        while time.monotonic() < stop:
            await fuzz_connection(b.ws, fuzz_messages(random.Random(seed), 200))
            seed += 1
            await asyncio.sleep(1)

    await asyncio.gather(sampler(), fuzzer(), *(speaker(i) for i in range(b.args.soak_sessions)))
    with open(out / "soak_rss.csv", "w") as f:
        f.write("t_s,gateway_rss_mb,engine_rss_mb\n")
        f.writelines(f"{t},{g:.1f},{e:.1f}\n" for t, g, e in rows)
    warm = [r for r in rows if r[0] >= min(120, seconds / 4)]  # after warm-up (allocator pools fill first)
    return {"seconds": seconds, "sessions": b.args.soak_sessions, "turns": counts, "samples": len(rows),
            "gateway_rss_mb_first_last": [rows[0][1], rows[-1][1]] if rows else None,
            "engine_rss_mb_first_last": [rows[0][2], rows[-1][2]] if rows else None,
            "gateway_rss_slope_mb_per_h_after_warmup": round(slope_per_hour([(t, g) for t, g, _ in warm]), 2),
            "engine_rss_slope_mb_per_h_after_warmup": round(slope_per_hour([(t, e) for t, _, e in warm]), 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-seq-len", type=int, default=64, help="small: long turns cross the length cap")
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--connections", type=int, default=5, help="fuzzing connections at once (20 overloaded a CPU engine)")
    p.add_argument("--disconnects", type=int, default=1000)
    p.add_argument("--soak-s", type=float, default=1800)
    p.add_argument("--soak-sessions", type=int, default=4)
    p.add_argument("--seed", type=int, default=19)
    p.add_argument("--phases", default="fuzz,disconnects,kill,soak")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]), "args": vars(args),
                     "cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    phases = args.phases.split(",")
    unraisable = UnraisableRecorder()
    sys.unraisablehook = unraisable
    with Bench(args) as b:
        time.sleep(1)
        baseline = b.resources()["tasks"]
        for name in phases:
            t0 = time.monotonic()
            if name == "fuzz":
                result = asyncio.run(fuzz_phase(b, args.messages, args.connections, args.seed))
            elif name == "disconnects":
                result = asyncio.run(disconnect_phase(b, args.disconnects, args.seed))
            elif name == "kill":
                result = asyncio.run(kill_phase(b))
            elif name == "soak":
                result = asyncio.run(soak_phase(b, args.soak_s, out))
            else:
                raise SystemExit(f"unknown phase {name}")
            result["resources_after"] = b.settle(baseline)
            result["unraisable"] = unraisable.report()  # exceptions of finalizers during the phase
            result["wall_s"] = round(time.monotonic() - t0, 1)
            summary[name] = result
            print(json.dumps({name: result}), flush=True)
            (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        with httpx.Client(timeout=10) as http:
            summary["metrics_tail"] = [line for line in http.get(f"{b.http}/metrics").text.splitlines()
                                       if line.startswith(("voxrt_engine_restarts", "voxrt_admission",
                                                           "voxrt_errors_total"))]
    summary["load_avg_at_end"] = os.getloadavg()
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    ok = all(summary[n]["resources_after"]["all_returned"] for n in phases)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
