"""Issue 15's report from the calls of bench/gpu_capacity.sh: per dataset the configs' capacity table and overlaid
plots (voxrt.loadgen.compare), and the acceptance checks in one `report.md`:

- (c) engine-direct on LibriTTS at 90% / 99% against VoxServe v2's 48 / 44 req/s (an H100) and the project's
  goal of 80 / 72 (an H200);
- (c)/(a) per dataset at 90% and at 99% (goal >= 2.0);
- (c) over the WebSocket with tokens at 30/s against (c) engine-direct (bound: within 10%);
- the knee's trace: LM lane busy %, codec lanes' busy %, prefill share (bench/trace_summary.py's JSON);
- which GPU and tree each call ran on: a run whose calls came on different GPU kinds is reported so, not merged
  silently (issue 15 asks for one GPU kind).

    python bench/capacity_report.py --out DIR CALL_DIR [CALL_DIR ...]
    python bench/capacity_report.py --tree-hash   # this checkout's hash, as the calls' jobs.txt records theirs

Each CALL_DIR is one call's $OUT (its `jobs.txt`, and `<dataset>-<job>/` with the job's deadline.tgz,
product_path.tgz or knee.tgz, or those archives already unpacked). A config's sweep run over several calls (one
ran out of time, another went on higher up the grid) is read as one: its points merged by rate, a later call's
point replacing an earlier one's at the same rate (the arrivals at a rate are the same in every call); the
report names the calls it merged. A trace or split job is the last call's. A capacity is read on the grid
(voxrt.loadgen.sweep.grid_capacity); ">= R" marks a capacity whose sweep never missed (the knee lies above the
grid), "< R" one whose first point missed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tarfile
from pathlib import Path

from voxrt.loadgen import compare
from voxrt.loadgen.sweep import grid_capacity

DATASETS = {"libritts": "LibriTTS test-clean", "seedtts": "Seed-TTS eval (English)"}
CONFIGS = {  # job -> (label, run folder inside the job's archive)
    "a": ("(a) base, time-shared loop", "runs/base-sync"),
    "b": ("(b) base, lanes", "runs/base-lanes"),
    "c": ("(c) deadline, lanes + urgent lane", "runs/deadline-lanes"),
    "ws": ("(c) over the WebSocket, tokens at 30/s", "runs/ws-tokens"),
}
ARCHIVES = ("deadline.tgz", "product_path.tgz", "knee.tgz")
V2 = {"90%": 48.0, "99%": 44.0}  # VoxServe v2, Qwen3-TTS, one H100, LibriTTS test-clean
GOAL = {"90%": 80.0, "99%": 72.0}  # the project's goal on one H200
RATIO_GOAL = 2.0
WS_BOUND = 0.9  # over the WebSocket within 10% of engine-direct


def unpack(job_dir: Path, dest: Path) -> Path:
    """The job's files with its archives unpacked (into `dest`, once); a folder without archives as it is."""
    archives = [job_dir / a for a in ARCHIVES if (job_dir / a).is_file()]
    if not archives:
        return job_dir
    dest.mkdir(parents=True, exist_ok=True)
    for archive in archives:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    return dest


def gpu_of(root: Path) -> str:
    """The GPU line of the job's gpu.txt (the first line nvidia-smi wrote), or 'unknown'."""
    for path in sorted(root.rglob("gpu.txt")):
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[0]
    return "unknown"


