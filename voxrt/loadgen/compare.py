"""Several `voxrt loadgen` runs side by side: one table (capacity at 90% / 99% and attainment per rate), the
ratio of each run's capacity to the first run's, and overlaid plots (`compare_attainment.png`,
`compare_p99_ttfa.png`, `compare_goodput.png`: requests a second within the SLO against the offered rate, with the
ideal y = x for reference).

    python -m voxrt.loadgen.compare --out DIR "(a) base, time-shared=DIR_A" "(c) deadline, lanes=DIR_C" ...

The first run is the baseline of the ratios. Each DIR holds a loadgen `summary.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from voxrt.loadgen.sweep import grid_capacity

THRESHOLDS = ("90%", "99%")


def load(label_dirs: list[tuple[str, str | Path]]) -> list[tuple[str, dict]]:
    runs = []
    for label, d in label_dirs:
        path = Path(d) / "summary.json"
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{label}: cannot read {path}: {exc}") from None
        if not summary.get("capacity_rps"):  # a run stopped part-way: read its capacity on the points it has
            summary["capacity_rps"] = {t: grid_capacity(summary["points"], float(t[:-1]) / 100) for t in THRESHOLDS}
            label += " (partial)" if summary.get("complete") is False else ""
        runs.append((label, summary))
    return runs





def _fmt_rate(v: float | None) -> str:
    return "none" if v is None else f"{v:g} req/s"


def ratios(runs: list[tuple[str, dict]]) -> dict[str, dict[str, float | None]]:
    """Each run's capacity over the first run's, per threshold (None where either is missing)."""
    base = runs[0][1].get("capacity_rps") or {}
    out = {}
    for label, summary in runs:
        caps = summary.get("capacity_rps") or {}
        out[label] = {t: (caps[t] / base[t] if caps.get(t) and base.get(t) else None) for t in THRESHOLDS}
    return out


def table(runs: list[tuple[str, dict]]) -> str:
    rates = sorted({p["rate"] for _, s in runs for p in s["points"]})
    head = "| run | " + " | ".join(f"{t} capacity" for t in THRESHOLDS) + " | " + " | ".join(
        f"x {t}" for t in THRESHOLDS) + " | " + " | ".join(f"{r:g}" for r in rates) + " |"
    lines = [f"Attainment (%) per offered rate (req/s); x = capacity over {runs[0][0]}'s.", "",
             head, "|" + "---|" * (head.count("|") - 1)]
    rel = ratios(runs)
    for label, s in runs:
        caps = s.get("capacity_rps") or {}
        by_rate = {p["rate"]: p for p in s["points"]}
        cells = [_fmt_rate(caps.get(t)) for t in THRESHOLDS]
        cells += ["-" if rel[label][t] is None else f"{rel[label][t]:.2f}" for t in THRESHOLDS]
        cells += [_attainment_cell(by_rate[r]) if r in by_rate else "-" for r in rates]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if any(p.get("failed") for _, s in runs for p in s["points"]):
        lines += ["", "In brackets: the share of the point's requests that failed (an engine refusing a stream it "
                  "cannot start in time, `--max-admission-wait-ms`, among them); a failed request counts as missed."]
    return "\n".join(lines)


def _attainment_cell(point: dict) -> str:
    """A point's attainment (%), and the share of its requests that failed when any did."""
    cell = f"{100 * point['attainment']:.1f}"
    failed, requests = point.get("failed") or 0, point.get("requests") or 0
    return f"{cell} ({100 * failed / requests:.1f}% failed)" if failed and requests else cell


def plot(runs: list[tuple[str, dict]], out_dir: str | Path) -> list[Path]:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    charts = [("compare_attainment.png", "SLO attainment (TTFA <= 200 ms, no stall)", "attainment (%)",
               lambda p: 100 * p["attainment"], [(90, "90%"), (99, "99%")]),
              ("compare_p99_ttfa.png", "p99 time to first audio", "p99 TTFA (ms)",
               lambda p: float("nan") if p["ttfa_p99_ms"] is None else p["ttfa_p99_ms"], [(200, "SLO")]),
              ("compare_goodput.png", "goodput (requests a second within the SLO)", "goodput (req/s)",
               lambda p: float("nan") if p.get("goodput_rps") is None else p["goodput_rps"], [])]
    paths = []
    for name, title, ylabel, value, hlines in charts:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
        for label, s in runs:
            points = sorted(s["points"], key=lambda p: p["rate"])
            ax.plot([p["rate"] for p in points], [value(p) for p in points], marker="o", label=label)
        for y, text in hlines:
            ax.axhline(y, color="grey", linestyle="--", linewidth=0.8)
            ax.annotate(text, (ax.get_xlim()[0], y), fontsize=8, color="grey")
        if name == "compare_p99_ttfa.png":
            ax.set_yscale("log")
        if name == "compare_goodput.png":  # every request within the SLO: goodput = offered rate
            rates = sorted({p["rate"] for _, s in runs for p in s["points"]})
            if rates:
                ax.plot([0, rates[-1]], [0, rates[-1]], color="grey", linestyle=":", linewidth=0.8,
                        label="offered rate")
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        paths.append(out / name)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxrt.loadgen.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=DIR, the first one the baseline")
    parser.add_argument("--out", required=True, help="directory for compare.md and the PNGs")
    args = parser.parse_args(argv)
    pairs = []
    for item in args.runs:
        label, sep, d = item.rpartition("=")
        if not sep or not label or not d:
            parser.error(f"expected LABEL=DIR, got {item!r}")
        pairs.append((label, d))
    try:
        runs = load(pairs)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = table(runs)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "compare.md").write_text(text + "\n", encoding="utf-8")
    plot(runs, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
