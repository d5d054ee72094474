"""Tables of this round from the benchmark's JSON files: python summarize.py base-lead60-run1 new-lead60-run1 ...
(each NAME.json, as `voxrt.loadgen.gateway_bench --out` writes it). The ceiling and sessions per core are the
benchmark's own (`ceiling`: the highest session count whose every point up to it kept send-jitter p99 within 5 ms;
sessions per core: sessions / the gateway process's CPU seconds per second, all its threads, time.process_time)."""
import json
import sys


def load(name):
    with open(f"{name}.json") as f:
        return json.load(f)


def main(names):
    print("| sessions | run | jitter p50 / p99 ms | paced p99 | ready p99 (share) | loop lag p99 | us/frame | CPU/session | wake-ups/s | stalls |")
    print("|---:|---|---|---:|---|---:|---:|---:|---:|---:|")
    rows = []
    for name in names:
        for r in load(name)["rows"]:
            rows.append((r["sessions"], name, r))
    for n, name, r in sorted(rows, key=lambda x: (x[0], names.index(x[1]))):
        j, p, rd = r["jitter"], r["jitter_paced"], r["jitter_ready"]
        ok = j["p99_ms"] is not None and j["p99_ms"] <= 5
        p99 = f"**{j['p99_ms']:.2f}**" if ok else f"{j['p99_ms']:.2f}"
        share = 100 * rd["count"] / j["count"] if j["count"] else 0
        us = 1e6 * r["cpu_cores"] / r["frames_per_s"]
        print(f"| {n} | {name} | {j['p50_ms']:.2f} / {p99} | {p['p99_ms']:.2f} | {rd['p99_ms']:.2f} ({share:.1f}%) | "
              f"{r['loop_lag']['p99_ms']:.2f} | {us:.0f} | {r['cpu_per_session_pct']:.2f}% | {r['pacer_wakeups_per_s']:.0f} | "
              f"{r['client_stalls']} |")
    print()
    print("| run | ceiling (p99 <= 5 ms) | gateway cores | sessions per core | libopus alone (floor) | fraction |")
    print("|---|---|---:|---:|---:|---:|")
    for name in names:
        d = load(name)
        c, floor = d["ceiling"], d["opus_floor"]
        fl = f"{floor['sessions_per_core']} ({floor['us_per_frame']} us)" if floor else "-"
        if c is None:
            print(f"| {name} | none (10: p99 {d['rows'][0]['jitter']['p99_ms']:.2f}) | - | - | {fl} | - |")
            continue
        frac = f"{100 * c['sessions_per_core'] / floor['sessions_per_core']:.0f}%" if floor else "-"
        print(f"| {name} | {c['sessions']} (p99 {c['jitter']['p99_ms']:.2f}) | {c['cpu_cores']:.2f} | "
              f"{c['sessions_per_core']:.0f} | {fl} | {frac} |")


if __name__ == "__main__":
    main(sys.argv[1:])