def host_of(root: Path) -> str:
    """The host line of the job's gpu.txt (bench/host_probe.sh: name, CPU, cores, the planner's ms a step), without
    its `host: ` and the command in parentheses, or '-' (calls before the probe)."""
    for path in sorted(root.rglob("gpu.txt")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("host: "):
                return re.sub(r"\s*\(.*\)\s*$", "", line[len("host: "):]).strip()
    return "-"


def capacity_cell(summary: dict, threshold: str) -> tuple[str, float | None]:
    """The grid capacity as text (with >= / < where the grid does not bracket it) and as a number."""
    points = summary.get("points") or []
    if not points:
        return "no points", None
    rates = sorted(p["rate"] for p in points)
    cap = grid_capacity(points, float(threshold[:-1]) / 100)
    if cap is None:
        return f"< {rates[0]:g}", None
    return (f">= {cap:g}" if cap == rates[-1] else f"{cap:g}"), cap


def load_calls(call_dirs: list[Path], work: Path) -> tuple[dict, list[dict]]:
    """{(dataset, job): {"root", "gpu", "call", "gpus", "calls"}} and one row per call. A config job (a, b, c, ws)
    found in several calls is merged (`merge_sweeps`): its "root" is the merged run's, "calls" the calls it came
    from, in order; a trace or split job found twice is the later call's."""
    found_jobs: dict[tuple[str, str], list[dict]] = {}
    calls = []
    for i, call in enumerate(call_dirs):
        if not call.is_dir():
            raise ValueError(f"{call}: not a directory")
        text = (call / "jobs.txt").read_text(encoding="utf-8") if (call / "jobs.txt").is_file() else ""
        tree = re.search(r"tree (\w+)", text)
        found, gpus, hosts = [], set(), set()
        for job_dir in sorted(p for p in call.iterdir() if p.is_dir()):
            m = re.fullmatch(r"(libritts|seedtts)-(a|b|c|ws|trace|split)", job_dir.name)
            if not m:
                continue
            root = unpack(job_dir, work / f"call{i}" / job_dir.name)
            entry = {"root": root, "gpu": gpu_of(root), "call": str(call)}
            found_jobs.setdefault((m[1], m[2]), []).append(entry)
            found.append(job_dir.name)
            gpus.add(entry["gpu"])
            hosts.add(host_of(root))
        calls.append({"call": str(call), "tree": tree[1] if tree else "unknown", "jobs": found, "gpus": sorted(gpus),
                      "hosts": sorted(hosts - {"-"}) or ["-"]})
    jobs = {}
    for (dataset, job), entries in found_jobs.items():
        last = dict(entries[-1])
        if job in CONFIGS and len(entries) > 1:
            sub = CONFIGS[job][1]
            runs = [e["root"] / sub for e in entries if (e["root"] / sub / "summary.json").is_file()]
            if len(runs) > 1:
                merged = work / "merged" / f"{dataset}-{job}"
                merge_sweeps(runs, merged / sub)
                last["root"] = merged
        last["calls"] = [e["call"] for e in entries]
        last["gpus"] = sorted({e["gpu"] for e in entries})
        jobs[(dataset, job)] = last
    return jobs, calls


def merge_sweeps(run_dirs: list[Path], dest: Path) -> dict:
    """One sweep from the same config's sweeps in several calls: the points merged by rate (a later run's point
    replaces an earlier one's at the same rate), the rest of the summary the last run's, the capacity left for
    the reader to compute on the merged grid; `requests.jsonl` the runs' rows at the rates they gave. Written to
    `dest` (summary.json, requests.jsonl) and returned."""
    points: dict[float, dict] = {}
    owner: dict[float, int] = {}
    summary: dict = {}
    for i, run in enumerate(run_dirs):
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        for point in summary.get("points") or []:
            points[float(point["rate"])] = point
            owner[float(point["rate"])] = i
    merged = {k: v for k, v in summary.items() if k not in ("capacity_rps", "capacity_method", "points")}
    merged["points"] = [points[r] for r in sorted(points)]
    merged["merged_from"] = [str(r) for r in run_dirs]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "summary.json").write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
    with open(dest / "requests.jsonl", "w", encoding="utf-8") as out:
        for i, run in enumerate(run_dirs):
            rows = run / "requests.jsonl"
            if not rows.is_file():
                continue
            with open(rows, encoding="utf-8") as f:
                for line in f:
                    try:
                        rate = float(json.loads(line)["rate"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    if owner.get(rate) == i:
                        out.write(line if line.endswith("\n") else line + "\n")
    return merged


def trace_row(root: Path) -> dict | None:
    """The knee trace's summary (bench/trace_summary.py --json): rate, LM busy, codec busy per lane, prefill."""
    paths = sorted(root.rglob("trace-*.json"))
    if not paths:
        return None
    data = json.loads(paths[0].read_text(encoding="utf-8"))  # {trace file: its summary}
    rate = re.search(r"trace-(\d+)", paths[0].name)
    summary = next((v for v in data.values() if isinstance(v, dict) and "lm" in v), {})
    lm = summary.get("lm") or {}
    codec = summary.get("codec") or {}
    # busy while requests were still arriving where the summary has it (the whole window holds the drain)
    key = "busy_pct_while_arriving" if "busy_pct_while_arriving" in lm else "busy_pct"
    return {"rate": rate[1] if rate else "?", "lm_busy_pct": lm.get(key), "busy_while_arriving": key != "busy_pct",
            "prefill_share_pct": lm.get("prefill_share_pct"), "decode_batch_p50": lm.get("decode_batch_p50"),
            "codec_busy_pct": {lane: v.get(key, v.get("busy_pct")) for lane, v in codec.items() if isinstance(v, dict)}}


def report(jobs: dict, calls: list[dict], out: Path) -> str:
    lines = ["# Issue 15: SLO capacity, one run", ""]
    lines += ["## Calls", "", "| call | tree | GPU | host (bench/host_probe.sh) | jobs |", "|---|---|---|---|---|"]
    lines += [f"| {c['call']} | {c['tree']} | {', '.join(c['gpus']) or '-'} | {'; '.join(c['hosts'])} | "
              f"{' '.join(c['jobs'])} |" for c in calls]
    hosts = sorted({h.split(",")[0] for c in calls if c["jobs"] for h in c["hosts"] if h != "-"})
    if len(hosts) > 1:
        lines.append("")
        lines.append(f"The calls ran on {len(hosts)} hosts ({', '.join(hosts)}): machines of one GPU kind have held "
                     "the same arrivals points apart; set a config's figures beside its host's.")
    gpus = sorted({g for j in jobs.values() for g in j["gpus"]})
    trees = sorted({c["tree"] for c in calls if c["jobs"]})
    lines.append("")
    if len(gpus) > 1:
        lines.append(f"**Not one run: the jobs ran on different GPUs ({'; '.join(gpus)}).** Compare configs only "
                     "within one GPU's calls.")
    if len(trees) > 1:
        lines.append(f"**The calls ran different trees ({', '.join(trees)}).**")
    checks = []
    for dataset, name in DATASETS.items():
        present = [(job, label, jobs[(dataset, job)]) for job, (label, sub) in CONFIGS.items()
                   if (dataset, job) in jobs and (jobs[(dataset, job)]["root"] / sub / "summary.json").is_file()]
        if not present:
            continue
        loaded = compare.load([(f"{label} [{e['gpu']}]" if len(gpus) > 1 else label, e["root"] / CONFIGS[job][1])
                               for job, label, e in present])
        d = out / dataset
        d.mkdir(parents=True, exist_ok=True)
        (d / "compare.md").write_text(compare.table(loaded) + "\n", encoding="utf-8")
        compare.plot(loaded, d)
        lines += ["", f"## {name}", "", "| config | 90% | 99% | TTFA p50 / p99 ms at the 90% capacity |",
                  "|---|---|---|---|"]
        caps, texts = {}, {}
        for (job, _, _), (label, summary) in zip(present, loaded):
            cells = []
            for t in compare.THRESHOLDS:
                text, caps[(job, t)] = capacity_cell(summary, t)
                texts[(job, t)] = text
                cells.append(text)
            point = next((p for p in summary["points"] if p["rate"] == caps[(job, "90%")]), None)
            ttfa = "-" if point is None or point.get("ttfa_p50_ms") is None else \
                f"{point['ttfa_p50_ms']:.0f} / {point['ttfa_p99_ms']:.0f}"
            lines.append(f"| {label} | {cells[0]} | {cells[1]} | {ttfa} |")
        lines += ["", f"Attainment per rate, plots: `{dataset}/compare.md`, `{dataset}/compare_*.png`."]
        for job, label, entry in present:
            if len(entry["calls"]) > 1:
                lines.append(f"{label}: one sweep from {len(entry['calls'])} calls ({', '.join(entry['calls'])}), "
                             "its points merged by rate.")
        for t in compare.THRESHOLDS:
            a, c, ws = caps.get(("a", t)), caps.get(("c", t)), caps.get(("ws", t))
            # a capacity at the top of its grid is a lower bound: a ratio over it is one too, a ratio under it
            # (it as the divisor) an upper bound
            bound = lambda job: " (the grid ended: >=)" if texts.get((job, t), "").startswith(">=") else ""  # noqa: E731
            if a and c:
                ratio = c / a
                checks.append((f"{name}: (c)/(a) at {t} >= {RATIO_GOAL:g}",
                               f"{c:g}{bound('c')} / {a:g}{bound('a')} = {ratio:.2f}", ratio >= RATIO_GOAL))
            if c and ws:
                checks.append((f"{name}: WebSocket tokens within 10% of engine-direct at {t}",
                               f"{ws:g}{bound('ws')} vs {c:g}{bound('c')} req/s ({100 * ws / c:.0f}%)",
                               ws >= WS_BOUND * c))
            if dataset == "libritts" and c is not None:
                checks.append((f"(c) engine-direct, LibriTTS, {t} >= v2's {V2[t]:g} req/s", f"{c:g} req/s{bound('c')}",
                               c >= V2[t]))
                checks.append((f"(c) engine-direct, LibriTTS, {t} >= the goal's {GOAL[t]:g} req/s",
                               f"{c:g} req/s{bound('c')}", c >= GOAL[t]))
        trace = jobs.get((dataset, "trace"))
        row = trace_row(trace["root"]) if trace else None
        if row:
            busy = ", ".join(f"{lane} {v}%" for lane, v in row["codec_busy_pct"].items()) or "-"
            when = " while requests arrived" if row["busy_while_arriving"] else ""
            lines += ["", f"The knee traced at {row['rate']} req/s (20 s, (c) engine-direct): LM lane busy "
                      f"{row['lm_busy_pct']}%{when}, prefill share {row['prefill_share_pct']}%, decode batch p50 "
                      f"{row['decode_batch_p50']}; codec lanes busy{when}: {busy}."]
    split = [(ds, entry) for (ds, job), entry in jobs.items() if job == "split"]
    for ds, entry in split:
        md = next(iter(sorted(entry["root"].rglob("compare.md"))), None)
        if md:
            lines += ["", f"## SM-split levers against (c) ({DATASETS[ds]}, 30 s points, {entry['gpu']})", "",
                      md.read_text(encoding="utf-8").strip()]
    lines += ["", "## Acceptance", "", "| check | measured | met |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {'yes' if ok else '**no**'} |" for what, value, ok in checks]
    if not checks:
        lines.append("| (no pair of configs measured yet) | - | - |")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    return text


def tree_hash(root: Path) -> str:
    """bench/gpu_capacity.sh's `tree_hash` of the checkout at `root`: sha1 over `sha1sum`'s lines for every .py and
    .sh file under voxrt/ and bench/ (bench/results/ left out; links followed, as `find -L`: voxrt/models is a link
    to the model programs), sorted by path in byte order."""
    paths = [(Path(dirpath) / name).relative_to(root).as_posix() for d in ("voxrt", "bench")
             for dirpath, _, names in os.walk(root / d, followlinks=True) for name in names
             if name.endswith((".py", ".sh")) and (Path(dirpath) / name).is_file()]
    paths = sorted((p for p in paths if not p.startswith("bench/results/")), key=str.encode)  # LC_ALL=C sort
    lines = "".join(f"{hashlib.sha1((root / p).read_bytes()).hexdigest()}  {p}\n" for p in paths)
    return hashlib.sha1(lines.encode()).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/capacity_report.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("calls", nargs="*", type=Path, help="the calls' $OUT folders")
    ap.add_argument("--out", type=Path, help="folder for report.md, per dataset compare.md and plots")
    ap.add_argument("--tree-hash", action="store_true", help="print this checkout's tree hash (bench/gpu_capacity.sh's)")
    args = ap.parse_args(argv)
    if args.tree_hash:
        print(tree_hash(Path(__file__).resolve().parents[1]))
        return 0
    if not args.calls or args.out is None:
        ap.error("give the calls' folders and --out")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        jobs, calls = load_calls(args.calls, args.out / "unpacked")
        text = report(jobs, calls, args.out)
    except (OSError, ValueError, tarfile.TarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
