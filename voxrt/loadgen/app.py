"""`voxrt loadgen` end to end: the target, the points (one rate, a sweep, a capacity search), and the files.

Out: `requests.jsonl` (one line per request, with its rate), `summary.json` (the config, the pinned-length
rule, every rate's summary, the capacities), `attainment.png`, `p99_ttfa.png`, `goodput.png`. The table is
printed last.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from voxrt.loadgen.metrics import TTFA_SLO_MS, summarize
from voxrt.loadgen.replica_load import format_replicas, metrics_url, point_replicas, scrape
from voxrt.loadgen.plots import plot_summaries
from voxrt.loadgen.procs import TargetSpec, run_point_procs
from voxrt.loadgen.runner import EngineTarget, WebSocketTarget, point_rows, run_point
from voxrt.loadgen.sweep import Sweep, format_table
from voxrt.loadgen.workload import PINNED_LENGTH_RULE, load_workload
from voxrt.timing import LoopLagMonitor

PINNED_TOLERANCE_S = 0.1  # audio of a pinned request vs its pinned_audio_s (frame padding, resampling)


@dataclass
class LoadgenConfig:
    workload: str
    rate: float
    duration_s: float
    out_dir: str
    url: str | None = None
    sweep: list[float] = field(default_factory=list)
    capacity: bool = False
    capacity_tol: float = 0.05  # bisection stops when the bracket is within this fraction of its upper end
    stop_below: float | None = None  # an ascending sweep stops after a point below this attainment
    engine_direct: bool = False
    tokens_per_s: float | None = None
    max_requests: int | None = None
    seed: int = 0
    api_key: str | None = None
    voice: str | None = None
    pin_frames: bool = True  # pin each request's length from its text (PINNED_LENGTH_RULE)
    warmup: int = 8  # requests run at once before the first point and not recorded (first-use costs)
    engine_socket: str | None = None  # engine-direct through a running server's engine (VOXRT_ENGINE_AUTHKEY)
    procs: int = 1  # processes each point's requests are spread over (procs.py); 1: this process alone


async def run_loadgen(config: LoadgenConfig, engine_config=None) -> dict:
    workload = load_workload(config.workload)
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    client = None
    authkey = None
    if config.engine_direct:
        from voxrt.engine.client import EngineClient  # noqa: PLC0415

        if config.engine_socket:
            from voxrt.settings import read_env  # noqa: PLC0415

            authkey = read_env().engine_authkey
            if authkey is None:
                raise ValueError("--engine-socket needs the engine's authkey in VOXRT_ENGINE_AUTHKEY (hex)")
            client = await EngineClient.connect(config.engine_socket, authkey)
        else:
            client = await EngineClient.start(engine_config)
        target = EngineTarget(client, voice=config.voice, pin_frames=config.pin_frames)
        mode = f"engine-direct ({client.info.name}, {client.info.scheduler_type}; {client.info.lanes})"
    else:
        target = WebSocketTarget(config.url, api_key=config.api_key, voice=config.voice, pin_frames=config.pin_frames)
        mode = f"websocket ({config.url})"
    spec = TargetSpec(url=config.url if not config.engine_direct else None,
                      engine_socket=config.engine_socket if config.engine_direct else None, engine_authkey=authkey,
                      api_key=config.api_key, voice=config.voice, pin_frames=config.pin_frames)
    if config.procs > 1:
        if not spec.url and not spec.engine_socket:
            raise ValueError("--procs needs a target every process can reach: --url, or --engine-direct with "
                             "--engine-socket")
        mode += f", {config.procs} load generator processes"
    lines = open(out / "requests.jsonl", "w", encoding="utf-8")
    # The load generator's own event loop: when it lags, arrival times (and so stalls and TTFA) are its own
    # delay, not the server's. Every point's summary carries the lag and CPU of this process during the point.
    monitor = LoopLagMonitor()
    monitor.start()
    long_run = config.duration_s >= 20
    unpinned = 0  # completed pinned requests whose audio is not the pinned length (a server ignoring it)

    async def measure(rate: float) -> dict:
        nonlocal unpinned
        # A point depends only on its rate and the seed, not on the points before it: two runs (two policies)
        # at the same rate see the same arrival times and the same workload rows.
        # Rows are a seeded shuffle of the whole workload (`point_rows`), so every point's load is a uniform sample.
        point_seed = config.seed * 1_000_003 + round(rate * 1000)
        rows = [workload[i] for i in point_rows(len(workload), point_seed)]
        window_began = time.monotonic()
        monitor.window()
        replicas_url = None if config.engine_direct else metrics_url(config.url)
        replicas_before = await scrape(replicas_url) if replicas_url else None
        if config.procs > 1:
            records, spread = await run_point_procs(spec, config.procs, rows, rate, config.duration_s,
                                                    seed=point_seed, tokens_per_s=config.tokens_per_s,
                                                    max_requests=config.max_requests)
        else:
            records = await run_point(target, rows, rate, config.duration_s, seed=point_seed,
                                      tokens_per_s=config.tokens_per_s, max_requests=config.max_requests,
                                      progress=long_run)
        wrong = sum(r.status == "ok" and r.pinned_audio_s is not None
                    and abs(r.audio_s - r.pinned_audio_s) > PINNED_TOLERANCE_S for r in records)
        if wrong and not unpinned:
            print(f"[loadgen] warning: {wrong} requests did not get their pinned length; a server must be "
                  f"started with --allow-pinned-lengths to honour it", file=sys.stderr, flush=True)
        unpinned += wrong
        for record in records:
            lines.write(json.dumps(record.to_json()) + "\n")
        lines.flush()
        own = monitor.window()
        # when the worst lag ended, in s after the point began (its arrivals' start with --procs, else the
        # measurement's): a lag at the point's edges (start-up, the records) is not one under load
        max_at = None if own["max_at_s"] is None else round(own["max_at_s"] - window_began, 3)
        if config.procs > 1:  # the worst process's lag; the CPU of all of them (this one only waits)
            own = {"loop_lag": spread["loop_lag"], "cpu_cores": spread["cpu_cores"] + own["cpu_cores"]}
            max_at = spread.get("max_lag_at_s")
        point = {**summarize(records, rate, config.duration_s), "loadgen_loop_lag_p99_ms": own["loop_lag"]["p99_ms"],
                 "loadgen_loop_lag_max_ms": own["loop_lag"]["max_ms"], "loadgen_loop_lag_max_at_s": max_at,
                 "loadgen_cpu_cores": own["cpu_cores"], "loadgen_procs": config.procs}
        replicas_after = await scrape(replicas_url) if replicas_url else None
        if replicas_after is not None:  # the server's per-replica load (replica_load.py), when it exposes it
            point["replicas"] = point_replicas(replicas_before or {}, replicas_after)
            print(f"[loadgen]   {format_replicas(point['replicas'])}", file=sys.stderr, flush=True)
        return point

    started = time.time()
    sweep: Sweep | None = None
    skipped: list[float] = []
    capacities: dict[str, float | None] = {}
    capacity_method = None

    def write_summary(complete: bool) -> dict:
        # Written after every point too (complete: false), so a run stopped part-way keeps what it measured.
        summary = {
            "mode": mode,
            "complete": complete,
            "workload": config.workload,
            "slo": {"ttfa_ms": TTFA_SLO_MS, "stalls": 0},
            "pinned_length_rule": PINNED_LENGTH_RULE + ("; engine-direct: as the model's frames of the same duration"
                                                        if config.engine_direct else "")
                                  if config.pin_frames else "none: output lengths are the model's own",
            "pinned_length_mismatches": unpinned,
            "text_mode": f"token stream at {config.tokens_per_s:g} tokens/s" if config.tokens_per_s else "whole",
            "duration_s": config.duration_s,
            "max_requests": config.max_requests,
            "seed": config.seed,
            "warmup_requests": config.warmup,
            "started_unix_s": started,
            "points": sweep.summaries() if sweep is not None else [],
            "capacity_rps": capacities,
            "capacity_method": capacity_method if capacities else None,
            "skipped_rates": skipped,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return summary

    try:
        if config.warmup:
            rows = [workload[-1 - i % len(workload)] for i in range(config.warmup)]
            warm = await asyncio.gather(*(target.run_one(item, 0.0, 0.0, None) for item in rows))
            failed = [r.status for r in warm if r.status != "ok"]
            print(f"[loadgen] warm-up: {config.warmup} requests, {len(failed)} failed {failed[:3] or ''}",
                  file=sys.stderr, flush=True)
        sweep = Sweep(measure, progress=long_run or config.capacity or len(config.sweep) > 1,
                      on_point=lambda: write_summary(complete=False))
        skipped = await sweep.ascending(config.sweep or [config.rate], config.stop_below)
        capacities = {}
        if config.capacity:
            capacity_method = "bisection"
            for threshold in (0.90, 0.99):
                capacities[f"{threshold:.0%}"] = await sweep.capacity(threshold, config.rate,
                                                                         rel_tol=config.capacity_tol)
        elif len(config.sweep) > 1:
            capacity_method = "grid: the highest swept rate with every swept rate up to it meeting the threshold"
            for threshold in (0.90, 0.99):
                capacities[f"{threshold:.0%}"] = sweep.grid_capacity(threshold)
    finally:
        lines.close()
        await monitor.stop()
        if client is not None:
            await client.close()
    summary = write_summary(complete=True)
    summaries = summary["points"]
    plot_summaries(summaries, out, label=mode)
    print(f"\n{mode}; SLO: TTFA <= {TTFA_SLO_MS:g} ms and no stall; out: {out}")
    print(format_table(summaries, capacities or None), flush=True)
    return summary
