"""The lane runtime on the CPU (`lanes="inline"`: the same queueing, launch and completion bookkeeping as on
a GPU, launches done at once): same tokens and audio as the time-shared loop, pools empty after cancels and
failures, traces written; and the lane modes' fallbacks without a GPU."""

from __future__ import annotations

import gc
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import assert_pools_empty, drain, make_core, pcm, submit
from voxrt.engine.errors import InvalidParamsError
from voxrt.engine.messages import AudioChunk
from voxrt.engine.runtime import core as core_module
from voxrt.engine.runtime.lanes import default_codec_sms, make_lanes
from voxrt.engine.sched.plan import BACKGROUND, URGENT
from voxrt.engine.sched.sm_modes import EveryStepSmMode

ROOT = Path(__file__).resolve().parents[2]

TEXTS = ["Hello there, this is the lane test.", "A second request, a little longer than the first one.",
         "Third."]


def run_all(core) -> dict[str, np.ndarray]:
    for i, text in enumerate(TEXTS):
        submit(core, f"r{i}", text)
    chunks, failures = drain(core)
    assert not failures
    for rid, cs in chunks.items():
        assert [c.chunk_index for c in cs] == list(range(len(cs))) and cs[-1].is_last
    return {rid: pcm(cs) for rid, cs in chunks.items()}


def test_inline_lanes_equal_the_time_shared_loop():
    sync, inline = make_core(lanes="off"), make_core(lanes="inline")
    assert not sync.lanes.enabled and inline.lanes.enabled and inline.scheduler.has_lanes
    a, b = run_all(sync), run_all(inline)
    assert a.keys() == b.keys()
    for rid in a:
        np.testing.assert_allclose(b[rid], a[rid], rtol=0, atol=1e-5)
    assert_pools_empty(sync)
    assert_pools_empty(inline)


def test_early_chunks_give_the_same_audio_and_are_counted():
    # an LM step the cost model thinks takes a second: every stream's next chunk would be late waiting for its
    # frames, so the deadline policy cuts whatever frames there are (codec sizes) each time
    sync = make_core(lanes="off")
    early = make_core(lanes="inline", scheduler_type="deadline", costs=(("lm_base_ms", 1000.0),))
    a, b = run_all(sync), run_all(early)
    stats = early.stats()
    assert stats.early_chunks > 0 and sync.stats().early_chunks == 0
    for rid in a:
        np.testing.assert_allclose(b[rid], a[rid], rtol=0, atol=1e-5)  # the stateful codec, chunked otherwise
    assert_pools_empty(early)


def count_decode_runs(core) -> dict[int, int]:
    """Counts, live, the decode stage runs of each SM mode of `core` (whose graphs' stages ran a step)."""
    used = {mode: 0 for mode in range(core.lanes.num_sm_modes)}
    for mode in used:
        stage = core.runner.decode_stages[mode]

        def counted(*args, _inner=stage.run, _mode=mode, **kwargs):
            used[_mode] += 1
            return _inner(*args, **kwargs)
        stage.run = counted
    return used


def test_sm_modes_switching_every_step_gives_the_same_audio():
    sync = make_core(lanes="off")
    moving = make_core(lanes="inline", scheduler_type="deadline", codec_sms=(32, 64), sm_mode="adaptive")
    assert moving.lanes.num_sm_modes == 2 and moving.sm_chooser is not None
    assert "2 SM modes" in moving.lanes.describe()
    moving.sm_chooser = EveryStepSmMode()
    used = count_decode_runs(moving)
    a, b = run_all(sync), run_all(moving)
    assert moving.stats().sm_mode_switches >= 2 and used[0] > 0 and used[1] > 0  # both splits ran LM steps
    assert moving.runner.codec_stages is moving.runner.background_stages[moving.lanes.active]
    for rid in a:
        np.testing.assert_allclose(b[rid], a[rid], rtol=0, atol=1e-5)
    assert_pools_empty(moving)


@pytest.mark.parametrize("overrides, message", [
    (dict(codec_sms=(32,), sm_mode="adaptive"), "at least two"),
    (dict(codec_sms=(32, 64), sm_mode=2), "index into the SM modes"),
    (dict(codec_sms=(32, 64), sm_mode="fast"), "index into the SM modes"),
])
def test_bad_sm_modes_are_clear_errors(overrides, message):
    with pytest.raises(InvalidParamsError, match=message):
        make_core(lanes="inline", **overrides)


