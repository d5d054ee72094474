"""The gateway benchmark's tables from its JSON files, for a results folder's README:
`python bench/gateway_summary.py [--dir DIR] [--round6] NAME...` (each DIR/NAME.json as
`python -m voxrt.loadgen.gateway_bench --out` writes it; DIR/load.txt, where a run script wrote one, gives each
grid's load and CPU 0's /proc/stat line at its start and end).

Shared by the rounds' summarize.py scripts (bench/results/2026-12-0*-gateway-*/), so each round prints its tables
with the same code. The ceiling and sessions per core are the benchmark's own (`ceiling`: the highest session
count whose every point up to it kept send-jitter p99 within 5 ms; sessions per core: sessions / the gateway
process's CPU seconds per second, all its threads, time.process_time). "CPU-only %" is libopus alone's us a frame
over the gateway's at that point: the fraction of libopus alone's streams a core that the CPU per frame would
allow if the tail held. The last table averages the gateway's us a frame over each run's points from 30 to 60
sessions (the figure that repeats on a noisy host when the tails do not). `--round6`: round 6's columns (no loop
thread, steal or CPU-only figures), as its README printed them."""
from __future__ import annotations

import argparse
import json
import os

BOUND_MS = 5.0


def load(directory: str, name: str) -> dict:
    with open(os.path.join(directory, f"{name}.json")) as f:
        return json.load(f)


def steal(directory: str, name: str) -> tuple[float | None, str | None]:
    """cpu0's steal share over the grid and its load averages (start -> end), from load.txt."""
    marks = {}
    try:
        with open(os.path.join(directory, "load.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) > 8 and parts[0] == name and "cpu0" in parts:
                    i = parts.index("cpu0")
                    marks[parts[1]] = ([int(x) for x in parts[i + 1:i + 11]], " ".join(parts[4:7]))
    except OSError:
        return None, None
    if "start" not in marks or "end" not in marks:
        return None, None
    d = [b - a for a, b in zip(marks["start"][0], marks["end"][0])]
    return 100 * d[7] / sum(d), f"{marks['start'][1]} -> {marks['end'][1]}"


def us_per_frame(row: dict, key: str = "cpu_cores") -> float:
    return 1e6 * row[key] / row["frames_per_s"] if row.get(key) and row.get("frames_per_s") else 0.0


def points_table(directory: str, names: list[str], round6: bool = False) -> list[str]:
    if round6:
        out = ["| sessions | run | jitter p50 / p99 ms | paced p99 | ready p99 (share) | loop lag p99 | us/frame "
               "| CPU/session | wake-ups/s | stalls |", "|---:|---|---|---:|---|---:|---:|---:|---:|---:|"]
    else:
        out = ["| sessions | run | jitter p50 / p99 ms | paced p99 | ready p99 (share) | loop lag p99 | us/frame (loop) "
               "| CPU/session | wake-ups/s | stalls | CPU-only % |", "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    rows = [(r["sessions"], name, r, load(directory, name)["opus_floor"])
            for name in names for r in load(directory, name)["rows"]]
    for n, name, r, floor in sorted(rows, key=lambda x: (x[0], names.index(x[1]))):
        j, p, rd = r["jitter"], r["jitter_paced"], r["jitter_ready"]
        p99 = f"**{j['p99_ms']:.2f}**" if j["p99_ms"] is not None and j["p99_ms"] <= BOUND_MS else f"{j['p99_ms']:.2f}"
        share = 100 * rd["count"] / j["count"] if j["count"] else 0
        us = us_per_frame(r)
        line = (f"| {n} | {name} | {j['p50_ms']:.2f} / {p99} | {p['p99_ms']:.2f} | {rd['p99_ms']:.2f} ({share:.1f}%) | "
                f"{r['loop_lag']['p99_ms']:.2f} | ")
        if round6:
            line += f"{us:.0f} | {r['cpu_per_session_pct']:.2f}% | {r['pacer_wakeups_per_s']:.0f} | {r['client_stalls']} |"
        else:
            frac = f"{100 * floor['us_per_frame'] / us:.0f}%" if floor and us else "-"
            line += (f"{us:.0f} ({us_per_frame(r, 'loop_cpu_cores'):.0f}) | {r['cpu_per_session_pct']:.2f}% | "
                     f"{r['pacer_wakeups_per_s']:.0f} | {r['client_stalls']} | {frac} |")
        out.append(line)
    return out


def ceiling_table(directory: str, names: list[str], round6: bool = False) -> list[str]:
    if round6:
        out = ["| run | ceiling (p99 <= 5 ms) | gateway cores | sessions per core | libopus alone (floor) | fraction |",
               "|---|---|---:|---:|---:|---:|"]
    else:
        out = ["| run | load (1/5/15 min, start -> end) | cpu0 steal | ceiling (p99 <= 5 ms) | gateway cores "
               "| sessions per core | libopus alone (floor) | fraction |", "|---|---|---:|---|---:|---:|---:|---:|"]
    for name in names:
        d = load(directory, name)
        c, floor = d["ceiling"], d["opus_floor"]
        fl = f"{floor['sessions_per_core']} ({floor['us_per_frame']} us)" if floor else "-"
        head = f"| {name} | "
        if not round6:
            st, ld = steal(directory, name)
            head += f"{ld or '-'} | {f'{st:.0f}%' if st is not None else '-'} | "
        if c is None:
            first = d["rows"][0]
            out.append(head + f"none ({first['sessions']}: p99 {first['jitter']['p99_ms']:.2f}) | - | - | {fl} | - |")
            continue
        frac = 100 * c["sessions_per_core"] / floor["sessions_per_core"] if floor else None
        frac_text = "-" if frac is None else f"{frac:.0f}%" if round6 else f"{frac:.1f}%"
        per_core = f"{c['sessions_per_core']:.0f}" if round6 else f"{c['sessions_per_core']:.1f}"
        out.append(head + f"{c['sessions']} (p99 {c['jitter']['p99_ms']:.2f}) | {c['cpu_cores']:.2f} | {per_core} | "
                   f"{fl} | {frac_text} |")
    return out


def cpu_table(directory: str, names: list[str], low: int = 30, high: int = 60) -> list[str]:
    """Each run's mean us a frame (all threads, and the loop's) over its points from `low` to `high` sessions."""
    out = [f"| run | us/frame, mean of {low}-{high} sessions (loop) | libopus alone | CPU-only % |", "|---|---:|---:|---:|"]
    for name in names:
        d = load(directory, name)
        rows = [r for r in d["rows"] if low <= r["sessions"] <= high and r.get("frames_per_s")]
        if not rows:
            continue
        us = sum(us_per_frame(r) for r in rows) / len(rows)
        loop = sum(us_per_frame(r, "loop_cpu_cores") for r in rows) / len(rows)
        floor = d["opus_floor"]
        fl = f"{floor['us_per_frame']} us" if floor else "-"
        frac = f"{100 * floor['us_per_frame'] / us:.0f}%" if floor else "-"
        out.append(f"| {name} | {us:.0f} ({loop:.0f}) | {fl} | {frac} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=".", help="the folder of the NAME.json files (and load.txt)")
    p.add_argument("--round6", action="store_true", help="round 6's columns")
    p.add_argument("names", nargs="+")
    args = p.parse_args(argv)
    lines = points_table(args.dir, args.names, args.round6) + [""] + ceiling_table(args.dir, args.names, args.round6)
    if not args.round6:
        lines += [""] + cpu_table(args.dir, args.names)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
