"""Rates and the capacity search: `measure(rate) -> summary` is called once per rate (results are cached),
so the search logic is testable without a server.

Capacity for a threshold (0.90, 0.99): the highest rate whose attainment is at least the threshold. From a
starting rate, the upper bound is doubled until a rate misses (or halved down while the start misses),
then bisected until the bracket is within `rel_tol` of its upper end or `max_steps` more points were run.
Attainment is assumed to fall with rate; a noisy measurement can break that, so each point should be long
(e.g. 60 s or 500 requests).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

Measure = Callable[[float], Awaitable[dict]]


def grid_capacity(points: list[dict], threshold: float) -> float | None:
    """On measured points alone: the highest rate that meets `threshold` with every lower rate meeting it too
    (the first miss ends the reading, so a lucky point above a miss does not count). None when the lowest
    rate misses."""
    best = None
    for p in sorted(points, key=lambda p: p["rate"]):
        if p["attainment"] < threshold:
            break
        best = p["rate"]
    return best


class Sweep:
    def __init__(self, measure: Measure, *, progress: bool = True,
                 on_point: Callable[[], None] | None = None) -> None:
        self._measure = measure
        self.progress = progress
        self.on_point = on_point  # called after each new point is recorded (e.g. to save a partial summary)
        self.points: dict[float, dict] = {}

    async def at(self, rate: float) -> dict:
        rate = float(round(rate, 6))
        if rate not in self.points:
            if self.progress:
                print(f"[loadgen] point {len(self.points) + 1}: rate {rate:g} req/s ...", file=sys.stderr,
                      flush=True)
            summary = await self._measure(rate)
            self.points[rate] = summary
            if self.on_point is not None:
                self.on_point()
            if self.progress:
                p99 = summary["ttfa_p99_ms"]
                print(f"[loadgen]   rate {rate:g}: {summary['requests']} requests, attainment "
                      f"{100 * summary['attainment']:.1f}%, p99 TTFA "
                      f"{'-' if p99 is None else f'{p99:.0f} ms'}, goodput {summary['goodput_rps']:.2f} req/s",
                      file=sys.stderr, flush=True)
        return self.points[rate]

    async def capacity(self, threshold: float, start: float, *, rel_tol: float = 0.05, max_steps: int = 8,
                       min_rate: float = 0.01, max_rate: float = 1e4) -> float | None:
        """The highest rate meeting `threshold`; None when even `min_rate` misses it."""
        lo: float | None = None
        hi: float | None = None
        rate = start
        while lo is None:  # find a rate that meets it
            if (await self.at(rate))["attainment"] >= threshold:
                lo = rate
            else:
                hi = rate
                rate /= 2
                if rate < min_rate:
                    return None
        while hi is None:  # find one that misses
            rate = lo * 2
            if rate > max_rate:
                return lo
            if (await self.at(rate))["attainment"] >= threshold:
                lo = rate
            else:
                hi = rate
        for _ in range(max_steps):
            if (hi - lo) <= rel_tol * hi:
                break
            mid = (lo + hi) / 2
            if (await self.at(mid))["attainment"] >= threshold:
                lo = mid
            else:
                hi = mid
        return lo

    async def ascending(self, rates: list[float], stop_below: float | None = None) -> list[float]:
        """Run `rates` in ascending order; with `stop_below`, stop after the first point whose attainment is
        below it (the rates above it are overloaded: each would only take long to drain). Returns the skipped
        rates."""
        ordered = sorted(set(float(round(r, 6)) for r in rates))
        for i, rate in enumerate(ordered):
            if (await self.at(rate))["attainment"] < (stop_below if stop_below is not None else -1.0):
                skipped = ordered[i + 1:]
                if skipped and self.progress:
                    print(f"[loadgen] attainment at {rate:g} req/s is below {stop_below:.0%}: skipping "
                          f"{', '.join(f'{r:g}' for r in skipped)}", file=sys.stderr, flush=True)
                return skipped
        return []

    def grid_capacity(self, threshold: float) -> float | None:
        """`grid_capacity` over the measured points."""
        return grid_capacity(list(self.points.values()), threshold)

    def summaries(self) -> list[dict]:
        return [self.points[r] for r in sorted(self.points)]


def format_table(summaries: list[dict], capacities: dict[str, float | None] | None = None) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [f"{'rate':>8} {'reqs':>6} {'ok':>6} {'attain%':>8} {'p50ms':>8} {'p90ms':>8} {'p99ms':>8} "
             f"{'stalled':>8} {'goodput':>8} {'audio-s/s':>10} {'audio-s/req':>11} {'lg-lag99ms':>10} {'lg-cpu':>6}"]
    for s in sorted(summaries, key=lambda s: s["rate"]):
        lines.append(f"{s['rate']:>8g} {s['requests']:>6d} {s['completed']:>6d} {100 * s['attainment']:>8.1f} "
                     f"{num(s['ttfa_p50_ms'], '8.1f'):>8} {num(s['ttfa_p90_ms'], '8.1f'):>8} "
                     f"{num(s['ttfa_p99_ms'], '8.1f'):>8} {s['stalled_requests']:>8d} {s['goodput_rps']:>8.2f} "
                     f"{s['audio_s_per_s']:>10.2f} {s['mean_audio_s']:>11.2f} "
                     f"{num(s.get('loadgen_loop_lag_p99_ms'), '10.1f'):>10} {num(s.get('loadgen_cpu_cores'), '6.2f'):>6}")
    for name, value in (capacities or {}).items():
        lines.append(f"capacity at {name} attainment: {'none found' if value is None else f'{value:.3g} req/s'}")
    return "\n".join(lines)
