"""bench/product_path.py's `report` and `windows` (the GPU call's last table and its miss-in-time view), on
hand-made run directories: a wrong table costs a GPU call to find out."""

from __future__ import annotations

import importlib.util
import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("product_path", ROOT / "bench" / "product_path.py")
product_path = importlib.util.module_from_spec(spec)
spec.loader.exec_module(product_path)


def _point(rate, ttfa_p50, ttfa_p99, attainment=1.0):
    return {"rate": rate, "requests": 20, "attainment": attainment, "stalled_requests": 0,
            "ttfa_p50_ms": ttfa_p50, "ttfa_p99_ms": ttfa_p99}


def _summary(runs: Path, tag: str, *points) -> None:
    (runs / tag).mkdir(parents=True)
    (runs / tag / "summary.json").write_text(json.dumps({"points": list(points)}))


def test_a_call_that_ran_only_the_ttfa_path_reports_its_gap(tmp_path, capsys):
    _summary(tmp_path, "ttfa-whole", _point(1, 21.5, 28.8))
    _summary(tmp_path, "ttfa-tokens", _point(1, 48.6, 56.3))
    product_path.paths(tmp_path)
    out = capsys.readouterr().out
    assert "no path ran" not in out
    assert "tokens minus whole text: 27 ms (bound 40 ms): ok" in out


