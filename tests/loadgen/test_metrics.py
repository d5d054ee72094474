"""Attainment, percentiles and goodput on hand-made records; the pinned-length rule; the capacity search."""

import asyncio

import pytest

from voxrt.loadgen.listener import Listener
from voxrt.loadgen.metrics import RequestRecord, meets_slo, percentile, summarize
from voxrt.loadgen.runner import arrival_times, tokens
from voxrt.loadgen.sweep import Sweep, format_table
from voxrt.loadgen.workload import frames_at_rate, load_workload, pinned_frames


def rec(ttfa, stalls=0, stall_ms=0.0, audio_s=2.0, status="ok"):
    return RequestRecord("r", 1.0, 0.0, status, ttfa, stalls, stall_ms, audio_s, 30)


def test_slo_needs_ttfa_within_200_ms_no_stall_and_completion():
    assert meets_slo(rec(200.0))
    assert not meets_slo(rec(200.5))
    assert not meets_slo(rec(50.0, stalls=1, stall_ms=10.0))
    assert not meets_slo(rec(50.0, status="error:capacity"))
    assert not meets_slo(rec(None))


def test_summary_from_listener_timelines():
    records = []
    for arrivals in ([(0.1, 1.0), (0.5, 1.0)],  # TTFA 100, no stall: meets
                     [(0.25, 0.25), (0.5, 1.0)],  # TTFA 250: misses
                     [(0.125, 0.25), (0.5, 1.0)],  # stall of 125 ms: misses
                     [(0.2, 0.5), (0.7, 0.5)]):  # TTFA 200 exactly, back to back: meets
        lis = Listener(0.0)
        for i, (t, d) in enumerate(arrivals):
            lis.on_audio(t, d, is_last=i == len(arrivals) - 1)
        records.append(RequestRecord("r", 2.0, 0.0, "ok", lis.ttfa_ms, lis.num_stalls, lis.stall_ms, lis.audio_s,
                                     10))
    records.append(rec(None, audio_s=0.0, status="error:capacity"))
    assert records[2].stalls == 1 and records[2].stall_ms == 125.0
    s = summarize(records, rate=2.0, duration_s=2.0)
    assert s["requests"] == 5 and s["completed"] == 4 and s["failed"] == 1
    assert s["slo_met"] == 2
    assert s["attainment"] == 0.4
    assert s["goodput_rps"] == 1.0
    assert s["stalled_requests"] == 1
    assert s["audio_s_per_s"] == (2.0 + 1.25 + 1.25 + 1.0) / 2.0
    assert s["mean_audio_s"] == (2.0 + 1.25 + 1.25 + 1.0) / 4
    # TTFAs of requests with audio: 100, 125, 200, 250
    assert s["ttfa_p50_ms"] == 162.5
    assert s["ttfa_p90_ms"] == pytest.approx(235.0)
    assert s["ttfa_p99_ms"] == pytest.approx(248.5)


def test_percentile_and_empty_summary():
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    s = summarize([], rate=1.0, duration_s=5.0)
    assert s["attainment"] == 0.0 and s["ttfa_p99_ms"] is None and s["goodput_rps"] == 0.0


def test_a_pinned_length_keeps_its_duration_at_another_frame_rate():
    """Engine-direct, the load generator knows the model's frame rate: 259 frames of 80 ms (20.72 s) are 243
    of Orpheus's 85.3 ms frames (20.74 s), not 259 of them (22.1 s: bench/results/2026-12-02-orpheus)."""
    assert frames_at_rate(259, 12.5) == 259
    assert frames_at_rate(259, 24000 / 2048) == 243
    assert frames_at_rate(1, 24000 / 2048) == 1
    assert frames_at_rate(10, 25.0) == 20


def test_pinned_frames_rule(tmp_path):
    assert pinned_frames("x" * 15) == 13  # 12.5 frames: halves round up
    assert pinned_frames("x" * 14) == 12  # 11.67
    assert pinned_frames("x" * 30) == 25
    assert pinned_frames("x" * 150) == 125
    assert pinned_frames("H") == 1
    path = tmp_path / "w.jsonl"
    path.write_text('{"id": "a", "text": "Hello there."}\n\n{"id": "b", "text": "  "}\n{"id": "c", "text": "Hi"}\n')
    items = load_workload(path)
    assert [i.id for i in items] == ["a", "c"]
    assert items[0].num_frames == pinned_frames("Hello there.") == 10
    path.write_text("not json\n")
    with pytest.raises(ValueError):
        load_workload(path)


def test_arrivals_are_poisson_and_reproducible():
    a = arrival_times(10.0, 100.0, seed=3)
    assert a == arrival_times(10.0, 100.0, seed=3)
    assert all(0 < x < 100 for x in a) and a == sorted(a)
    assert 900 < len(a) < 1100
    assert len(arrival_times(10.0, 100.0, seed=3, max_requests=5)) == 5
    assert "".join(tokens(" Hello there, world.")) == " Hello there, world."


def test_capacity_bisection_on_a_model_curve():
    # attainment falls linearly from 100% at 0 req/s to 0% at 20 req/s: 90% at 2, 99% at 0.2 req/s
    async def measure(rate):
        att = max(0.0, 1.0 - rate / 20.0)
        return summarize([], rate, 1.0) | {"attainment": att}

    async def main():
        sweep = Sweep(measure, progress=False)
        c90 = await sweep.capacity(0.90, start=1.0, rel_tol=0.01, max_steps=20)
        c99 = await sweep.capacity(0.99, start=1.0, rel_tol=0.01, max_steps=20)
        return sweep, c90, c99

    sweep, c90, c99 = asyncio.run(main())
    assert 1.98 <= c90 <= 2.0
    assert 0.198 <= c99 <= 0.2
    table = format_table(sweep.summaries(), {"90%": c90, "99%": c99})
    assert table.splitlines()[-1].startswith("capacity at 99% attainment")


