"""Helpers of bench/gpu_product_path.sh (stdlib only; Linux /proc).

    python bench/product_path.py sample OUT.jsonl SERVE_PID LOADGEN_TAG_FILE   # until killed: CPU of every process
    python bench/product_path.py snapshot STATS_PREFIX OUT.json                 # the gateways' cumulative stats
    python bench/product_path.py report RUNS_DIR                                # the last table
    python bench/product_path.py windows RUNS_DIR TAG [WINDOW_S]                # where a run's misses fall in time
    python bench/product_path.py engine TRACE_DIR|REQUESTS_GZ [WINDOW_S]        # where first audio's time went inside the engine
    python bench/product_path.py chunks RUNS_DIR                                # engine -> gateway per chunk; who made chunks late

`report` prints every run's points, then one line per path (attainment per rate, capacity on the grid, TTFA
at 1 req/s) and the issue's comparisons. `sample` writes one line a second: for the serve process and its descendants (the engine process and the
gateway workers) and every `voxrt loadgen` process, the CPU fraction of one core since the previous line,
labelled with the run tag read from LOADGEN_TAG_FILE. `report` joins each run's loadgen summary.json, the
gateway stats snapshots taken before and after it (frame send lateness, loop lag) and the CPU samples.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from voxrt.loadgen.sweep import grid_capacity  # noqa: E402
from voxrt.loadgen.gateway_bench import window_figures  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    out = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            out += [int(x) for x in Path(path).read_text().split()]
        except (OSError, ValueError):
            pass
    return out


def _descendants(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def _loadgens() -> list[int]:
    pids = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            cmd = Path(path).read_bytes().split(b"\0")
        except OSError:
            continue
        if b"loadgen" in cmd and any(c.endswith(b"voxrt.cli") for c in cmd):
            pids.append(int(path.split("/")[2]))
    return pids


def _machine() -> tuple[list[int], dict[str, int]]:
    """/proc/stat: the all-CPU tick counters (user nice system idle iowait irq softirq steal ...) and the
    processes running / blocked on I/O now."""
    ticks, procs = [], {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu "):
            ticks = [int(x) for x in line.split()[1:]]
        elif line.startswith(("procs_running", "procs_blocked")):
            key, value = line.split()
            procs[key] = int(value)
    return ticks, procs


def machine_figures(before: list[int], after: list[int], procs: dict[str, int]) -> dict:
    """Between two reads of /proc/stat: the share of all CPU time spent waiting on I/O and stolen by the
    hypervisor (%), and the processes running / blocked at the second read."""
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta[:8]) or 1
    return {"iowait_pct": round(100 * delta[4] / total, 1), "steal_pct": round(100 * delta[7] / total, 1),
            "running": procs.get("procs_running"), "blocked": procs.get("procs_blocked")}


def sample(out_path: str, serve_pid: int, tag_file: str) -> None:
    """Once a second: each server / load generator process's CPU (cores), and the machine's (`machine`); `gap_s`
    is the time since the previous sample: well over 1 s means this sampler was held too (every process of the
    machine at once, not one event loop)."""
    last: dict[int, tuple[float, int]] = {}
    last_machine, last_t = _machine()[0], time.monotonic()
    with open(out_path, "a", encoding="utf-8") as out:
        while True:
            now = time.monotonic()
            roles = {p: "serve" for p in _descendants(serve_pid)}
            roles.update({p: "loadgen" for p in _loadgens()})
            ticks, procs = _machine()
            line = {"t": now, "tag": Path(tag_file).read_text().strip() if os.path.exists(tag_file) else "",
                    "cpu": {}, "gap_s": round(now - last_t, 3),
                    "machine": machine_figures(last_machine, ticks, procs)}
            last_machine, last_t = ticks, now
            for pid, role in roles.items():
                ticks = _cpu_ticks(pid)
                if ticks is None:
                    continue
                if pid in last:
                    t0, k0 = last[pid]
                    line["cpu"][f"{role}:{pid}"] = round((ticks - k0) / TICKS / max(1e-6, now - t0), 3)
                last[pid] = (now, ticks)
            out.write(json.dumps(line) + "\n")
            out.flush()
            time.sleep(1.0)


def snapshot(prefix: str, out_path: str) -> None:
    stats = {}
    for path in glob.glob(f"{prefix}.*.json"):
        try:
            data = json.loads(Path(path).read_text())
            stats[data["pid"]] = data
        except (OSError, ValueError):
            pass
    Path(out_path).write_text(json.dumps(stats))


def _pids(snapshot: Path) -> dict[int, dict]:
    """A `snapshot` of the gateway's stats files: pid -> its stats."""
    return {int(pid): stats for pid, stats in json.loads(snapshot.read_text()).items()}