def test_windows_counts_misses_per_window_and_splits_the_first_chunk(tmp_path, capsys):
    rows = [dict(rate=104.0, arrival_s=1.0, status="ok", ttfa_ms=50.0, stalls=0),
            dict(rate=104.0, arrival_s=6.0, status="ok", ttfa_ms=250.0, stalls=0),
            dict(rate=104.0, arrival_s=7.0, status="ok", ttfa_ms=90.0, stalls=1),
            dict(rate=104.0, arrival_s=8.0, status="error:server_busy", ttfa_ms=None, stalls=0)]
    (tmp_path / "ws-whole").mkdir()
    (tmp_path / "ws-whole" / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    opened = 10**9
    trace = {"opened_ns": opened, "chunks": [[0, 0, 2, opened + 40_000_000, opened + 42_000_000, 0, None,
                                              opened + 43_000_000, 0]]}
    (tmp_path / "gw-trace.1.jsonl").write_text(json.dumps(trace) + "\n")
    product_path.windows(str(tmp_path), "ws-whole", 5.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[-5:] == ["1", "0", "0", "0", "50"]  # window 0 s: 1 request, no miss
    # window 5 s: a late first audio, a stall and a refusal (--max-admission-wait-ms): 3 misses, 1 refused, 1 stalled
    assert lines[2].split()[-5:] == ["3", "3", "1", "1", "250"]
    assert "40/40" in lines[-1] and "2/2" in lines[-1] and "1/1" in lines[-1]


def test_engine_splits_each_window_of_requests_by_the_engine_timeline(tmp_path, capsys):
    trace = tmp_path / "engine-trace"
    trace.mkdir()
    base = dict(kind="request", submit_ms=1000.0, text_ms=1000.5, admitted_ms=1010.5, first_launch_ms=1030.5,
                first_done_ms=1040.5, first_deadline_ms=1100.5, reports=3)
    records = [dict(base, id="a", arrival_ms=1000.0), dict(base, id="b", arrival_ms=1001.0, reports=5),
               dict(base, id="c", arrival_ms=7000.0, first_deadline_ms=None)]
    (trace / "engine-1.jsonl").write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
                                          + json.dumps({"kind": "plan", "t_ms": 1.0}, separators=(",", ":")) + "\n")
    product_path.engine(str(trace), 5.0)
    lines = capsys.readouterr().out.splitlines()
    first, second = lines[1].split(), lines[2].split()
    assert first[:3] == ["0", "s", "2"] and first[3:8] == ["0/0", "10/10", "20/20", "10/10", "60/60"]
    assert first[-1] == "4.0"
    assert second[:3] == ["5", "s", "1"] and second[7] == "-/-"  # no deadline: no slack
    # the script's gzip of the same records reads the same; a pause in arrivals is marked between windows
    records.append(dict(base, id="d", arrival_ms=21000.0))
    kept = tmp_path / "engine-requests.jsonl.gz"
    kept.write_bytes(gzip.compress("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()))
    product_path.engine(str(kept), 5.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[3:8] == first[3:8] and lines[3].strip() == "--" and lines[4].split()[:3] == ["20", "s", "1"]
    product_path.engine(str(tmp_path / "missing"))
    assert "no request records" in capsys.readouterr().out


def test_machine_figures_and_the_reports_worst_second_per_run(tmp_path, capsys):
    # user nice system idle iowait irq softirq steal: 1000 ticks, of them 50 iowait and 200 stolen
    before = [0] * 10
    after = [400, 0, 100, 250, 50, 0, 0, 200, 0, 0]
    figures = product_path.machine_figures(before, after, {"procs_running": 3, "procs_blocked": 2})
    assert figures == {"iowait_pct": 5.0, "steal_pct": 20.0, "running": 3, "blocked": 2}
    ticks, procs = product_path._machine()  # this machine's /proc/stat reads
    assert len(ticks) >= 8 and set(procs) == {"procs_running", "procs_blocked"}
    quiet = {"iowait_pct": 0.0, "steal_pct": 0.0, "running": 1, "blocked": 0}
    samples = [{"t": 1.0, "tag": "idle", "cpu": {}, "gap_s": 1.0, "machine": quiet},
               {"t": 2.0, "tag": "ws-whole", "cpu": {}, "gap_s": 1.0, "machine": quiet},
               {"t": 3.6, "tag": "ws-whole", "cpu": {}, "gap_s": 1.6, "machine": figures},
               {"t": 4.6, "tag": "direct", "cpu": {}, "gap_s": 1.0, "machine": quiet},
               {"t": 5.6, "tag": "direct", "cpu": {}}]  # a sample of a sampler before this change
    (tmp_path / "cpu.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    product_path.report(str(tmp_path))
    out = capsys.readouterr().out
    assert ("ws-whole: machine, worst second: sampler gap 1.60 s (1 s asked), steal 20.0%, iowait 5.0%, "
            "2 blocked on I/O") in out
    assert "direct: machine, worst second: sampler gap 1.00 s" in out and "idle: machine" not in out


def test_engine_points_split_at_pauses_in_arrivals_and_bound_attainment_by_the_first_chunk(capsys):
    def rec(arrival, done):
        return {"kind": "request", "arrival_ms": arrival, "first_done_ms": done}
    # point 1: 3 requests over 2 s, one first chunk later than 200 ms; a 10 s pause; point 2: one never decoded
    records = [rec(0.0, 50.0), rec(1000.0, 1250.0), rec(2000.0, 2200.0),
               rec(12000.0, 12100.0), rec(12500.0, None)]
    points = product_path.engine_points(records, slo_ms=200.0, pause_s=3.0)
    assert [p["requests"] for p in points] == [3, 2]
    assert points[0]["from_s"] == 0.0 and points[1]["from_s"] == 12.0
    assert points[0]["rate"] == 1.5 and points[1]["rate"] == 4.0
    assert points[0]["first_chunk_on_time"] == 2 / 3 and points[1]["first_chunk_on_time"] == 0.5
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["0.0", "s", "3", "1.5", "66.7%"]
    assert lines[3].split() == ["12.0", "s", "2", "4.0", "50.0%"]
    # one request alone has no span: no rate
    assert product_path.engine_points([rec(0.0, 10.0)])[0]["rate"] is None


def test_chunks_splits_delivery_of_first_and_later_chunks_and_blames_late_ones(tmp_path, capsys):
    ms = 1_000_000
    # fields: chunk, first_frame, frames, engine_done_ns, received_ns, handled_ns, need_ns, first_sent_ns, last_sent_ns
    contexts = [
        {"opened_ns": 0, "chunks": [[0, 0, 2, 100 * ms, 102 * ms, 0, None, 103 * ms, 0],       # first: 2 ms
                                    [1, 2, 4, 200 * ms, 210 * ms, 0, 300 * ms, 211 * ms, 0],   # on time
                                    [2, 6, 8, 400 * ms, 405 * ms, 0, 390 * ms, 406 * ms, 0]]},  # engine late
        {"opened_ns": 0, "chunks": [[0, 0, 2, 100 * ms, 104 * ms, 0, None, 105 * ms, 0],       # first: 4 ms
                                    [1, 2, 4, 200 * ms, 230 * ms, 0, 220 * ms, 231 * ms, 0],   # delivery late
                                    [2, 6, 8, 300 * ms, 301 * ms, 0, 320 * ms, 330 * ms, 0],   # the gateway late
                                    [3, 14, 8, 500 * ms, 501 * ms, 0, 510 * ms, 510.5 * ms, 0]]},  # within 1 ms
        {"opened_ns": 0, "chunks": []},  # a context refused before its first chunk: not counted
    ]
    (tmp_path / "gw-trace.7.jsonl").write_text("\n".join(json.dumps(c) for c in contexts) + "\n")
    f = product_path.chunk_figures(str(tmp_path))
    assert f["contexts"] == 2 and f["contexts_with_a_late_chunk"] == 2
    assert f["first_chunks"]["chunks"] == 2 and f["first_chunks"]["max_ms"] == 4.0
    assert f["later_chunks"]["chunks"] == 5 and f["later_chunks"]["max_ms"] == 30.0
    assert f["late_chunks"] == {"engine": 1, "delivery": 1, "gateway": 1}
    product_path.chunks(str(tmp_path))
    out = capsys.readouterr().out
    assert "2 contexts, 2 with a chunk sent after" in out
    assert "engine 1, delivery to the gateway 1, the gateway 1" in out
