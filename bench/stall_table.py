"""Per-rate stalls and TTFA of a load generator run (its requests.jsonl), and the attainment under other TTFA
bounds than the SLO's 200 ms: for a model whose first audio cannot come within 200 ms, whether its streams
hold once they start.

    python bench/stall_table.py RUN_DIR [RUN_DIR ...] [--ttfa-ms 300,500]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--ttfa-ms", default="300,500", help="TTFA bounds for the extra attainment columns")
    args = ap.parse_args()
    bounds = [float(b) for b in args.ttfa_ms.split(",")]
    print("| run | rate | reqs | no stall % | stall ms p50 / p90 / max | TTFA ms p50 / p99 | "
          + " | ".join(f"TTFA <= {b:g} ms and no stall %" for b in bounds) + " |")
    print("|---|---:|---:|---:|---|---|" + "---:|" * len(bounds))
    for run in args.runs:
        rows = [json.loads(line) for line in open(run / "requests.jsonl", encoding="utf-8")]
        for rate in sorted({r["rate"] for r in rows}):
            point = [r for r in rows if r["rate"] == rate and r["status"] == "ok"]
            if not point:
                continue
            stall = [r["stall_ms"] for r in point]
            ttfa = [r["ttfa_ms"] for r in point]
            held = [100 * sum(r["stalls"] == 0 and r["ttfa_ms"] <= b for r in point) / len(point) for b in bounds]
            free = 100 * sum(r["stalls"] == 0 for r in point) / len(point)
            print(f"| {run.name} | {rate:g} | {len(point)} | {free:.1f} "
                  f"| {statistics.median(stall):.0f} / {pct(stall, 0.9):.0f} / {max(stall):.0f} "
                  f"| {statistics.median(ttfa):.0f} / {pct(ttfa, 0.99):.0f} | "
                  + " | ".join(f"{h:.1f}" for h in held) + " |")


if __name__ == "__main__":
    main()