def _max_at(point: dict) -> str:
    """The load generator's worst loop lag, ms, and when it ended in s after the point began ("160@31s"; the
    point's summaries before 2026-12-05's last round carry no time: "160")."""
    max_ms, at_s = point.get("loadgen_loop_lag_max_ms"), point.get("loadgen_loop_lag_max_at_s")
    if max_ms is None:
        return "-"
    return f"{max_ms:.0f}" if at_s is None else f"{max_ms:.0f}@{at_s:.0f}s"


def report(runs_dir: str) -> None:
    runs = Path(runs_dir)
    samples = []
    if (runs / "cpu.jsonl").exists():
        samples = [json.loads(line) for line in (runs / "cpu.jsonl").read_text().splitlines() if line.strip()]
    gateway_pids = set()
    gc_lines = []  # (run, its gateway collections), printed under the table
    for snap in runs.glob("*.stats-after.json"):
        gateway_pids |= set(json.loads(snap.read_text()))
    print("run               rate  attain%  stalled  ttfa p50  p99 ms | gw jitter p99  max ms  gw lag p99  max ms  "
          "gw CPU | loadgen lag p99  max ms@s  CPU | engine CPU mean/max")
    for summary_path in sorted(runs.glob("*/summary.json")):
        tag = summary_path.parent.name
        summary = json.loads(summary_path.read_text())
        gw = {}
        before, after = runs / f"{tag}.stats-before.json", runs / f"{tag}.stats-after.json"
        if before.exists() and after.exists():
            gw = window_figures(_pids(before), _pids(after))
            if gw["gc"] is not None:
                gc_lines.append((tag, gw["gc"], gw["gc_generations"]))
        mine = [s for s in samples if s.get("tag") == tag]
        engine = [v for s in mine for k, v in s["cpu"].items()
                  if k.startswith("serve:") and int(k.split(":")[1]) not in gateway_pids]
        engine = [v for v in engine if v > 0.01] or [0.0]

        def f(x, spec):
            return "-" if x is None else format(x, spec)
        for point in summary.get("points", []):
            print(f"{tag:16s} {point['rate']:5g}  {100 * point['attainment']:7.1f}  {point['stalled_requests']:7d}  "
                  f"{f(point['ttfa_p50_ms'], '8.0f')}  {f(point['ttfa_p99_ms'], '6.0f')} | "
                  f"{f(gw.get('jitter', {}).get('p99_ms'), '13.2f')}  {f(gw.get('jitter', {}).get('max_ms'), '6.0f')}"
                  f"  {f(gw.get('loop_lag', {}).get('p99_ms'), '10.2f')}  {f(gw.get('loop_lag', {}).get('max_ms'), '6.0f')}"
                  f"  {f(gw.get('cpu_cores'), '6.2f')} | {f(point.get('loadgen_loop_lag_p99_ms'), '15.2f')}  "
                  f"{_max_at(point):>9}  {f(point.get('loadgen_cpu_cores'), '4.2f')} | "
                  f"{sum(engine) / len(engine):.2f}/{max(engine):.2f}")
    print("(gw figures are per run, over all its points; CPU in cores; jitter = frame send time minus due time)")
    for tag in sorted({s.get("tag") for s in samples if s.get("machine")} - {"", "idle"}):
        mine = [s for s in samples if s.get("tag") == tag and s.get("machine")]
        worst = {key: max((s["machine"][key] or 0) for s in mine) for key in ("steal_pct", "iowait_pct", "blocked")}
        print(f"{tag}: machine, worst second: sampler gap {max(s['gap_s'] for s in mine):.2f} s (1 s asked), "
              f"steal {worst['steal_pct']:.1f}%, iowait {worst['iowait_pct']:.1f}%, {worst['blocked']} blocked on I/O")
    for tag, collections, generations in gc_lines:  # the gateway's garbage collections, per run
        print(f"{tag}: gateway garbage collections {collections['count']}, max {collections['max_ms']:.1f} ms, "
              f"p99 {collections['p99_ms']:.2f} ms (each holds its process's event loop)")
        for generation, figures in enumerate(generations):
            if figures is not None:
                print(f"    generation {generation}: {figures['count']}, max {figures['max_ms']:.1f} ms, "
                      f"p99 {figures['p99_ms']:.2f} ms, {figures['collected']} unreachable objects freed")
    print()
    paths(runs)