def test_adaptive_without_lanes_runs_one_split():
    core = make_core(lanes="off", codec_sms=(32, 64), sm_mode="adaptive")  # no lanes: nothing to split
    assert core.sm_chooser is None and core.lanes.num_sm_modes == 1
    fixed = make_core(lanes="inline", codec_sms=(32, 64), sm_mode=1)  # an index: that split alone
    assert fixed.sm_chooser is None and fixed.lanes.num_sm_modes == 1


def test_cancel_with_chunks_queued_returns_every_slot():
    core = make_core(lanes="inline")
    for i, text in enumerate(TEXTS):
        submit(core, f"c{i}", text)
    for _ in range(4):
        core.step()
    for i in range(len(TEXTS)):
        core.cancel(f"c{i}")
    events = []
    while core.has_work():
        events += core.step()
    assert not [e for e in events if isinstance(e, AudioChunk)]  # nothing of a cancelled request is emitted
    assert_pools_empty(core)


class HeldLaunch:
    """A launch that stays in flight until released, like a GPU launch whose event has not fired."""

    def __init__(self, inner) -> None:
        self.inner, self.released = inner, False
        self.jobs, self.launched_ns, self.lane = inner.jobs, inner.launched_ns, inner.lane

    def is_done(self) -> bool:
        return self.released

    def wait(self) -> None:
        self.released = True

    def results(self):
        return self.inner.results()

    def gpu_ms(self):
        return None


def test_in_flight_launches_keep_order_and_a_cancelled_request_keeps_its_slot_until_its_launch_ends():
    core = make_core(lanes="inline")
    core.lanes.mode = "streams"  # the asynchronous path: launches complete when their event fires
    held = []
    original = core.runner.launch_codec

    def launch(jobs, lane=BACKGROUND, timing=False):
        held.append(HeldLaunch(original(jobs, lane, timing)))
        return held[-1]
    core.runner.launch_codec = launch
    submit(core, "a", TEXTS[1])
    submit(core, "b", TEXTS[0])
    while not held:
        core.step()
    (first,) = held
    for _ in range(5):  # the launch is in flight: no second chunk of its requests is cut
        core.step()
        assert len(held) == 1
    in_flight = {j.request.request_id for j in first.jobs}
    assert in_flight and all(core.scheduler.requests[r].num_chunks_in_flight == 1 for r in in_flight)
    rid = sorted(in_flight)[0]
    slots_free = core.scheduler.slots.num_free
    core.cancel(rid)
    assert core.scheduler.slots.num_free == slots_free  # held: the launch still writes that slot's codec state
    core.scheduler.check_integrity()
    first.released = True
    events = core.step()
    assert not [e for e in events if isinstance(e, AudioChunk) and e.request_id == rid]
    assert core.scheduler.slots.num_free >= slots_free + 1
    while core.has_work():
        for launch_ in held:
            launch_.released = True
        core.step()
    assert_pools_empty(core)


def test_a_codec_launch_that_raises_fails_its_requests_and_returns_their_slots():
    core = make_core(lanes="inline")
    submit(core, "ok-later", TEXTS[0])
    original = core.runner.launch_codec
    core.runner.launch_codec = lambda jobs, lane=BACKGROUND, timing=False: (_ for _ in ()).throw(RuntimeError("boom"))
    _, failures = drain(core)
    assert failures["ok-later"].code == "request_failed"
    assert_pools_empty(core)
    core.runner.launch_codec = original
    submit(core, "after", TEXTS[1])
    chunks, failures = drain(core)
    assert not failures and chunks["after"][-1].is_last
    assert_pools_empty(core)


def test_urgent_and_background_jobs_run_on_their_lanes(monkeypatch):
    core = make_core(lanes="inline")
    seen = []
    original = core.runner.launch_codec

    def spy(jobs, lane=BACKGROUND, timing=False):
        seen.append((lane, [(j.request.request_id, j.chunk_index) for j in jobs]))
        return original(jobs, lane, timing)
    monkeypatch.setattr(core.runner, "launch_codec", spy)
    schedule = core.scheduler.schedule

    def route_first_chunks_urgent(now_ns, lanes_free=None):
        plan = schedule(now_ns, lanes_free)
        import dataclasses  # noqa: PLC0415
        plan.codec = [dataclasses.replace(j, lane=URGENT if j.chunk_index == 0 else BACKGROUND) for j in plan.codec]
        return plan
    monkeypatch.setattr(core.scheduler, "schedule", route_first_chunks_urgent)
    run_all(core)
    urgent = [x for lane, jobs in seen if lane == URGENT for x in jobs]
    background = [x for lane, jobs in seen if lane == BACKGROUND for x in jobs]
    assert urgent and all(index == 0 for _, index in urgent)
    assert background and all(index > 0 for _, index in background)
    assert {rid for rid, _ in urgent} == {"r0", "r1", "r2"}
    assert_pools_empty(core)


