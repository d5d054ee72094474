"""The engine process's `hub` trace record (voxrt/engine/process.py `_Hub._trace_hub`): with the core's trace on,
one record a step says which commands were read before it (by type) and how long reading them and routing the
step's events took, the parts of the step record's `outside_ms`; with the trace off, nothing is counted."""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
from pathlib import Path

from voxrt.engine.messages import AppendText, AudioChunk, SetPlayback
from voxrt.engine.process import _Hub

ROOT = Path(__file__).resolve().parents[2]


class _Tracer:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, **record) -> None:
        self.records.append(record)


class _Core:
    """What the hub asks of a core here: text and playback commands are taken, a step gives one chunk."""

    def __init__(self, tracer) -> None:
        self.tracer = tracer
        self.appended: list[tuple[str, str]] = []

    def append_text(self, request_id, text, is_final):
        self.appended.append((request_id, text))
        return True

    def set_playback(self, request_id, played_samples, anchor_ns, is_stalled=False):
        return True

    def step(self):
        return [AudioChunk("r", 0, b"\0\0\0\0", 24000, 0, 1, False)]


def _drive(tracer):
    parent, child = mp.Pipe()
    core = _Core(tracer)
    hub = _Hub(core, child, None)
    hub.requests["r"] = child
    for msg in (AppendText("r", " one"), AppendText("r", " two"), SetPlayback("r", 0, 1)):
        parent.send(msg)
    assert hub._drain(child)
    hub._step(read_ns=1_500_000)
    assert parent.recv().request_id == "r"  # the chunk was routed to its client
    hub.outbox.close()
    return core, hub


def test_a_traced_step_records_the_commands_read_before_it_and_the_routing():
    tracer = _Tracer()
    core, hub = _drive(tracer)
    assert core.appended == [("r", " one"), ("r", " two")]
    (record,) = tracer.records
    assert record["kind"] == "hub" and record["read_ms"] == 1.5 and record["route_ms"] >= 0
    assert record["events"] == 1 and record["commands"] == {"AppendText": 2, "SetPlayback": 1}
    hub._step()  # the counts start again after each record
    assert tracer.records[-1]["commands"] == {}
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_summary)
    hub_summary = trace_summary.summarize([dict(r, t_ms=1.0) for r in tracer.records], skip_s=0)["hub"]
    assert hub_summary["steps"] == 2 and hub_summary["commands_per_step"] == {"AppendText": 1.0, "SetPlayback": 0.5}
    assert hub_summary["read_ms_p50_p99_mean"][2] == 0.75


def test_without_a_trace_nothing_is_counted():
    core, hub = _drive(None)
    assert core.appended == [("r", " one"), ("r", " two")] and hub._commands is None


def test_the_host_totals_count_the_wait_once():
    """`wait_lm` is measured inside `update_lm` (core.py): the loop step is the sum of the phases without it, and
    the host's busy time that sum less the wait."""
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_summary)
    step = dict(kind="step", t_ms=1.0, live=3, outside_ms=1.0, collect_ms=0.5, schedule_ms=2.0, launch_lm_ms=1.5,
                submit_codec_ms=0.5, update_lm_ms=5.0, wait_lm_ms=4.0, collect_end_ms=0.5)
    host = trace_summary.summarize([step, dict(step, t_ms=2.0)], skip_s=0)["host"]["p50_p99_mean_ms"]
    assert host["total"][2] == 11.0  # 1 + 0.5 + 2 + 1.5 + 0.5 + 5 + 0.5
    assert host["total_less_wait"][2] == 7.0


def test_the_codec_lanes_say_how_often_a_launch_was_as_big_as_their_biggest():
    """Every background launch at the cap (16 chunks, Seed-TTS's collapse on an H100) is the sign that the lane
    could not take more chunks a launch: `jobs_max` and `at_jobs_max_pct` per lane."""
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_summary)
    launch = dict(kind="codec", lane="background", gpu_ms=20.0, host_ms=22.0, slack_ms=[5.0], first=[False],
                  frames=[16])
    records = [dict(launch, t_ms=float(t), jobs=jobs) for t, jobs in ((1, 16), (2, 16), (3, 8))]
    records.append(dict(launch, t_ms=4.0, lane="urgent", jobs=2))
    codec = trace_summary.summarize(records, skip_s=0)["codec"]
    assert codec["background"]["jobs_max"] == 16 and codec["background"]["at_jobs_max_pct"] == 66.7
    assert codec["urgent"]["jobs_max"] == 2 and codec["urgent"]["at_jobs_max_pct"] == 100.0