PATHS = (("direct", "engine-direct, whole text", None), ("direct-tokens", "engine-direct, tokens", None),
         ("ws-whole", "WebSocket, whole text", "ttfa-whole"), ("ws-tokens", "WebSocket, tokens", "ttfa-tokens"))


def paths(runs: Path) -> None:
    """One line per path: attainment at each rate, the capacity on the grid (90% attainment), TTFA p50/p99 at
    1 req/s (the path's own 1 req/s point, else its `ttfa-*` run); then the issue's three comparisons."""
    rows = {}
    for tag, label, ttfa_tag in PATHS:
        summary_path = runs / tag / "summary.json"
        has_ttfa_run = bool(ttfa_tag) and (runs / ttfa_tag / "summary.json").exists()
        if not summary_path.exists() and not has_ttfa_run:
            continue
        points = ([p for p in json.loads(summary_path.read_text()).get("points", []) if p.get("requests")]
                  if summary_path.exists() else [])  # a call that ran only the `ttfa` path has its 1 req/s runs
        at_one = next((p for p in points if p["rate"] == 1), None)
        if at_one is None and has_ttfa_run:
            at_one = next(iter(json.loads((runs / ttfa_tag / "summary.json").read_text()).get("points", [])), None)
        loaded = [p for p in points if p["rate"] != 1] or points
        rows[tag] = {"label": label, "points": loaded, "capacity": grid_capacity(points, 0.9), "at_one": at_one}
    if not rows:
        print("no path ran (no summary.json under the runs)")
        return

    def f(x, spec):
        return "-" if x is None else format(x, spec)
    print("path                        attainment % per rate            capacity (90%)  TTFA@1 p50  p99 ms")
    for tag, row in rows.items():
        rates = "  ".join(f"{p['rate']:g}: {100 * p['attainment']:5.1f}" for p in row["points"])
        one = row["at_one"] or {}
        print(f"{row['label']:27s} {rates:32s} {f(row['capacity'], '9g'):>14s}  {f(one.get('ttfa_p50_ms'), '10.0f')}"
              f"  {f(one.get('ttfa_p99_ms'), '6.0f')}")
    direct = rows.get("direct")
    # direct-tokens against direct: the engine's own share of the token path's loss (the same 15% for scale)
    for tag, bound in (("ws-whole", 0.10), ("ws-tokens", 0.15), ("direct-tokens", 0.15)):
        row = rows.get(tag)
        if direct is None or row is None:
            continue
        by_rate = {p["rate"]: p["attainment"] for p in direct["points"]}
        worst = max((by_rate[p["rate"]] - p["attainment"] for p in row["points"] if p["rate"] in by_rate),
                    default=None)
        cap = None if not direct["capacity"] else (row["capacity"] or 0.0) / direct["capacity"]
        verdict = "-" if worst is None else ("ok" if worst <= bound and (cap is None or cap >= 1 - bound) else "MISS")
        print(f"{row['label']} vs engine-direct: capacity {f(row['capacity'], 'g')} vs {f(direct['capacity'], 'g')}"
              f" req/s ({f(None if cap is None else 100 * cap, '.0f')}%), worst attainment gap "
              f"{f(None if worst is None else 100 * worst, '.1f')} points (bound {100 * bound:.0f}%): {verdict}")
    whole, tokens = (rows.get(t, {}).get("at_one") or {} for t in ("ws-whole", "ws-tokens"))
    if whole.get("ttfa_p50_ms") is not None and tokens.get("ttfa_p50_ms") is not None:
        gap = tokens["ttfa_p50_ms"] - whole["ttfa_p50_ms"]
        print(f"TTFA p50 at 1 req/s, tokens minus whole text: {gap:.0f} ms (bound 40 ms): "
              f"{'ok' if gap <= 40 else 'MISS'}")


