"""PNG plots against offered rate (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path


def plot_summaries(summaries: list[dict], out_dir: str | Path, label: str = "") -> list[Path]:
    """attainment.png, p99_ttfa.png and goodput.png in `out_dir`; returns their paths."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = sorted(summaries, key=lambda s: s["rate"])
    rates = [s["rate"] for s in points]
    charts = [
        ("attainment.png", "SLO attainment (TTFA <= 200 ms, no stall)", [100 * s["attainment"] for s in points],
         "attainment (%)", [(90, "90%"), (99, "99%")]),
        ("p99_ttfa.png", "p99 time to first audio",
         [s["ttfa_p99_ms"] if s["ttfa_p99_ms"] is not None else float("nan") for s in points], "p99 TTFA (ms)",
         [(points[0]["slo_ttfa_ms"] if points else 200, "SLO")]),
        ("goodput.png", "goodput (requests/s meeting the SLO)", [s["goodput_rps"] for s in points],
         "goodput (req/s)", []),
    ]
    paths = []
    for name, title, values, ylabel, lines in charts:
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        ax.plot(rates, values, marker="o", label=label or None)
        for y, text in lines:
            ax.axhline(y, color="grey", linestyle="--", linewidth=0.8)
            ax.annotate(text, (rates[0] if rates else 0, y), fontsize=8, color="grey")
        if name == "goodput.png" and rates:
            ax.plot(rates, rates, color="grey", linestyle=":", linewidth=0.8, label="offered")
            ax.legend()
        elif label:
            ax.legend()
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = out / name
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