def test_a_steps_prompts_are_costed_at_one_decode_batch():
    """Under load the decode-only steps are the ramp's, with fewer rows: `lm_by_prompts` compares steps of the
    median decode batch only, by the prompts they carried, so a step's prompts are not charged for its rows."""
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_summary)
    lm = [dict(kind="lm", t_ms=float(t), decode=decode, prefill=prefill, gpu_ms=ms) for t, (decode, prefill, ms) in
          enumerate([(100, 0, 5.0)] * 3 + [(250, 0, 10.0)] * 2 + [(250, 3, 11.0)] * 4 + [(252, 6, 12.0)] * 2)]
    s = trace_summary.summarize(lm, skip_s=0)
    assert s["lm"]["gpu_ms_decode_only_p50"] == 5.0 and s["lm"]["gpu_ms_with_prefill_p50"] == 11.0
    by = s["lm_by_prompts"]
    assert by["decode_batch"] == [234.4, 265.6]  # the ramp's 100-row steps are out
    assert by["cells"] == [{"prompts": "0", "steps": 2, "gpu_ms_p50": 10.0},
                           {"prompts": "3", "steps": 4, "gpu_ms_p50": 11.0},
                           {"prompts": "5-8", "steps": 2, "gpu_ms_p50": 12.0}]


def test_the_prefill_share_sets_each_step_against_decode_steps_of_its_own_batch():
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_summary)
    # the ramp's small decode-only steps (5 ms at 100 rows), full ones at 250 rows (10 ms), prompts add 1 ms there;
    # one step with prompts at 180 rows has no decode-only step near it and is left out
    rows = [(100, 0, 5.0)] * 3 + [(250, 0, 10.0)] * 2 + [(250, 3, 11.0)] * 4 + [(180, 2, 8.0)]
    lm = [dict(kind="lm", t_ms=float(t), decode=d, prefill=p, gpu_ms=ms) for t, (d, p, ms) in enumerate(rows)]
    share = trace_summary.prefill_share(lm, window_ms=100.0)
    assert share == {"prefill_share_pct": 4.0, "prefill_share_steps": 4}  # 4 x 1 ms of 100, not 4 x 6 + 3
    assert trace_summary.prefill_share([r for r in lm if not r["prefill"]], 100.0)["prefill_share_pct"] is None
    assert trace_summary.summarize(lm, skip_s=0)["lm"]["prefill_share_steps"] == 4


def test_lm_steps_are_split_by_their_sm_mode_at_one_decode_batch():
    """`lm_by_sm_mode` (records of an engine with several SM modes, e.g. VOXRT_LM_LANE=idle): each mode's share of
    the steps and its steps' GPU ms at the median decode batch; absent when the records carry no mode."""
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_summary)
    rows = [(250, 0, 11.0)] * 5 + [(250, 1, 8.0)] * 3 + [(100, 1, 4.0)] * 2  # mode 1's ramp steps: other batch
    lm = [dict(kind="lm", t_ms=float(t), decode=d, prefill=0, gpu_ms=ms, sm_mode=m)
          for t, (d, m, ms) in enumerate(rows)]
    by = trace_summary.summarize(lm, skip_s=0)["lm_by_sm_mode"]
    assert by["cells"] == [{"mode": 0, "steps_pct": 50.0, "steps_at_batch": 5, "gpu_ms_p50": 11.0},
                           {"mode": 1, "steps_pct": 50.0, "steps_at_batch": 3, "gpu_ms_p50": 8.0}]
    plain = [{k: v for k, v in r.items() if k != "sm_mode"} for r in lm]
    assert "lm_by_sm_mode" not in trace_summary.summarize(plain, skip_s=0)