def _quantile(values, frac):
    """The `frac` quantile of `values` (None left out; None when none are left): the nearest rank below."""
    values = sorted(v for v in values if v is not None)
    return values[min(len(values) - 1, int(len(values) * frac))] if values else None


def _ms(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def gateway_contexts(runs: Path):
    """The gateways' trace records (gw-trace.*.jsonl: one a WebSocket context, its chunks' timestamps) of the
    contexts that got at least one chunk."""
    for path in sorted(runs.glob("gw-trace.*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("chunks"):
                yield record


def windows(runs_dir: str, tag: str, window_s: float = 5.0) -> None:
    """Where a run's misses fall in time: per rate and per `window_s` of arrivals, the requests, the misses (first
    audio later than 200 ms, a stall or a failure), among them the refused (`server_busy`: the engine's overload
    bound) and the served streams that stalled, the client's TTFA p50 and, for WebSocket runs, the gateway trace's
    split of the first chunk (context opened -> engine chunk done, -> received by the gateway, -> first frame
    sent: p50 / p99 ms). Which windows of the same arrivals go wrong on one path and not another says whether
    the loss is a burst the engine absorbs on one path only, or the gateway's own delay."""
    runs = Path(runs_dir)
    requests = [json.loads(line) for line in (runs / tag / "requests.jsonl").read_text().splitlines() if line.strip()]
    traces = []  # (opened ns, engine ms, to gateway ms, to first send ms) per context, WebSocket runs only
    for record in gateway_contexts(runs):
        chunks = record["chunks"]
        done, received, sent = chunks[0][3], chunks[0][4], chunks[0][7]
        traces.append((record["opened_ns"], (done - record["opened_ns"]) / 1e6, (received - done) / 1e6,
                       (sent - received) / 1e6 if sent else None))
    traces.sort()

    print(f"{tag}: per {window_s:g} s of arrivals   reqs  missed  refused  stalled  ttfa p50 | engine p50/p99  "
          "to gw p50/p99  to send p50/p99 ms (gateway trace)")
    for rate in sorted({r["rate"] for r in requests}):
        rows = [r for r in requests if r["rate"] == rate]
        by_window: dict[int, list] = {}
        for r in rows:
            by_window.setdefault(int(r["arrival_s"] // window_s), []).append(r)
        for w, group in sorted(by_window.items()):
            missed = sum(1 for r in group if r["status"] != "ok" or r["ttfa_ms"] is None or r["ttfa_ms"] > 200
                         or r["stalls"])
            refused = sum(1 for r in group if r["status"] == "error:server_busy")  # --max-admission-wait-ms
            stalled = sum(1 for r in group if r["status"] == "ok" and r["stalls"])
            print(f"  rate {rate:5g}  {w * window_s:5.0f} s  {len(group):5d}  {missed:6d}  {refused:7d}  {stalled:7d}  "
                  f"{_ms(_quantile([r['ttfa_ms'] for r in group], 0.5)):>8s}")
    if traces:
        t0 = traces[0][0]
        print("gateway trace (every context of every WebSocket run, by when it opened):")
        by_window = {}
        for t in traces:
            by_window.setdefault(int((t[0] - t0) / 1e9 // window_s), []).append(t)
        for w, group in sorted(by_window.items()):
            cols = [(_quantile([g[i] for g in group], 0.5), _quantile([g[i] for g in group], 0.99)) for i in (1, 2, 3)]
            print(f"  {w * window_s:5.0f} s  {len(group):5d}  " + "  ".join(f"{_ms(a):>6s}/{_ms(b):<6s}" for a, b in cols))


def chunk_figures(runs_dir: str, late_ms: float = 1.0) -> dict:
    """Every chunk of every WebSocket context in the gateway traces (gw-trace.*.jsonl): how long it took from the
    engine core (`engine_done_ns`) to the gateway's reader thread (`received_ns`), first chunks apart from the
    rest (a first chunk waits behind whatever the engine's sender thread has queued: later chunks of other
    requests, ~140 KB each), and the chunks whose first frame left the gateway more than `late_ms` after the
    listener needed it (`need_ns`: a stall), by where the time went: the engine finished it after the need
    (`engine`), it reached the gateway after the need (`delivery`), or the gateway sent it late (`gateway`)."""
    first: list[float] = []
    later: list[float] = []
    late = {"engine": 0, "delivery": 0, "gateway": 0}
    contexts = contexts_late = 0
    for record in gateway_contexts(Path(runs_dir)):
        contexts += 1
        is_late = False
        for chunk, _first_frame, _frames, done, received, _handled, need, sent, _last in record["chunks"]:
            if done is None or received is None:
                continue
            (first if chunk == 0 else later).append((received - done) / 1e6)
            if need is not None and sent is not None and sent > need + late_ms * 1e6:
                is_late = True
                late["engine" if done > need else "delivery" if received > need else "gateway"] += 1
        contexts_late += is_late

    def spread(values: list[float]) -> dict:
        return {"chunks": len(values), **{f"p{q}_ms": _quantile(values, q / 100) for q in (50, 90, 99)},
                "max_ms": max(values) if values else None}

    return {"contexts": contexts, "contexts_with_a_late_chunk": contexts_late, "first_chunks": spread(first),
            "later_chunks": spread(later), "late_chunks": late}


def chunks(runs_dir: str) -> None:
    """`chunk_figures`, printed."""
    f = chunk_figures(runs_dir)
    print(f"gateway trace: {f['contexts']} contexts, {f['contexts_with_a_late_chunk']} with a chunk sent after the "
          f"listener needed it")
    def ms1(x) -> str:
        return "-" if x is None else f"{x:.1f}"

    for name in ("first_chunks", "later_chunks"):
        s = f[name]
        print(f"  {name.replace('_', ' ')}: {s['chunks']}, engine -> gateway p50 / p90 / p99 / max "
              f"{ms1(s['p50_ms'])} / {ms1(s['p90_ms'])} / {ms1(s['p99_ms'])} / {ms1(s['max_ms'])} ms")
    late = f["late_chunks"]
    print(f"  late chunks by where the time went: engine {late['engine']}, delivery to the gateway "
          f"{late['delivery']}, the gateway {late['gateway']}")


def engine(trace_dir: str, window_s: float = 5.0) -> None:
    """Inside the engine, per `window_s` of request arrivals (the engine's clock: the runs of one call follow
    each other, so each run's windows come in turn): requests, then p50 / p99 ms of submit -> first text,
    first text -> admitted (the prefill step), admitted -> first chunk launched, launched -> done, and the
    first chunk's slack (deadline minus done: negative is late), and the playback reports a request. From the
    `request` records of `--trace-dir` (ENGINE_TRACE=1 in bench/gpu_product_path.sh), or of the
    engine-requests.jsonl.gz the script keeps of them. Then one line per load point (`engine_points`)."""
    records = []
    root = Path(trace_dir)  # the trace directory, or the script's engine-requests.jsonl.gz
    files = sorted(root.glob("*.jsonl")) if root.is_dir() else [root] if root.exists() else []
    for path in files:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        for line in text.splitlines():
            if '"kind":"request"' in line:
                records.append(json.loads(line))
    if not records:
        print(f"no request records under {trace_dir}")
        return
    records.sort(key=lambda r: r["arrival_ms"])
    t0 = records[0]["arrival_ms"]

    def gap(r, a, b):
        return None if r.get(a) is None or r.get(b) is None else r[b] - r[a]

    columns = (("submit_ms", "text_ms"), ("text_ms", "admitted_ms"), ("admitted_ms", "first_launch_ms"),
               ("first_launch_ms", "first_done_ms"), ("first_done_ms", "first_deadline_ms"))
    print(f"engine, per {window_s:g} s of arrivals  reqs  submit>text  text>admit  admit>launch  launch>done"
          "     slack  reports  (p50/p99 ms)")
    by_window: dict[int, list] = {}
    for r in records:
        by_window.setdefault(int((r["arrival_ms"] - t0) / 1000 // window_s), []).append(r)
    last_w = None
    for w, group in sorted(by_window.items()):
        if last_w is not None and w - last_w > 1:  # arrivals paused: the next point (or the next run) starts
            print("  --")
        last_w = w
        cells = []
        for a, b in columns:
            values = [gap(r, a, b) for r in group]
            cells.append(f"{_ms(_quantile(values, 0.5)):>5s}/{_ms(_quantile(values, 0.99)):<5s}")
        reports = sum(r.get("reports", 0) for r in group) / len(group)
        print(f"  {w * window_s:6.0f} s {len(group):18d}  " + "  ".join(cells) + f"  {reports:6.1f}")
    engine_points(records)


def engine_points(records: list[dict], slo_ms: float = 200.0, pause_s: float = 3.0) -> list[dict]:
    """Per load point inside the engine (arrivals `pause_s` apart start the next point): its requests, their
    arrival rate, and the share whose first chunk was decoded within `slo_ms` of arrival. That share bounds the
    point's attainment from above (the client's receipt and any stall come after), so it tells a point the load
    generator did not get to write (cut by its run limit) from one that held. Printed, and returned."""
    points: list[list[dict]] = []
    for r in sorted(records, key=lambda r: r["arrival_ms"]):
        if not points or r["arrival_ms"] - points[-1][-1]["arrival_ms"] > pause_s * 1000:
            points.append([])
        points[-1].append(r)
    t0 = points[0][0]["arrival_ms"] if points else 0.0
    out = []
    print(f"engine, per point (arrivals {pause_s:g} s apart start the next; warm-up requests join the point after "
          f"them)\n     from    reqs   req/s  first chunk done <= {slo_ms:g} ms after arrival (bounds attainment)")
    for group in points:
        span_s = (group[-1]["arrival_ms"] - group[0]["arrival_ms"]) / 1000
        on_time = sum(1 for r in group if r.get("first_done_ms") is not None
                      and r["first_done_ms"] - r["arrival_ms"] <= slo_ms)
        row = {"from_s": (group[0]["arrival_ms"] - t0) / 1000, "requests": len(group),
               "rate": len(group) / span_s if span_s > 0 else None, "first_chunk_on_time": on_time / len(group)}
        out.append(row)
        rate = "-" if row["rate"] is None else f"{row['rate']:.1f}"
        print(f"  {row['from_s']:7.1f} s {len(group):6d}  {rate:>6s}  {100 * row['first_chunk_on_time']:5.1f}%")
    return out


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "sample":
        sample(rest[0], int(rest[1]), rest[2])
    elif command == "snapshot":
        snapshot(rest[0], rest[1])
    elif command == "report":
        report(rest[0])
    elif command == "windows":
        windows(rest[0], rest[1], *(float(x) for x in rest[2:3]))
    elif command == "engine":
        engine(rest[0], *(float(x) for x in rest[1:2]))
    elif command == "chunks":
        chunks(rest[0])
    else:
        raise SystemExit(f"unknown command {command!r}: sample, snapshot, report, windows, engine or chunks")
