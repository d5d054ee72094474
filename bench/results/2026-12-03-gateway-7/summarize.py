"""Tables of this round from the benchmark's JSON files: python summarize.py base-lead60-run1 new-lead60-run1 ...
(each NAME.json, as `voxrt.loadgen.gateway_bench --out` writes it; load.txt beside them). The ceiling and sessions
per core are the benchmark's own (`ceiling`: the highest session count whose every point up to it kept send-jitter
p99 within 5 ms; sessions per core: sessions / the gateway process's CPU seconds per second, all its threads,
time.process_time). "CPU-only %" is libopus alone's us a frame over the gateway's at that point: the fraction of
libopus alone's streams a core that the CPU per frame would allow if the tail held."""
import json
import sys


def load(name):
    with open(f"{name}.json") as f:
        return json.load(f)


def steal(name):
    """cpu0's steal share over the grid, from load.txt's /proc/stat lines at its start and end."""
    marks = {}
    try:
        for line in open("load.txt"):
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


def main(names):
    print("| sessions | run | jitter p50 / p99 ms | paced p99 | ready p99 (share) | loop lag p99 | us/frame (loop) "
          "| CPU/session | wake-ups/s | stalls | CPU-only % |")
    print("|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in names:
        floor = load(name)["opus_floor"]
        for r in load(name)["rows"]:
            rows.append((r["sessions"], name, r, floor))
    for n, name, r, floor in sorted(rows, key=lambda x: (x[0], names.index(x[1]))):
        j, p, rd = r["jitter"], r["jitter_paced"], r["jitter_ready"]
        ok = j["p99_ms"] is not None and j["p99_ms"] <= 5
        p99 = f"**{j['p99_ms']:.2f}**" if ok else f"{j['p99_ms']:.2f}"
        share = 100 * rd["count"] / j["count"] if j["count"] else 0
        us = 1e6 * r["cpu_cores"] / r["frames_per_s"]
        loop = 1e6 * r["loop_cpu_cores"] / r["frames_per_s"] if r.get("loop_cpu_cores") else 0
        frac = f"{100 * floor['us_per_frame'] / us:.0f}%" if floor else "-"
        print(f"| {n} | {name} | {j['p50_ms']:.2f} / {p99} | {p['p99_ms']:.2f} | {rd['p99_ms']:.2f} ({share:.1f}%) | "
              f"{r['loop_lag']['p99_ms']:.2f} | {us:.0f} ({loop:.0f}) | {r['cpu_per_session_pct']:.2f}% | "
              f"{r['pacer_wakeups_per_s']:.0f} | {r['client_stalls']} | {frac} |")
    print()
    print("| run | load (1/5/15 min, start -> end) | cpu0 steal | ceiling (p99 <= 5 ms) | gateway cores | sessions per core "
          "| libopus alone (floor) | fraction |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for name in names:
        d = load(name)
        c, floor = d["ceiling"], d["opus_floor"]
        st, ld = steal(name)
        st = f"{st:.0f}%" if st is not None else "-"
        fl = f"{floor['sessions_per_core']} ({floor['us_per_frame']} us)" if floor else "-"
        if c is None:
            print(f"| {name} | {ld} | {st} | none (10: p99 {d['rows'][0]['jitter']['p99_ms']:.2f}) | - | - | {fl} | - |")
            continue
        frac = f"{100 * c['sessions_per_core'] / floor['sessions_per_core']:.1f}%" if floor else "-"
        print(f"| {name} | {ld} | {st} | {c['sessions']} (p99 {c['jitter']['p99_ms']:.2f}) | {c['cpu_cores']:.2f} | "
              f"{c['sessions_per_core']:.1f} | {fl} | {frac} |")


if __name__ == "__main__":
    main(sys.argv[1:])
