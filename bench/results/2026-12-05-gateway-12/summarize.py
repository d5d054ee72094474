"""Tables of round 12 from the benchmark's JSON files: python summarize.py new-run1 base-run1 i16-run1 new-run2 base-run2 i16-run2
(each NAME.json beside this file). The points, ceilings and 30-60-session CPU tables are bench/gateway_summary.py's,
shared by the rounds (its docstring says what each figure is); the last table here is this round's: each run's
mean gateway us a frame (all threads, the loop's in brackets), pacer wake-ups and transport writes a frame over
its points from 100 to 130 sessions that kept send-jitter p99 within 5 ms (writes: gateways from round 12 on)."""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # bench/
from gateway_summary import BOUND_MS, main, us_per_frame  # noqa: E402


def near_ceiling(names: list[str], low: int = 100, high: int = 130) -> list[str]:
    out = [f"| run | points ({low}-{high}, p99 <= 5 ms) | us a frame (loop) | wake-ups a frame | writes a frame |",
           "|---|---|---:|---:|---:|"]
    for name in names:
        rows = [r for r in json.loads((HERE / f"{name}.json").read_text())["rows"]
                if low <= r["sessions"] <= high and r["jitter"]["p99_ms"] is not None
                and r["jitter"]["p99_ms"] <= BOUND_MS and r.get("frames_per_s")]
        if not rows:
            out.append(f"| {name} | none | - | - | - |")
            continue
        mean = lambda f: sum(f(r) for r in rows) / len(rows)  # noqa: E731
        writes = [r.get("frame_writes_per_frame") for r in rows]
        out.append(f"| {name} | {', '.join(str(r['sessions']) for r in rows)} | {mean(us_per_frame):.0f} "
                   f"({mean(lambda r: us_per_frame(r, 'loop_cpu_cores')):.0f}) | "
                   f"{mean(lambda r: r['pacer_wakeups_per_s'] / r['frames_per_s']):.3f} | "
                   f"{'-' if None in writes else f'{sum(writes) / len(writes):.3f}'} |")
    return out


if __name__ == "__main__":
    code = main(["--dir", str(HERE), *sys.argv[1:]])
    print()
    print("\n".join(near_ceiling(sys.argv[1:])))
    sys.exit(code)