def test_point_rows_are_a_seeded_uniform_shuffle():
    from voxrt.loadgen.runner import point_rows

    rows = point_rows(1000, seed=7)
    assert sorted(rows) == list(range(1000)) and rows == point_rows(1000, seed=7)
    assert rows != point_rows(1000, seed=8) and rows != list(range(1000))
    # the first 200 rows are spread over the whole workload, not one block: every tenth of it is drawn from
    assert {r // 100 for r in rows[:200]} == set(range(10))


def test_ascending_sweep_stops_below_and_reads_capacity_on_the_grid(capsys):
    # a noisy curve: 14 misses 99% but 16 meets it again; 18 is below the stop mark, so 20 and 22 never run
    curve = {8.0: 1.0, 10.0: 0.995, 12.0: 0.95, 14.0: 0.98, 16.0: 0.992, 18.0: 0.6, 20.0: 0.9, 22.0: 0.1}
    ran = []

    async def measure(rate):
        ran.append(rate)
        return summarize([], rate, 1.0) | {"attainment": curve[rate]}

    async def main():
        sweep = Sweep(measure, progress=True)
        skipped = await sweep.ascending([22, 8, 12, 10, 16, 14, 18, 20], stop_below=0.8)
        return sweep, skipped

    sweep, skipped = asyncio.run(main())
    assert ran == [8.0, 10.0, 12.0, 14.0, 16.0, 18.0]
    assert skipped == [20.0, 22.0]
    assert "skipping 20, 22" in capsys.readouterr().err
    assert sweep.grid_capacity(0.90) == 16.0
    assert sweep.grid_capacity(0.99) == 10.0  # 12 misses: 16 meeting it again does not count
    assert sweep.grid_capacity(1.01) is None  # the lowest rate misses

    async def all_points():
        sweep = Sweep(measure, progress=False)
        return await sweep.ascending([8, 22]), sweep

    skipped, sweep = asyncio.run(all_points())
    assert skipped == [] and sorted(sweep.points) == [8.0, 22.0]


def test_on_point_runs_after_each_new_point_with_it_recorded():
    seen = []

    async def measure(rate):
        return summarize([], rate, 1.0) | {"attainment": 1.0}

    async def main():
        sweep = Sweep(measure, progress=False, on_point=lambda: seen.append(sorted(sweep.points)))
        await sweep.ascending([2, 1])
        await sweep.at(2)  # cached: no new point
        return sweep

    asyncio.run(main())
    assert seen == [[1.0], [1.0, 2.0]]


def test_run_point_with_a_fake_target_and_progress(monkeypatch, capsys):
    import voxrt.loadgen.runner as runner
    from voxrt.loadgen.workload import WorkItem

    class Fake:
        async def run_one(self, item, rate, arrival_s, tokens_per_s):
            await asyncio.sleep(0.05)
            return RequestRecord(item.id, rate, arrival_s, "ok", 10.0, 0, 0.0, 1.0, len(item.text))

    monkeypatch.setattr(runner, "PROGRESS_EVERY_S", 0.01)
    work = [WorkItem("a", "Hello.", 5), WorkItem("b", "Hi.", 2)]
    records = asyncio.run(runner.run_point(Fake(), work, rate=50.0, duration_s=0.2, seed=1, max_requests=4,
                                           progress=True, offset=1))
    assert [r.id for r in records] == ["b", "a", "b", "a"][:len(records)]
    assert records and [r.arrival_s for r in records] == sorted(r.arrival_s for r in records)
    assert "requests done" in capsys.readouterr().err


def test_a_point_depends_only_on_its_rate_and_seed(tmp_path):
    """Two runs (say two policies) at the same rate get the same arrivals and rows, whatever came before."""
    import asyncio  # noqa: PLC0415

    from voxrt.loadgen.app import LoadgenConfig, run_loadgen  # noqa: PLC0415
    from voxrt.loadgen.metrics import RequestRecord  # noqa: PLC0415

    class Recorder:
        def __init__(self) -> None:
            self.seen: dict[float, list[tuple[str, float]]] = {}

        async def run_one(self, item, rate, arrival_s, tokens_per_s):
            self.seen.setdefault(rate, []).append((item.id, round(arrival_s, 9)))
            return RequestRecord(item.id, rate, arrival_s, "ok", 50.0, 0, 0.0, 1.0, len(item.text))

    rows = "".join(f'{{"id": "r{i}", "text": "text number {i} here."}}\n' for i in range(50))
    workload = tmp_path / "w.jsonl"
    workload.write_text(rows)
    seen = []
    for sweep in ([2.0, 4.0], [4.0]):
        recorder = Recorder()
        import voxrt.loadgen.app as app  # noqa: PLC0415

        original = app.WebSocketTarget
        app.WebSocketTarget = lambda *a, **k: recorder
        try:
            asyncio.run(run_loadgen(LoadgenConfig(workload=str(workload), rate=1.0, duration_s=2.0,
                                                  out_dir=str(tmp_path / f"o{len(seen)}"), url="ws://x",
                                                  sweep=sweep, warmup=0)))
        finally:
            app.WebSocketTarget = original
        seen.append(recorder.seen)
    assert seen[0][4.0] == seen[1][4.0] and seen[0][4.0]
