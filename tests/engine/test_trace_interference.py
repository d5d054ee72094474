"""bench/trace_summary.py's `lm_interference`: the LM's decode steps of one batch band, placed by how much of each
step the urgent and background codec lanes ran, on hand-made trace records (times on the host clock: a launch
at t_ms, seen done `ms` / `host_ms` later, its GPU time the last `gpu_ms` of that)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
trace_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_summary)


def _lm(t, gpu_ms, decode=100, prefill=0):
    return {"kind": "lm", "t_ms": t, "ms": gpu_ms + 1.0, "gpu_ms": gpu_ms, "decode": decode, "prefill": prefill}


def _codec(lane, start, gpu_ms):
    """A codec launch whose GPU time is [start, start + gpu_ms] on the host clock."""
    return {"kind": "codec", "lane": lane, "t_ms": start - 0.5, "host_ms": gpu_ms + 0.5, "gpu_ms": gpu_ms}


def test_steps_are_placed_by_the_codec_lanes_share_of_them():
    records = [
        _lm(0.0, 8.0),  # GPU 1-9: no codec
        _lm(100.0, 10.0),  # GPU 101-111: the background lane throughout
        _codec("background", 100.0, 12.0),
        _lm(200.0, 11.0),  # GPU 201-212: background throughout, urgent for 6 of 11 ms
        _codec("background", 200.0, 13.0), _codec("urgent", 203.0, 6.0),
        _lm(300.0, 9.0, prefill=2),  # a step with prompts: not a decode-only step
        _lm(400.0, 20.0, decode=10),  # outside the batch band
        _codec("urgent", 400.0, 30.0),
    ]
    out = trace_summary.lm_interference([r for r in records if r["kind"] == "lm"],
                                        [r for r in records if r["kind"] == "codec"])
    assert out["decode_batch"] == [87.5, 112.5]
    cells = {(c["urgent_share"], c["background_share"]): (c["steps"], c["gpu_ms_p50"]) for c in out["cells"]}
    assert cells == {("0-0.1", "0-0.5"): (1, 8.0), ("0-0.1", ">=0.9"): (1, 10.0), (">=0.5", ">=0.9"): (1, 11.0)}


def test_no_codec_lanes_no_section():
    assert trace_summary.lm_interference([_lm(0.0, 8.0)], []) is None
    summary = trace_summary.summarize([_lm(0.0, 8.0), _lm(20.0, 8.0)], skip_s=0)
    assert "lm_interference" not in summary
    summary = trace_summary.summarize([_lm(0.0, 8.0), _codec("background", 0.5, 9.0)], skip_s=0)
    assert summary["lm_interference"]["cells"] == [{"urgent_share": "0-0.1", "background_share": ">=0.9",
                                                     "steps": 1, "gpu_ms_p50": 8.0}]


def test_busy_while_requests_arrive_leaves_the_drain_out():
    """`busy_pct_while_arriving`: the LM's and each codec lane's GPU time over the window up to the last arrival
    in the `request` records; the whole window (`busy_pct`) also holds the drain after it."""
    records = [_lm(float(t), 9.0) for t in range(0, 100, 10)]  # busy 90% while requests arrive (0-100 ms)
    records += [_lm(100.0 + t, 1.0) for t in range(0, 100, 10)]  # the drain: 10% busy
    records += [_codec("background", 5.0, 50.0)]
    records += [{"kind": "request", "id": "r0", "arrival_ms": 0.0}, {"kind": "request", "id": "r1", "arrival_ms": 100.0}]
    summary = trace_summary.summarize(records, skip_s=0)
    assert summary["arriving_window_s"] == 0.1
    assert summary["lm"]["busy_pct_while_arriving"] == 90.0
    assert summary["lm"]["busy_pct"] < 60.0  # the window runs to the drain's end
    assert summary["codec"]["background"]["busy_pct_while_arriving"] == 50.0
    assert "arriving_window_s" not in trace_summary.summarize(records[:-2], skip_s=0)  # no request records