@pytest.mark.parametrize("lanes", ["inline", "off"])
def test_trace_dir_gets_plans_lm_steps_and_codec_launches(tmp_path, lanes):
    core = make_core(lanes=lanes, trace_dir=str(tmp_path))
    run_all(core)
    core.close()
    (path,) = tmp_path.glob("engine-*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = {r["kind"] for r in records}
    assert kinds == {"plan", "lm", "codec", "step", "request"}
    # one `request` record per request, its timeline in order (every time on the engine's clock)
    requests = {r["id"]: r for r in records if r["kind"] == "request"}
    assert requests.keys() == {f"r{i}" for i in range(len(TEXTS))}
    for r in requests.values():
        assert r["appends"] == 0 and r["text_ms"] == r["final_ms"] == r["submit_ms"]
        assert r["submit_ms"] <= r["admitted_ms"] <= r["first_launch_ms"] <= r["first_done_ms"]
        assert r["frames"] > 0 and r["chunks"] >= 1 and r["first_frames"] > 0 and r["reports"] == 0
    # the host's phases of every loop step; update_lm includes the wait for the LM step's codes
    steps = [r for r in records if r["kind"] == "step"]
    assert len(steps) == core.num_steps
    phases = ("collect_ms", "schedule_ms", "launch_lm_ms", "submit_codec_ms", "update_lm_ms", "collect_end_ms")
    assert all(all(r[p] >= 0 for p in phases) and r["live"] >= 0 for r in steps)
    assert all(r["wait_lm_ms"] <= r["update_lm_ms"] for r in steps if "wait_lm_ms" in r)
    assert any("wait_lm_ms" in r for r in steps) and steps[0]["outside_ms"] is None
    assert all(r["outside_ms"] >= 0 for r in steps[1:])
    spec = importlib.util.spec_from_file_location("trace_summary", ROOT / "bench" / "trace_summary.py")
    trace_summary = importlib.util.module_from_spec(spec)  # bench/trace_summary.py: its host section reads them
    spec.loader.exec_module(trace_summary)
    host = trace_summary.summarize(records, skip_s=0)["host"]
    assert host["steps"] == len(steps) and "schedule" in host["p50_p99_mean_ms"]
    codec = [r for r in records if r["kind"] == "codec"]
    assert sum(r["jobs"] for r in codec) == sum(len(r["frames"]) for r in codec) > 0
    assert all(r["lane"] in ((URGENT, BACKGROUND) if lanes == "inline" else ("loop",)) for r in codec)
    assert all(r["ms"] >= 0 and "gpu_ms" in r and "gpu_idle_ms" in r for r in records if r["kind"] == "lm")
    # the host's garbage collections between LM records (voxrt/gcpause.py), uninstalled when the core closes
    assert all(r["gc_ms"] >= 0 and r["gc_count"] >= 0 for r in records if r["kind"] == "lm")
    assert core.gc_pauses._callback not in gc.callbacks


def test_trace_request_timeline_of_streamed_text_and_reports(tmp_path):
    """A request whose text comes in pieces (as the gateway forwards it): its first text, its end, the appends
    and the playback reports in its `request` record; a cancelled request writes none."""
    core = make_core(lanes="inline", trace_dir=str(tmp_path))
    submit(core, "s", "", final=False)
    submit(core, "gone", "Never spoken.")
    assert core.cancel("gone")
    core.step()
    core.append_text("s", "Hello there, my good", False)
    core.set_playback("s", 0, 0)
    core.append_text("s", " friend.", True)
    chunks, failures = drain(core)
    assert not failures and chunks["s"][-1].is_last
    core.close()
    (path,) = tmp_path.glob("engine-*.jsonl")
    (record,) = [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "request"]
    assert record["id"] == "s" and record["appends"] == 2 and record["reports"] == 1
    assert record["submit_ms"] < record["text_ms"] <= record["final_ms"] and record["admitted_ms"] >= record["text_ms"]


def test_trace_requests_only_writes_request_records_and_nothing_per_step(tmp_path):
    core = make_core(lanes="inline", trace_dir=str(tmp_path), trace_requests_only=True)
    assert core.tracer is None and core.request_tracer is not None and core.gc_pauses is None
    run_all(core)
    core.close()
    (path,) = tmp_path.glob("engine-*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["kind"] for r in records} == {"request"} and len(records) == len(TEXTS)
    assert all(r["admitted_ms"] <= r["first_launch_ms"] <= r["first_done_ms"] for r in records)


@pytest.mark.parametrize(("mode", "resolved"), [("auto", "off"), ("off", "off"), ("inline", "inline"),
                                                 ("green", "off"), ("streams", "off")])
def test_lane_modes_without_a_gpu(mode, resolved):
    lanes = make_lanes(mode, torch.device("cpu"))
    assert lanes.mode == resolved
    assert lanes.describe()  # the log line says which


def test_the_default_split_is_the_programs_codec_share(monkeypatch):
    """Without --sm-modes the codec lane gets the program's `codec_sm_share` of the SMs: 64 of 132 for Qwen3-TTS's
    compute-bound codec (bench/results/2026-12-06-h100-split), 16 of the H200's 132 for Orpheus's SNAC
    (bench/results/2026-12-02-orpheus), half for a program that says nothing."""
    from voxrt.models.qwen3_tts.program import Qwen3TTSProgram  # noqa: PLC0415

    assert default_codec_sms(132, 0.5) == 66
    assert default_codec_sms(132, Qwen3TTSProgram.codec_sm_share) == 64  # the LM 68 (the driver's groups of 8)
    assert default_codec_sms(114, Qwen3TTSProgram.codec_sm_share) == 55  # an H100 PCIe: rounded up to 56 there
    assert default_codec_sms(132, 16 / 132) == 16
    assert default_codec_sms(8, 0.01) == 1 and default_codec_sms(8, 0.99) == 7
    with pytest.raises(ValueError, match="codec_share"):
        make_lanes("auto", torch.device("cpu"), codec_share=1.0)
    seen = []
    real = core_module.make_lanes
    monkeypatch.setattr(core_module, "make_lanes", lambda *a, **k: seen.append(a) or real(*a, **k))
    core = make_core()
    assert seen and seen[-1][-1] == core.program.codec_sm_share == 0.5


def test_unknown_lane_mode_and_cost_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown lanes mode"):
        make_lanes("fast", torch.device("cpu"))
    with pytest.raises(InvalidParamsError, match="unknown cost names"):
        make_core(costs=(("lm_speed", 1.0),))
    core = make_core(costs=(("lm_base_ms", 5.0),))
    assert core.scheduler.costs.lm_base_ms == 5.0


@pytest.mark.parametrize(("lanes", "policy", "launch_lanes", "timed"), [
    ("off", "base", {"loop"}, False),  # base sets no deadlines: nothing to time
    ("inline", "deadline", {URGENT, BACKGROUND}, True),
])
def test_stats_count_launches_per_lane_and_chunk_timing(lanes, policy, launch_lanes, timed):
    core = make_core(lanes=lanes, scheduler_type=policy)
    run_all(core)
    stats = core.stats()
    launches = dict(stats.codec_launches)
    assert set(launches) <= launch_lanes and sum(launches.values()) > 0
    if lanes == "inline":
        assert launches.get(URGENT, 0) > 0  # first chunks
    timed_chunks = stats.chunks_on_time + stats.chunks_late
    assert (timed_chunks > 0) == timed
    assert stats.deferred_admissions >= 0 and stats.pool_ok
    if policy != "deadline":
        assert stats.early_chunks == 0


def test_the_lm_lane_knob_and_its_priorities(monkeypatch):
    """VOXRT_LM_LANE: `partition` by default; `whole` puts the LM at the lowest priority and the background codec
    one above it (CUDA counts down), or both at the one level a GPU without priorities has; anything else is an
    error that `voxrt serve` reports before it starts (knobs.check_env)."""
    from voxrt.engine.runtime import knobs
    from voxrt.engine.runtime.lanes import lm_placement

    monkeypatch.delenv("VOXRT_LM_LANE", raising=False)
    assert knobs.lm_lane() == "partition"
    for raw, mode in ((" Whole ", "whole"), ("partition", "partition"), ("", "partition")):
        monkeypatch.setenv("VOXRT_LM_LANE", raw)
        assert knobs.lm_lane() == mode
    monkeypatch.setenv("VOXRT_LM_LANE", "68")
    with pytest.raises(ValueError, match="VOXRT_LM_LANE='68'; expected partition, whole or idle"):
        knobs.check_env()
    part = lm_placement("partition", 0, -5)
    assert (part.whole_stream, part.background_priority) == (False, None)
    for lane in ("whole", "idle"):
        placed = lm_placement(lane, 0, -5)
        assert (placed.whole_stream, placed.lm_priority, placed.background_priority) == (True, 0, -1)
    assert lm_placement("whole", 0, 0).background_priority == 0
    with pytest.raises(ValueError, match="LM lane 'half'"):
        lm_placement("half", 0, -5)


@pytest.mark.parametrize("lane", ["partition", "whole", "idle"])
def test_green_lanes_put_the_lm_where_the_knob_says(monkeypatch, lane):
    """make_lanes with green contexts, the driver faked: with `whole` every SM mode shares one whole-GPU LM stream
    at the lowest priority and each codec partition's stream is made one level above it; with `partition` the LM
    runs on the split's other partition and the codec stream keeps the driver's default priority."""
    from voxrt.engine.runtime import lanes as lanes_module
    from voxrt.engine.runtime.lanes import LM

    class FakeStream:
        def __init__(self, device=None, priority=0):
            self.priority = priority

    made = []

    def fake_green(index, count, codec_priority=None):
        made.append((count, codec_priority))
        return f"lm-part-{count}", f"codec-{count}", {BACKGROUND: count, LM: 132 - count}

    monkeypatch.setenv("VOXRT_LM_LANE", lane)
    monkeypatch.setattr(lanes_module, "green_streams", fake_green)
    monkeypatch.setattr(lanes_module, "_priority_range", lambda: (0, -5))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: type("P", (), {"multi_processor_count": 132}))
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    if lane == "idle":  # its own two modes over one split: two codec counts are an error, raised before any split
        with pytest.raises(ValueError, match="VOXRT_LM_LANE=idle .* one --sm-modes count"):
            make_lanes("green", torch.device("cuda", 0), codec_sms=[56, 64])
        assert not made
        lanes = make_lanes("green", torch.device("cuda", 0), codec_sms=64)
        assert made == [(64, -1)] and lanes.lm_lane == "idle" and lanes.num_sm_modes == 2
        part, whole = lanes.sm_modes
        assert part.streams[LM] == "lm-part-64" and part.sm_counts == {BACKGROUND: 64, LM: 68}
        assert isinstance(whole.streams[LM], FakeStream) and whole.streams[LM].priority == 0
        assert whole.sm_counts == {BACKGROUND: 64, LM: 132}
        assert part.streams[BACKGROUND] == whole.streams[BACKGROUND] == "codec-64"  # one codec stream
        assert lanes.streams[LM] == "lm-part-64" and "while the background codec lane idles" in lanes.describe()
        check_fallback(monkeypatch, lanes_module, lane)
        return
    lanes = make_lanes("green", torch.device("cuda", 0), codec_sms=[56, 64])
    assert lanes.mode == "green" and [m.streams[BACKGROUND] for m in lanes.sm_modes] == ["codec-56", "codec-64"]
    assert lanes.streams[URGENT].priority == -5
    if lane == "whole":
        assert made == [(56, -1), (64, -1)] and lanes.lm_lane == "whole"
        lm = lanes.streams[LM]
        assert isinstance(lm, FakeStream) and lm.priority == 0
        assert all(m.streams[LM] is lm and m.sm_counts[LM] == 132 for m in lanes.sm_modes)
        assert "LM on the whole GPU" in lanes.describe()
        assert lanes.set_mode(1) and lanes.streams[LM] is lm and lanes.sm_counts == {BACKGROUND: 64, LM: 132}
    else:
        assert made == [(56, None), (64, None)] and lanes.lm_lane == "partition"
        assert [m.streams[LM] for m in lanes.sm_modes] == ["lm-part-56", "lm-part-64"]
        assert "whole GPU at the lowest" not in lanes.describe()
    check_fallback(monkeypatch, lanes_module, lane)


def check_fallback(monkeypatch, lanes_module, lane):
    """Without green contexts (`auto` falls back to streams) the knob cannot apply, and the lanes' log line says so."""
    monkeypatch.setattr(lanes_module, "green_streams", lambda *a: (_ for _ in ()).throw(RuntimeError("no driver")))
    fallback = make_lanes("auto", torch.device("cuda", 0), codec_sms=64)
    assert fallback.mode == "streams" and fallback.lm_lane == "partition" and fallback.num_sm_modes == 1
    assert ("VOXRT_LM_LANE" in fallback.describe()) == (lane != "partition")


def test_the_codec_idle_chooser_puts_a_step_on_the_whole_gpu_only_with_the_background_lane_idle():
    """CodecIdleLmMode: the whole GPU (mode 1) when nothing is in flight on the background lane and the step's plan
    sends nothing there; chunks ready but unplanned do not keep the LM on its partition."""
    from voxrt.engine.sched.sm_modes import CodecIdleLmMode, SmModeSignals

    chooser = CodecIdleLmMode(partition=0, whole=1)
    signals = [SmModeSignals(0, background_waiting=40, background_in_flight=False, urgent_continuations=0),
               SmModeSignals(1, background_waiting=0, background_in_flight=True, urgent_continuations=0),
               SmModeSignals(2, background_waiting=0, background_in_flight=False, urgent_continuations=2,
                             background_planned=3),
               SmModeSignals(3, background_waiting=0, background_in_flight=False, urgent_continuations=1),
               SmModeSignals(4, background_waiting=5, background_in_flight=False, urgent_continuations=0)]
    assert [chooser.choose(s) for s in signals] == [1, 0, 0, 1, 1]
    assert chooser.num_switches == 3  # from the partition


def test_the_lm_lane_idle_switches_placements_by_the_codec_lane_and_keeps_the_audio(monkeypatch, tmp_path, caplog):
    """VOXRT_LM_LANE=idle on inline lanes (the bookkeeping of its two modes without a GPU): the engine picks the
    chooser itself, LM steps run in both modes (their own graphs' stages), the audio equals the time-shared loop's,
    every pool returns; with --sm-mode adaptive or two codec counts it is a clear error."""
    from voxrt.engine.sched.sm_modes import CodecIdleLmMode

    monkeypatch.setenv("VOXRT_LM_LANE", "idle")
    sync = make_core(lanes="off")
    assert sync.sm_chooser is None and sync.lanes.num_sm_modes == 1  # no lanes: nothing to switch
    idle = make_core(lanes="inline", scheduler_type="deadline", trace_dir=str(tmp_path))
    assert isinstance(idle.sm_chooser, CodecIdleLmMode) and idle.lanes.num_sm_modes == 2
    # later chunks go to the background lane however late they run: on a loaded CPU (slower than real time) every
    # chunk fell within the urgency horizon, went to the urgent lane, and no step had background work to place
    monkeypatch.setattr(idle.scheduler, "_background_latency_ns", lambda jobs: -1e15)
    seen = []
    real = idle.sm_chooser.choose
    monkeypatch.setattr(idle.sm_chooser, "choose", lambda s: seen.append(s) or real(s))
    used = count_decode_runs(idle)
    a, b = run_all(sync), run_all(idle)
    assert used[0] > 0 and used[1] > 0  # steps on the partition (codec work planned) and on the whole GPU
    assert any(s.background_planned > 0 for s in seen) and any(s.background_planned == 0 for s in seen)
    assert all(s.background_waiting == 0 for s in seen)  # the backlog, which it does not read, is not counted
    assert idle.stats().sm_mode_switches == idle.sm_chooser.num_switches >= 2
    for rid in a:
        np.testing.assert_allclose(b[rid], a[rid], rtol=0, atol=1e-5)
    assert_pools_empty(idle)
    with caplog.at_level("INFO", logger="voxrt.engine"):
        idle.close()
    assert f"LM steps by SM mode {list(idle.stats().lm_steps_by_sm_mode)}" in caplog.text  # what a run's log keeps
    (path,) = tmp_path.glob("engine-*.jsonl")  # each LM record names the mode its step was launched in
    lm_modes = [json.loads(line).get("sm_mode") for line in path.read_text().splitlines() if '"lm"' in line]
    # (a step of prompts alone runs no decode stage: the records count every LM step)
    assert sorted(set(lm_modes)) == [0, 1] and lm_modes.count(0) >= used[0] and lm_modes.count(1) >= used[1]
    assert idle.stats().lm_steps_by_sm_mode == (lm_modes.count(0), lm_modes.count(1))  # the stats count the same
    (lm_steps,) = sync.stats().lm_steps_by_sm_mode  # one mode without lanes
    assert 0 < lm_steps <= sync.num_steps
    with pytest.raises(InvalidParamsError, match="does not combine with --sm-mode adaptive"):
        make_core(lanes="inline", codec_sms=(32, 64), sm_mode="adaptive")
    with pytest.raises(ValueError, match="one --sm-modes count"):
        make_lanes("inline", torch.device("cpu"), codec_sms=[32, 64])
