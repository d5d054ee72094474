"""The online, offline and deadline policies (and the helpers they share with base): which chunks each cuts,
on which lane, in which order; the deadline policy's prefill deferral and its bound; and every policy driven
through a mixed workload with lanes that keep launches in flight across steps. Pure: no torch."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import replace

import pytest

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.base_policy import BaseScheduler
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.deadline_policy import DeadlineScheduler, next_chunk_slack_ns, should_defer_prefill
from voxrt.engine.sched.deadlines import chunk_deadline_ns
from voxrt.engine.sched.offline_policy import OfflineScheduler
from voxrt.engine.sched.online_policy import OnlineScheduler
from voxrt.engine.sched.pages import PagePool, SlotPool
from voxrt.engine.sched.plan import BACKGROUND, LANES, URGENT, CodecJob, ProgramSpec, StepPlan
from voxrt.engine.sched.policies import POLICIES, policy_class
from voxrt.engine.sched.request import PlaybackAnchor, PromptTokens, Request, RequestState
from voxrt.engine.sched.scheduler import Scheduler, SchedulerConfig

S = RequestState
MS = 1_000_000
NOW = 10_000 * MS
PROMPT_LEN = 3
SPEC = ProgramSpec(num_codebooks=1, chunk_frames=25, first_chunk_frames=2, consumes_text_incrementally=True,
                   text_pad_id=0, eos_code=None, frames_per_text_token=2.0, default_max_frames=1000)
STARTUP_NS = 200 * MS
# round figures: an LM step 10 ms, a codec launch 5 ms per size whatever the batch, prefill free
SIMPLE_COSTS = CostModel(lm_base_ms=10.0, lm_per_request_ms=0.0, prefill_per_token_ms=0.0, codec_base_ms=5.0,
                         codec_per_frame_ms=0.0)


def tokenize(text: str):
    words = text.split()
    spans, start = [], 0
    for word in words:
        start = text.index(word, start)
        spans.append((start, start + len(word)))
        start += len(word)
    return [1 + len(w) for w in words], spans


def build_prompt(request: Request) -> PromptTokens:
    return PromptTokens((-1,) * (PROMPT_LEN - 1) + (request.feed.token_ids[0],), tuple(range(PROMPT_LEN)), 1)


def make(policy: str, *, has_lanes: bool = False, costs: CostModel = SIMPLE_COSTS, num_slots: int = 32,
         num_pages: int = 1024, **config) -> Scheduler:
    config.setdefault("deadline_margin_ms", 0.0)  # the figures below are the listener's; one test sets a margin
    sched = policy_class(policy)(SPEC, PagePool(num_pages, 4), SlotPool(num_slots), build_prompt, tokenize,
                                 SchedulerConfig(**config))
    sched.has_lanes = has_lanes
    sched.costs = costs
    return sched


def add(sched: Scheduler, rid: str, num_words: int | None = 40, arrival_ns: int = NOW, final: bool = True,
        **params) -> Request:
    request = sched.add(rid, "voice", SamplingParams(**params), arrival_ns)
    if num_words is not None:
        sched.append_text(rid, " ".join(["word"] * num_words), final)
    return request


def frames_before(num_chunks: int) -> int:
    frames = 0
    for _ in range(num_chunks):
        frames += SPEC.next_chunk_size(frames)
    return frames


def hand_made(sched: Scheduler, rid: str, *, chunks: int = 0, ready: bool = True, arrival_ns: int = NOW - 50 * MS,
              first_chunk_ns: int | None = None, playback: PlaybackAnchor | None = None,
              generation_done: bool = False) -> Request:
    """A running request whose `chunks` first chunks are decoded and whose next chunk is ready (or one frame
    short of it), with its playback facts set by hand."""
    request = add(sched, rid, arrival_ns=arrival_ns)
    assert sched.try_admit(request, 10_000)
    num_frames = frames_before(chunks) + SPEC.next_chunk_size(frames_before(chunks)) - (0 if ready else 1)
    request.num_tokens = PROMPT_LEN + num_frames - 1
    request.num_text_consumed = 1
    request.frames = [(1,)] * num_frames
    request.frame_text_index = [1] * num_frames
    request.num_frames_chunked = frames_before(chunks)
    request.num_chunks = chunks
    request.first_chunk_ns = first_chunk_ns if chunks else None
    request.playback = playback
    if generation_done:
        request.finish_reason = "pinned"
        sched.pages.release(request.pages)
        request.pages = []
        request.transition(S.DRAINING)
    return request


def codec_summary(plan: StepPlan) -> list[tuple[str, int, str]]:
    return [(job.request.request_id, job.chunk_index, job.lane) for job in plan.codec]


# ---- registry and shared helpers ---------------------------------------------------------------------------------


def test_every_policy_is_registered_by_name():
    assert POLICIES == {"base": BaseScheduler, "online": OnlineScheduler, "offline": OfflineScheduler,
                        "deadline": DeadlineScheduler}
    for name, cls in POLICIES.items():
        assert policy_class(name) is cls and cls.name == name


def test_peek_chunk_changes_nothing_and_cut_takes_the_peeked_chunk():
    sched = make("base")
    r = hand_made(sched, "r", chunks=2, first_chunk_ns=NOW - 100 * MS)
    before = (r.num_frames_chunked, r.num_chunks, r.num_chunks_in_flight)
    job = sched.peek_chunk(r)
    assert (job.first_frame, job.num_frames, job.chunk_index, job.is_last) == (6, 8, 2, False)
    assert (r.num_frames_chunked, r.num_chunks, r.num_chunks_in_flight) == before
    assert sched.peek_chunk(r) == job
    assert sched.ready_chunks() == [job]
    cut = sched.cut(replace(job, deadline_ns=123, lane=URGENT))
    assert (cut.first_frame, cut.num_frames, cut.deadline_ns, cut.lane) == (6, 8, 123, URGENT)
    assert (r.num_frames_chunked, r.num_chunks, r.num_chunks_in_flight) == (14, 3, 1)
    assert sched.peek_chunk(r) is None  # one chunk of a request in flight at a time


def test_is_lane_free_only_matters_with_lanes():
    sched = make("base")
    sched.lanes_free = {URGENT: False, BACKGROUND: False}
    assert sched.is_lane_free(URGENT) and sched.is_lane_free(BACKGROUND)
    sched.has_lanes = True
    assert not sched.is_lane_free(URGENT)
    sched.lanes_free[URGENT] = True
    assert sched.is_lane_free(URGENT) and not sched.is_lane_free(BACKGROUND)


# ---- deadline: the codec -----------------------------------------------------------------------------------------


def deadline_scene(sched: Scheduler) -> dict[str, Request]:
    """Ready chunks due (from NOW): F overdue (stalled), B +60 ms, C +70 ms, A +150 ms (a first chunk), then
    D +620 ms and E +1400 ms (far: background)."""
    return {
        "A": hand_made(sched, "A", chunks=0, arrival_ns=NOW - 50 * MS),
        "B": hand_made(sched, "B", chunks=1, first_chunk_ns=NOW - 100 * MS),
        "C": hand_made(sched, "C", chunks=2, first_chunk_ns=NOW - 900 * MS,
                       playback=PlaybackAnchor(5 * SPEC.samples_per_frame, NOW - 10 * MS, False)),
        "D": hand_made(sched, "D", chunks=3, first_chunk_ns=NOW - 500 * MS),
        "E": hand_made(sched, "E", chunks=4, first_chunk_ns=NOW - 1000 * MS),
        "F": hand_made(sched, "F", chunks=3, first_chunk_ns=NOW - 900 * MS,
                       playback=PlaybackAnchor(14 * SPEC.samples_per_frame, NOW - 5 * MS, True)),
    }


def test_deadline_cuts_urgent_chunks_in_deadline_order_and_holds_far_ones_for_a_bigger_batch():
    sched = make("deadline", has_lanes=True)
    reqs = deadline_scene(sched)
    expected = {rid: chunk_deadline_ns(r, r.num_frames_chunked, SPEC, STARTUP_NS) for rid, r in reqs.items()}
    plan = sched.schedule(NOW)
    assert codec_summary(plan) == [("F", 3, URGENT), ("B", 1, URGENT), ("C", 2, URGENT), ("A", 0, URGENT)]
    for job in plan.codec:
        assert job.deadline_ns == expected[job.request.request_id]
    assert [job.deadline_ns - NOW for job in plan.codec] == [-5 * MS, 60 * MS, 70 * MS, 150 * MS]
    # D and E are far (and fewer than dec_batch, the LM busy): not cut, still ready for a later step
    assert reqs["D"].num_chunks == 3 and reqs["E"].num_chunks == 4
    assert [job.request.request_id for job in sched.ready_chunks()] == ["D", "E"]


def test_deadline_background_launch_when_dec_batch_chunks_are_ready():
    sched = make("deadline", has_lanes=True, dec_batch=2)
    deadline_scene(sched)
    plan = sched.schedule(NOW)
    assert codec_summary(plan)[4:] == [("D", 3, BACKGROUND), ("E", 4, BACKGROUND)]
    deadlines = [job.deadline_ns for job in plan.codec if job.lane == BACKGROUND]
    assert deadlines == sorted(deadlines)


def test_deadline_background_launch_when_the_lm_has_nothing_to_do():
    sched = make("deadline", has_lanes=True)
    for rid, chunks in (("D", 3), ("E", 4)):
        hand_made(sched, rid, chunks=chunks, first_chunk_ns=NOW - 500 * MS, generation_done=True)
    plan = sched.schedule(NOW)
    assert not plan.lm_requests
    assert codec_summary(plan) == [("D", 3, BACKGROUND), ("E", 4, BACKGROUND)]


@pytest.mark.parametrize(("due_ms", "expected"), [
    (104, URGENT),  # within urgent_ms (100) + the background launch (5 ms): urgent
    (110, BACKGROUND),  # would turn urgent before the next step (100 + 5 + a 10 ms step): launched now
    (130, None),  # can wait for a bigger batch
])
def test_deadline_background_launch_when_the_earliest_is_due_soon(due_ms, expected):
    sched = make("deadline", has_lanes=True)
    # chunk 3 starts at frame 14: with playback from first_chunk_ns it is due then + 14 frames
    hand_made(sched, "D", chunks=3, first_chunk_ns=NOW + due_ms * MS - 14 * round(SPEC.frame_ns))
    plan = sched.schedule(NOW)
    assert plan.decode  # the LM is busy
    assert [job.lane for job in plan.codec] == ([expected] if expected else [])


def test_deadline_leaves_busy_lanes_alone_and_the_chunks_stay_ready():
    sched = make("deadline", has_lanes=True, dec_batch=2)
    reqs = deadline_scene(sched)
    sched.lanes_free = {URGENT: False, BACKGROUND: True}
    plan = sched.schedule(NOW)
    assert codec_summary(plan) == [("D", 3, BACKGROUND), ("E", 4, BACKGROUND)]
    assert reqs["F"].num_chunks == 3 and reqs["A"].num_chunks == 0
    sched.lanes_free = {URGENT: True, BACKGROUND: False}
    plan = sched.schedule(NOW + 10 * MS)
    assert [rid for rid, _, lane in codec_summary(plan)] == ["F", "B", "C", "A"]
    assert {lane for _, _, lane in codec_summary(plan)} == {URGENT}


def test_deadline_without_lanes_runs_urgent_then_background_in_one_plan():
    sched = make("deadline", has_lanes=False, dec_batch=2)
    sched.lanes_free = {URGENT: False, BACKGROUND: False}  # meaningless without lanes
    deadline_scene(sched)
    plan = sched.schedule(NOW)
    assert [rid for rid, _, _ in codec_summary(plan)] == ["F", "B", "C", "A", "D", "E"]


def test_deadline_caps_a_launch_at_max_codec_batch():
    sched = make("deadline", has_lanes=True, max_codec_batch=2)
    deadline_scene(sched)
    plan = sched.schedule(NOW)
    assert codec_summary(plan) == [("F", 3, URGENT), ("B", 1, URGENT)]


def test_background_slowdown_is_learned_from_completions():
    sched = make("deadline", has_lanes=True, dec_batch=1)
    d = hand_made(sched, "D", chunks=3, first_chunk_ns=NOW - 500 * MS)
    plan = sched.schedule(NOW)
    (job,) = plan.codec
    assert job.lane == BACKGROUND
    assert sched.background_slowdown == 1.0
    sched.complete_codec(job, NOW + 20 * MS)  # 20 ms for a 5 ms launch: 4x
    assert sched.background_slowdown == pytest.approx(1.0 + 0.3 * (4.0 - 1.0))
    assert d.num_chunks_in_flight == 0


@pytest.mark.parametrize("has_lanes", [False, True])
def test_deadline_cuts_a_chunk_early_when_waiting_for_its_frames_would_make_it_late(has_lanes):
    sched = make("deadline", has_lanes=has_lanes)
    # chunk 2 (8 frames from frame 6), 7 of them there: due first chunk + 6 frames (480 ms); the missing frame
    # takes a 10 ms step and the launch 5 ms, so it would be late once it is due within 25 ms (one step ahead)
    late = hand_made(sched, "late", chunks=2, ready=False, first_chunk_ns=NOW - 470 * MS)  # due NOW + 10 ms
    fine = hand_made(sched, "fine", chunks=2, ready=False, first_chunk_ns=NOW - 400 * MS)  # due NOW + 80 ms
    plan = sched.schedule(NOW)
    assert codec_summary(plan) == [("late", 2, URGENT)]
    job = plan.codec[0]
    assert (job.first_frame, job.num_frames, job.is_early, job.is_last) == (6, 4, True, False)  # a codec size
    assert (late.num_frames_chunked, late.num_chunks, late.num_chunks_in_flight) == (10, 3, 1)
    assert (fine.num_frames_chunked, fine.num_chunks) == (6, 2)
    # the next chunk follows the audio cut so far (10 frames: 8 more), not the chunk count (16 for chunk 3)
    assert SPEC.next_chunk_size(late.num_frames_chunked) == 8


def test_the_deadline_margin_moves_every_deadline_earlier():
    plain, early = make("deadline", has_lanes=True), make("deadline", has_lanes=True, deadline_margin_ms=40.0)
    for sched in (plain, early):
        deadline_scene(sched)
    a, b = plain.schedule(NOW), early.schedule(NOW)
    got = {(j.request.request_id, j.chunk_index): j.deadline_ns for j in b.codec}
    for job in a.codec:
        key = (job.request.request_id, job.chunk_index)
        if key in got and job.request.request_id != "F":  # F reported a stall: due at its report, no margin
            assert got[key] == job.deadline_ns - 40 * MS
    # B (due +60 ms) and C (+70 ms) are urgent either way; D (+620 ms) still waits for a bigger batch
    assert {("B", 1), ("C", 2)} <= set(got) and ("D", 3) not in got
    r = hand_made(make("deadline"), "r", chunks=2, ready=False, first_chunk_ns=NOW - 200 * MS)
    assert chunk_deadline_ns(r, 6, SPEC, STARTUP_NS, 40 * MS) == chunk_deadline_ns(r, 6, SPEC, STARTUP_NS) - 40 * MS
    assert chunk_deadline_ns(r, 0, SPEC, STARTUP_NS, 40 * MS) == r.arrival_ns + STARTUP_NS - 40 * MS


def test_deadline_never_cuts_a_first_chunk_or_a_non_streaming_chunk_early():
    sched = make("deadline", has_lanes=True)
    first = hand_made(sched, "first", chunks=0, ready=False, arrival_ns=NOW - 300 * MS)  # overdue, 1 of 2 frames
    batch = hand_made(sched, "batch", chunks=2, ready=False, first_chunk_ns=NOW - 900 * MS)
    batch.is_streaming = False
    assert sched.schedule(NOW).codec == []
    assert (first.num_chunks, batch.num_chunks) == (0, 2)


# ---- deadline: first chunks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["deadline", "online"])
def test_first_chunks_are_routed_to_the_urgent_lane(policy):
    sched = make(policy, has_lanes=True)
    runner = LaneRunner(sched, seed=3)
    for i in range(6):
        add(sched, f"r{i}", num_words=4 + 3 * i, arrival_ns=i * MS)
    runner.run_until_done()
    firsts = [job for jobs in runner.jobs.values() for job in jobs if job.chunk_index == 0]
    assert len(firsts) == 6
    assert all(job.lane == URGENT for job in firsts)


# ---- deadline: admission and deferral ------------------------------------------------------------------------------


def test_deadline_admits_by_first_audio_deadline():
    sched = make("deadline")
    add(sched, "late", num_words=3, arrival_ns=NOW)
    add(sched, "early", num_words=3, arrival_ns=NOW - 30 * MS)  # added second, due first
    plan = sched.schedule(NOW)
    assert [r.request_id for r in plan.prefill] == ["early", "late"]
    sched = make("deadline", max_batch_size=1)
    add(sched, "late", num_words=3, arrival_ns=NOW)
    add(sched, "early", num_words=3, arrival_ns=NOW - 30 * MS)
    assert [r.request_id for r in sched.schedule(NOW).prefill] == ["early"]


def test_deadline_late_start_demotion_admits_on_time_streams_before_lost_ones():
    """With `late_start_demotion_ms`, a waiting stream already past its first-audio deadline (arrival + 200 ms
    here: no margin) goes after one still on time, for at most the bound past that deadline; off by default."""
    def one_admitted(**config):
        sched = make("deadline", max_batch_size=1, **config)
        add(sched, "lost", num_words=3, arrival_ns=NOW - 250 * MS)  # 50 ms past its deadline
        add(sched, "on_time", num_words=3, arrival_ns=NOW - 20 * MS)
        add(sched, "batch_job", num_words=3, arrival_ns=NOW - 900 * MS).is_streaming = False
        return [r.request_id for r in sched.schedule(NOW).prefill]

    assert one_admitted() == ["lost"]  # default: earliest arrival first
    assert one_admitted(late_start_demotion_ms=1000.0) == ["on_time"]
    assert one_admitted(late_start_demotion_ms=50.0) == ["lost"]  # 50 ms late: past the bound, by arrival again
    assert one_admitted(late_start_demotion_ms=math.inf) == ["on_time"]
    # every one still admitted, in that order, when the batch has room; non-streaming ones last as before
    sched = make("deadline", late_start_demotion_ms=1000.0)
    add(sched, "lost", num_words=3, arrival_ns=NOW - 250 * MS)
    add(sched, "on_time", num_words=3, arrival_ns=NOW - 20 * MS)
    add(sched, "batch_job", num_words=3, arrival_ns=NOW - 900 * MS).is_streaming = False
    assert [r.request_id for r in sched.schedule(NOW).prefill] == ["on_time", "lost", "batch_job"]
    # the margin moves the deadline as chunk_deadline_ns does: due at arrival + 200 - 60 ms
    sched = make("deadline", max_batch_size=1, late_start_demotion_ms=1000.0, deadline_margin_ms=60.0)
    add(sched, "lost", num_words=3, arrival_ns=NOW - 150 * MS)  # due NOW - 10 ms
    add(sched, "on_time", num_words=3, arrival_ns=NOW - 20 * MS)
    assert [r.request_id for r in sched.schedule(NOW).prefill] == ["on_time"]
    with pytest.raises(ValueError, match="late_start_demotion_ms"):
        SchedulerConfig(late_start_demotion_ms=-1.0)
    with pytest.raises(ValueError, match="late_start_demotion_ms"):
        SchedulerConfig(late_start_demotion_ms=math.nan)


def test_deadline_holds_admission_while_half_the_recent_chunks_were_late():
    """`late_chunk_hold_ms`: no stream is admitted while at least half of the chunks (and at least
    MIN_COMPLETIONS) that completed within the bound were past their deadlines; on-time chunks or time lift the
    hold; chunks without a deadline or audio say nothing; off by default, the same lateness holds nothing."""
    from voxrt.engine.sched.deadline_policy import LATE_SHARE, MIN_COMPLETIONS  # noqa: PLC0415

    assert LATE_SHARE == 0.5 and MIN_COMPLETIONS == 8

    def complete(sched, request, now_ns, late, **job):
        due_ns = now_ns - MS if late else now_ns + MS
        job = {"deadline_ns": due_ns, "num_frames": 4, **job}
        sched.complete_codec(CodecJob(request, 0, job["num_frames"], 1, False, job["deadline_ns"]), now_ns)

    def admitted(sched, now_ns, rid):
        add(sched, rid, num_words=3, arrival_ns=now_ns)
        return [r.request_id for r in sched.schedule(now_ns).prefill]

    for config, holds in (({}, False), ({"late_chunk_hold_ms": 100.0}, True)):
        sched = make("deadline", **config)
        r = hand_made(sched, "r", chunks=2, first_chunk_ns=NOW - 300 * MS)
        for i in range(MIN_COMPLETIONS - 1):  # too few to judge
            complete(sched, r, NOW + i * MS, late=True)
        assert not sched.is_behind(NOW + 10 * MS)
        complete(sched, r, NOW + 10 * MS, late=True)
        assert sched.is_behind(NOW + 10 * MS) is holds
        assert admitted(sched, NOW + 11 * MS, "held") == ([] if holds else ["held"])
        assert sched.is_holding is holds
    # (the holding scheduler from here) ignored: no deadline (a non-streaming request's chunk), no audio (an empty
    # last chunk)
    for _ in range(4):
        complete(sched, r, NOW + 12 * MS, late=True, deadline_ns=None)
        complete(sched, r, NOW + 12 * MS, late=True, num_frames=0)
    assert sched.is_behind(NOW + 12 * MS)
    # on-time chunks lift the hold once fewer than half of the window's chunks were late
    for i in range(7):
        complete(sched, r, NOW + 13 * MS, late=False)
    assert sched.is_behind(NOW + 13 * MS)
    complete(sched, r, NOW + 13 * MS, late=False)
    assert sched.is_behind(NOW + 13 * MS)  # 8 of 16 late: LATE_SHARE reached
    complete(sched, r, NOW + 13 * MS, late=False)
    assert not sched.is_behind(NOW + 13 * MS)
    assert admitted(sched, NOW + 14 * MS, "after") == ["held", "after"]  # by first-audio deadline
    assert not sched.is_holding
    # the window slides: late chunks older than the bound are forgotten
    sched = make("deadline", late_chunk_hold_ms=100.0)
    r = hand_made(sched, "r", chunks=2, first_chunk_ns=NOW - 300 * MS)
    for i in range(MIN_COMPLETIONS):
        complete(sched, r, NOW + i * MS, late=True)
    assert sched.is_behind(NOW + 100 * MS)
    assert not sched.is_behind(NOW + 101 * MS)  # the first one is now older than 100 ms: 7 left
    # an engine held with nothing else to do wakes when the oldest completion leaves the window
    sched = make("deadline", late_chunk_hold_ms=100.0)
    r = hand_made(sched, "r", chunks=2, first_chunk_ns=NOW - 300 * MS)
    for i in range(MIN_COMPLETIONS):
        complete(sched, r, NOW + i * MS, late=True)
    sched.cancel("r")
    assert sched.wake_ns() is None
    assert admitted(sched, NOW + 50 * MS, "waits") == [] and sched.is_holding
    assert sched.wake_ns() == NOW + 100 * MS
    assert [r.request_id for r in sched.schedule(NOW + 100 * MS + 1).prefill] == ["waits"]
    assert not sched.is_holding and sched.wake_ns() is None
    # a late chunk of a stream found starved of text (its agent's text slower than speech) from
    # STARVED_BEFORE_DEADLINE_MS before the chunk's deadline on: the text's lateness, not counted; a chunk due
    # later than that after the stream's last starvation is the engine's (a token-streamed request starves early on
    # however fast its text comes, and its later chunks must count)
    from voxrt.engine.sched.deadline_policy import STARVED_BEFORE_DEADLINE_MS  # noqa: PLC0415

    margin_ns = round(STARVED_BEFORE_DEADLINE_MS * MS)
    sched = make("deadline", late_chunk_hold_ms=100.0)
    r = hand_made(sched, "r", chunks=2, first_chunk_ns=NOW - 300 * MS)
    r.starved_ns = NOW
    for i in range(MIN_COMPLETIONS):  # each due 1 ms before it completes: at NOW + margin - 1 ms, or earlier
        complete(sched, r, NOW + margin_ns - i * MS, late=True)
    assert not sched.is_behind(NOW + margin_ns)
    for i in range(MIN_COMPLETIONS):  # due more than the margin after the starvation
        complete(sched, r, NOW + margin_ns + 2 * MS + i * MS, late=True)
    assert sched.is_behind(NOW + margin_ns + 10 * MS)
    # the plan stamps the streams it finds starved (only with the hold on)
    sched = make("deadline", late_chunk_hold_ms=100.0)
    starved = add(sched, "s", num_words=3, final=False)
    step_ns = NOW
    while starved.state is not S.STARVED:  # admitted, then each step reads a word until none is left
        assert step_ns < NOW + 100 * MS, starved.state
        sched.schedule(step_ns)
        step_ns += 10 * MS
    assert starved.starved_ns is None  # stamped by the next plan that finds it starved
    sched.schedule(step_ns)
    assert starved.starved_ns == step_ns
    with pytest.raises(ValueError, match="late_chunk_hold_ms"):
        SchedulerConfig(late_chunk_hold_ms=0.0)
    with pytest.raises(ValueError, match="late_chunk_hold_ms"):
        SchedulerConfig(late_chunk_hold_ms=math.inf)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_max_admission_wait_refuses_streams_the_engine_kept_waiting(policy):
    """`max_admission_wait_ms` (every policy): a stream still waiting this long after it could have been admitted
    and not admitted by the step's plan either is failed with `server_busy`; with `admission_text_wait_ms` 0 its
    wait counts from its text's arrival when the text came later (the default's 50 ms: the next test), and
    non-streaming requests are never refused. Off (None) by default: nothing is refused however long it waited."""
    def scheduler(**config):  # one live request at a time: "running" holds it, every other one waits
        sched = make(policy, max_batch_size=1, admission_text_wait_ms=0.0, **config)
        add(sched, "running", num_words=3, arrival_ns=NOW - 900 * MS)
        assert [r.request_id for r in sched.schedule(NOW - 900 * MS).prefill] == ["running"]
        return sched

    sched = scheduler()
    add(sched, "old", num_words=3, arrival_ns=NOW - 5000 * MS)
    sched.schedule(NOW)
    assert sched.pop_failures() == [] and sched.requests["old"].state is S.WAITING

    sched = scheduler(max_admission_wait_ms=100.0)
    add(sched, "overdue", num_words=3, arrival_ns=NOW - 101 * MS)
    add(sched, "in_time", num_words=3, arrival_ns=NOW - 100 * MS)  # exactly the bound: still waits
    add(sched, "batch_job", num_words=3, arrival_ns=NOW - 900 * MS).is_streaming = False
    late_text = add(sched, "late_text", num_words=None, arrival_ns=NOW - 900 * MS)  # no text yet
    sched.schedule(NOW - 50 * MS)  # sees late_text without text: its wait starts after this step
    sched.append_text("late_text", "word word", True)
    sched.schedule(NOW)
    failures = sched.pop_failures()
    assert [(f.request.request_id, f.code) for f in failures] == [("overdue", "server_busy")]
    assert "server at capacity" in failures[0].message and "retry" in failures[0].message
    assert failures[0].request.state is S.FAILED and "overdue" not in sched.requests
    assert late_text.state is S.WAITING and sched.requests["batch_job"].state is S.WAITING
    sched.schedule(NOW + 1 * MS)  # in_time is now 101 ms in; late_text 51 ms since its text could be admitted
    assert [f.request.request_id for f in sched.pop_failures()] == ["in_time"]
    sched.schedule(NOW + 51 * MS)
    assert [f.request.request_id for f in sched.pop_failures()] == ["late_text"]
    assert sched.requests["batch_job"].state is S.WAITING and sched.requests["running"].state is S.RUNNING
    # a plan that can admit an overdue stream admits it (the engine may have been slow to look): refused is only
    # what the plan leaves waiting
    sched = make(policy, max_batch_size=1, max_admission_wait_ms=100.0)
    add(sched, "overdue", num_words=3, arrival_ns=NOW - 500 * MS)
    assert [r.request_id for r in sched.schedule(NOW).prefill] == ["overdue"] and sched.pop_failures() == []
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="max_admission_wait_ms"):
            SchedulerConfig(max_admission_wait_ms=bad)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_admission_text_wait_counts_a_short_text_gap(policy):
    """`admission_text_wait_ms`: up to that much of a stream's wait for its first text counts toward the admission
    bound. A token stream whose first word came 40 ms after its arrival is refused 100 ms after its arrival (with
    0 it waits 100 ms after its text); a stream whose text came 500 ms late keeps 100 - 50 ms (the default) after
    it; the wait never counts from before the arrival, and no stream is refused while it has no text."""
    def run(counted_ms: float, gap_ms: float) -> float:
        """ms after the arrival at which the stream was refused (steps every ms; `running` holds the one place)."""
        sched = make(policy, max_batch_size=1, max_admission_wait_ms=100.0, admission_text_wait_ms=counted_ms)
        add(sched, "running", num_words=3, arrival_ns=NOW - 900 * MS)
        assert [r.request_id for r in sched.schedule(NOW - 900 * MS).prefill] == ["running"]
        add(sched, "stream", num_words=None, arrival_ns=NOW)
        for t in range(0, 1000):
            if t == gap_ms:
                sched.append_text("stream", "word word", False)
            sched.schedule(NOW + t * MS)
            failures = sched.pop_failures()
            if failures:
                assert [(f.request.request_id, f.code) for f in failures] == [("stream", "server_busy")]
                return t
        raise AssertionError("never refused")

    # the last step that saw no text was gap - 1 ms, so with 0 the bound runs from there
    assert run(0.0, 40) == 40 - 1 + 101
    assert run(50.0, 40) == 101  # from the arrival: the 40 ms gap counts
    assert run(50.0, 500) == 500 - 1 - 50 + 101  # a long pause: all but 50 ms of it excused
    assert SchedulerConfig().admission_text_wait_ms == 50.0
    # everything counts (from the arrival), but no stream is refused before its text could be admitted: at once then
    assert run(1000.0, 500) == 500
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="admission_text_wait_ms"):
            SchedulerConfig(admission_text_wait_ms=bad)


def test_next_chunk_slack():
    sched = make("deadline")
    # chunk 2 (8 frames from frame 6) due first_chunk + 6 frames = NOW + 280 ms; 3 frames missing at 10 ms
    r = hand_made(sched, "r", chunks=2, ready=False, first_chunk_ns=NOW - 200 * MS)
    r.frames = r.frames[:-2]  # 6 + 5 frames: 3 missing
    slack = next_chunk_slack_ns(r, NOW, SPEC, SIMPLE_COSTS, 10.0, STARTUP_NS)
    assert slack == pytest.approx(280 * MS - 3 * 10 * MS - 5 * MS)
    r.finish_reason = "pinned"  # nothing more to generate: only the codec launch
    assert next_chunk_slack_ns(r, NOW, SPEC, SIMPLE_COSTS, 10.0, STARTUP_NS) == pytest.approx(275 * MS)


def test_should_defer_prefill_rule():
    bound = 100 * MS
    assert should_defer_prefill(NOW, None, bound, extra_step_ns=5 * MS, min_slack_ns=3 * MS)
    assert not should_defer_prefill(NOW, None, bound, extra_step_ns=5 * MS, min_slack_ns=6 * MS)  # fits
    assert not should_defer_prefill(NOW, None, bound, extra_step_ns=5 * MS, min_slack_ns=-1 * MS)  # late anyway
    assert not should_defer_prefill(NOW, None, bound, extra_step_ns=5 * MS, min_slack_ns=None)  # nothing runs
    assert should_defer_prefill(NOW, NOW - 99 * MS, bound, extra_step_ns=5 * MS, min_slack_ns=3 * MS)
    assert not should_defer_prefill(NOW, NOW - 100 * MS, bound, extra_step_ns=5 * MS, min_slack_ns=3 * MS)
    assert not should_defer_prefill(NOW, None, 0, extra_step_ns=5 * MS, min_slack_ns=3 * MS)  # no deferral at all
    # not past a step that would end at the bound
    assert should_defer_prefill(NOW, NOW - 89 * MS, bound, extra_step_ns=5 * MS, min_slack_ns=3 * MS, step_ns=10 * MS)
    assert not should_defer_prefill(NOW, NOW - 90 * MS, bound, extra_step_ns=5 * MS, min_slack_ns=3 * MS,
                                    step_ns=10 * MS)


def test_should_defer_prefill_never_beyond_its_bound_property():
    rng = random.Random(7)
    deferred = 0
    for _ in range(5_000):
        bound = rng.randint(0, 300) * MS
        since = None if rng.random() < 0.3 else NOW - rng.randint(0, 2 * bound + 1)
        extra = rng.uniform(0, 50) * MS
        slack = None if rng.random() < 0.1 else rng.uniform(-50, 50) * MS
        step = rng.uniform(0, 40) * MS
        defer = should_defer_prefill(NOW, since, bound, extra, slack, step)
        if NOW - (NOW if since is None else since) + step >= bound:
            assert not defer
        if defer:
            deferred += 1
            assert slack is not None and 0 <= slack < extra
    assert deferred > 500


def test_deadline_defers_a_prefill_that_would_make_a_stream_miss_then_admits_it_at_the_bound():
    # a prefill costs 10 ms a prompt token: 30 ms for one prompt; the running stream has 20 ms to spare
    costs = CostModel(lm_base_ms=10.0, lm_per_request_ms=0.0, prefill_per_token_ms=10.0, codec_base_ms=5.0,
                      codec_per_frame_ms=0.0)
    sched = make("deadline", costs=costs)
    runner = hand_made(sched, "running", chunks=1, ready=False, first_chunk_ns=NOW - 160 * MS + 35 * MS)
    # chunk 1 due at NOW + 35 ms; one frame missing (10 ms) and its codec launch (5 ms): slack 20 ms
    new = add(sched, "new", num_words=3, arrival_ns=NOW - 5 * MS)
    plan = sched.schedule(NOW)
    assert plan.prefill == [] and new.state is S.WAITING
    assert new.deferred_since_ns == NOW
    assert [item.request for item in plan.decode] == [runner]
    # whatever the streams need, the new request waits at most max_prefill_deferral_ms (100): it is not
    # deferred past a step (10 ms) that would end at the bound
    for t in range(10, 100, 10):
        runner.first_chunk_ns = NOW + t * MS - 125 * MS  # the stream keeps its 20 ms of slack at every step
        plan = sched.schedule(NOW + t * MS)  # (no update_lm: the stream stays one frame short)
        assert plan.prefill == ([new] if t == 90 else []), t
    assert new.deferred_since_ns == NOW


def random_deferral_scene(seed: int, bound_ms: float) -> tuple[Scheduler, Request]:
    """Running streams whose next chunks are due about now, under random costs, and a waiting request that
    may have been deferred for a while already."""
    rng = random.Random(seed)
    costs = CostModel(lm_base_ms=rng.uniform(5, 20), lm_per_request_ms=rng.uniform(0, 0.5),
                      prefill_per_token_ms=rng.uniform(0, 30), codec_base_ms=rng.uniform(1, 10),
                      codec_per_frame_ms=rng.uniform(0, 0.2))
    sched = make("deadline", costs=costs, max_prefill_deferral_ms=bound_ms)
    for i in range(rng.randint(0, 6)):
        chunks = rng.randint(0, 5)
        due_ns = NOW + rng.randint(-50, 250) * MS
        playback = None
        if rng.random() < 0.3:
            playback = PlaybackAnchor(frames_before(chunks) * SPEC.samples_per_frame, due_ns, rng.random() < 0.1)
        hand_made(sched, f"r{i}", chunks=chunks, ready=rng.random() < 0.5, arrival_ns=due_ns - STARTUP_NS,
                  first_chunk_ns=due_ns - frames_before(chunks) * round(SPEC.frame_ns), playback=playback)
    new = add(sched, "new", num_words=rng.randint(1, 5), arrival_ns=NOW - rng.randint(0, 300) * MS)
    new.deferred_since_ns = None if rng.random() < 0.3 else NOW - rng.randint(0, 200) * MS
    return sched, new


@pytest.mark.parametrize("bound_ms", [0.0, 50.0, 100.0])
def test_deadline_deferral_is_bounded_over_random_states(bound_ms):
    """Property: whatever the running streams and costs, a request held back was deferred for less than
    max_prefill_deferral_ms, and one deferred that long is admitted although the streams would want it held."""
    held = saved_by_bound = 0
    for seed in range(400):
        sched, new = random_deferral_scene(seed, bound_ms)
        since = new.deferred_since_ns
        plan = sched.schedule(NOW)
        if new not in plan.prefill:
            held += 1
            assert new.deferred_since_ns is not None, seed
            assert NOW - new.deferred_since_ns < bound_ms * MS, seed
            assert since is None or new.deferred_since_ns == since, seed  # the first deferral counts
            continue
        unbounded, new_again = random_deferral_scene(seed, 1e9)
        if new_again not in unbounded.schedule(NOW).prefill:
            saved_by_bound += 1  # the streams wanted it deferred; the bound admitted it
    assert saved_by_bound > 10  # the bound was exercised
    assert held > 10 if bound_ms else held == 0  # a bound of 0 never defers


# ---- online ----------------------------------------------------------------------------------------------------------


def online_scene(sched: Scheduler) -> dict[str, Request]:
    """A: no audio yet (pressing), B: next chunk due in 150 ms (pressing: within 2 x urgent_ms), C: 620 ms,
    E: 1400 ms (not pressing)."""
    return {
        "E": hand_made(sched, "E", chunks=4, first_chunk_ns=NOW - 1000 * MS),
        "C": hand_made(sched, "C", chunks=3, first_chunk_ns=NOW - 500 * MS),
        "A": hand_made(sched, "A", chunks=0, arrival_ns=NOW - 20 * MS),
        "B": hand_made(sched, "B", chunks=1, first_chunk_ns=NOW - 10 * MS),
    }


def test_online_pressing_chunks_go_urgent_first_then_the_rest_by_deadline():
    sched = make("online", has_lanes=True)
    online_scene(sched)
    plan = sched.schedule(NOW)
    assert codec_summary(plan) == [("B", 1, URGENT), ("A", 0, URGENT), ("C", 3, BACKGROUND), ("E", 4, BACKGROUND)]
    assert all(job.deadline_ns is not None for job in plan.codec)


def test_online_without_lanes_cuts_pressing_first_at_most_max_codec_batch():
    sched = make("online", max_codec_batch=3)
    online_scene(sched)
    plan = sched.schedule(NOW)
    assert [rid for rid, _, _ in codec_summary(plan)] == ["B", "A", "C"]
    plan = sched.schedule(NOW + 10 * MS)
    assert [rid for rid, _, _ in codec_summary(plan)] == ["E"]


def test_online_respects_busy_lanes():
    sched = make("online", has_lanes=True)
    online_scene(sched)
    sched.lanes_free = {URGENT: True, BACKGROUND: False}
    assert [rid for rid, _, _ in codec_summary(sched.schedule(NOW))] == ["B", "A"]
    sched.lanes_free = {URGENT: False, BACKGROUND: True}
    assert [rid for rid, _, _ in codec_summary(sched.schedule(NOW))] == ["C", "E"]


# ---- offline ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("has_lanes", [False, True])
def test_offline_holds_chunks_while_generating_except_for_finished_requests(has_lanes):
    sched = make("offline", has_lanes=has_lanes)
    hand_made(sched, "a", chunks=1, first_chunk_ns=NOW - 100 * MS)
    hand_made(sched, "b", chunks=0)
    hand_made(sched, "done", chunks=2, first_chunk_ns=NOW - 100 * MS, generation_done=True)
    plan = sched.schedule(NOW)
    assert plan.decode
    assert codec_summary(plan) == [("done", 2, BACKGROUND)]


def test_offline_cuts_a_big_batch_once_max_codec_batch_chunks_are_ready():
    sched = make("offline", max_codec_batch=3)
    for i in range(4):
        hand_made(sched, f"r{i}", chunks=i % 2)
    plan = sched.schedule(NOW)
    assert plan.decode
    assert [rid for rid, _, _ in codec_summary(plan)] == ["r0", "r1", "r2"]
    assert {lane for _, _, lane in codec_summary(plan)} == {BACKGROUND}


def test_offline_cuts_everything_when_nothing_generates():
    sched = make("offline", has_lanes=True)
    hand_made(sched, "a", chunks=1, first_chunk_ns=NOW, generation_done=True)
    hand_made(sched, "b", chunks=3, first_chunk_ns=NOW, generation_done=True)
    sched.lanes_free = {URGENT: True, BACKGROUND: False}
    assert sched.schedule(NOW).codec == []  # its lane is busy
    sched.lanes_free = {URGENT: True, BACKGROUND: True}
    plan = sched.schedule(NOW)
    assert not plan.lm_requests
    assert codec_summary(plan) == [("a", 1, BACKGROUND), ("b", 3, BACKGROUND)]


# ---- every policy through a mixed workload ---------------------------------------------------------------------------


class LaneRunner:
    """Runs plans like the engine: an LM step of `step_ns`; with lanes, each lane runs one batch at a time and a
    batch completes 0-3 steps after its launch (batches cut for a busy lane queue behind it); without lanes,
    every chunk completes in its step. Checks what the stateful codec needs and the pools after every step."""

    def __init__(self, sched: Scheduler, seed: int, step_ns: int = 15 * MS) -> None:
        self.sched = sched
        self.rng = random.Random(seed)
        self.step_ns = step_ns
        self.now = 0
        self.lanes: dict[str, list[list]] = {lane: [] for lane in LANES}  # [steps left, jobs]
        self.jobs: dict[str, list[CodecJob]] = defaultdict(list)  # launched, in order
        self.completed: dict[str, list[int]] = defaultdict(list)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.text_after: dict[str, tuple[int, str]] = {}  # request id -> (step, text): incremental text

    def step(self) -> StepPlan:
        sched = self.sched
        self.now += self.step_ns
        for rid, (at, text) in list(self.text_after.items()):
            if self.now >= at and rid in sched.requests:
                sched.append_text(rid, text, True)
                del self.text_after[rid]
        sched.lanes_free = {lane: not queue for lane, queue in self.lanes.items()}
        plan = sched.schedule(self.now)
        for job in plan.codec:
            rid = job.request.request_id
            assert self.in_flight[rid] == 0, f"{rid}: a second chunk launched while one is in flight"
            assert job.chunk_index == len(self.jobs[rid])
            expected_first = sum(j.num_frames for j in self.jobs[rid])
            assert job.first_frame == expected_first
            self.jobs[rid].append(job)
            self.in_flight[rid] += 1
        if plan.lm_requests:
            sched.update_lm(plan, [(1,)] * len(plan.lm_requests))
        if sched.has_lanes:
            for lane in LANES:
                jobs = [job for job in plan.codec if job.lane == lane]
                if jobs:
                    self.lanes[lane].append([self.rng.randint(0, 3), jobs])
            for queue in self.lanes.values():
                if queue and queue[0][0] <= 0:
                    self._complete(queue.pop(0)[1])
                elif queue:
                    queue[0][0] -= 1
        else:
            self._complete(plan.codec)
        sched.check_integrity()
        return plan

    def _complete(self, jobs: list[CodecJob]) -> None:
        for job in jobs:
            rid = job.request.request_id
            self.in_flight[rid] -= 1
            assert job.chunk_index == len(self.completed[rid])
            self.completed[rid].append(job.chunk_index)
            self.sched.complete_codec(job, self.now)

    def run_until_done(self, limit: int = 5_000) -> None:
        for _ in range(limit):
            if not self.sched.requests and not any(self.lanes.values()):
                return
            self.step()
        raise AssertionError(f"not done: {[(r.request_id, r.state) for r in self.sched.requests.values()]}")


@pytest.mark.parametrize("max_live", [None, 6])
@pytest.mark.parametrize("has_lanes", [False, True])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_serves_a_mixed_workload_cleanly(policy, has_lanes, max_live):
    sched = make(policy, has_lanes=has_lanes, costs=CostModel(), num_slots=6, max_batch_size=4,
                 max_live_requests=max_live)
    runner = LaneRunner(sched, seed=len(policy) + has_lanes)
    rng = random.Random(5)
    requests = []
    for i in range(14):
        if i % 4 == 3:  # text arrives in two parts: the request starves in between
            r = add(sched, f"r{i}", num_words=2, final=False, arrival_ns=i * MS)
            runner.text_after[r.request_id] = (rng.randint(5, 30) * 15 * MS, " more words here")
        elif i % 5 == 4:
            r = add(sched, f"r{i}", num_words=5, arrival_ns=i * MS, num_frames=rng.randint(1, 70))
        else:
            r = add(sched, f"r{i}", num_words=rng.randint(1, 25), arrival_ns=i * MS)
        requests.append(r)
    runner.run_until_done()
    for r in requests:
        assert r.state is S.FINISHED, r.request_id
        jobs = runner.jobs[r.request_id]
        assert runner.completed[r.request_id] == list(range(len(jobs)))
        assert sum(job.num_frames for job in jobs) == r.num_frames
        assert [job.is_last for job in jobs] == [False] * (len(jobs) - 1) + [True]
        if policy in ("online", "deadline"):
            assert all(job.deadline_ns is not None for job in jobs)
    if policy == "deadline":  # the order checks above covered chunks cut early too
        assert any(job.is_early for jobs in runner.jobs.values() for job in jobs)
    sched.check_integrity()
    assert sched.pages.num_free == sched.pages.num_pages
    assert sched.slots.num_free == sched.slots.num_slots
    assert sched.pop_failures() == []


# ---- text streamed slower than the LM reads it -------------------------------------------------------------------


def starved(sched: Scheduler, rid: str, *, chunks: int, frames_held: int, first_chunk_ns: int | None = None,
            arrival_ns: int = NOW - 50 * MS) -> Request:
    """A streaming request whose text (not final) is all read: STARVED, holding `frames_held` frames past its
    `chunks` decoded chunks (fewer than its next chunk needs)."""
    request = add(sched, rid, num_words=3, final=False, arrival_ns=arrival_ns)  # 2 tokens: the last word waits
    assert sched.try_admit(request, 10_000)
    num_frames = frames_before(chunks) + frames_held
    assert frames_held < SPEC.next_chunk_size(frames_before(chunks))
    request.num_tokens = PROMPT_LEN + num_frames - 1
    request.num_text_consumed = len(request.feed.token_ids)
    request.frames = [(1,)] * num_frames
    request.frame_text_index = [request.num_text_consumed] * num_frames
    request.num_frames_chunked = frames_before(chunks)
    request.num_chunks = chunks
    request.first_chunk_ns = first_chunk_ns if chunks else None
    request.transition(S.STARVED)
    return request


def test_base_cuts_a_starved_requests_frames_at_once():
    sched = make("base")
    r = starved(sched, "r", chunks=2, frames_held=7, first_chunk_ns=NOW - 100 * MS)
    assert not sched.holds_starved_frames(r) and sched.starved_cut_ns(r) is None and sched.wake_ns() is None
    assert sched.has_work(NOW)
    plan = sched.schedule(NOW)
    assert [(j.request.request_id, j.first_frame, j.num_frames) for j in plan.codec] == [("r", 6, 4)]


@pytest.mark.parametrize("has_lanes", [False, True])
def test_deadline_holds_a_starved_streams_frames_until_its_next_chunk_is_due(has_lanes):
    sched = make("deadline", has_lanes=has_lanes)
    # chunk 2 (8 frames from frame 6), 7 held: due first chunk + 6 frames = NOW + 380 ms; its cut time is that
    # less the missing frame's step (10 ms), the launch (5 ms) and one more step (10 ms): NOW + 355 ms
    r = starved(sched, "r", chunks=2, frames_held=7, first_chunk_ns=NOW - 100 * MS)
    due_ns = chunk_deadline_ns(r, 6, SPEC, STARTUP_NS)
    assert due_ns == NOW + 380 * MS
    assert sched.holds_starved_frames(r)
    assert sched.starved_cut_ns(r) == pytest.approx(due_ns - 25 * MS)
    assert sched.wake_ns() == sched.starved_cut_ns(r)
    assert not sched.has_work(NOW)  # the engine waits for commands, not spins, until then
    assert sched.schedule(NOW).is_empty
    assert r.num_frames_chunked == 6
    cut_ns = math.ceil(sched.starved_cut_ns(r))
    assert not sched.has_work(cut_ns - MS) and sched.has_work(cut_ns)
    plan = sched.schedule(cut_ns)
    assert [(j.request.request_id, j.first_frame, j.num_frames, j.is_early) for j in plan.codec] == [("r", 6, 4, True)]
    assert sched.wake_ns() is None  # its chunk is in flight


def test_deadline_holds_nothing_once_text_comes_and_cuts_a_full_chunk():
    sched = make("deadline", has_lanes=True)
    r = starved(sched, "r", chunks=2, frames_held=7, first_chunk_ns=NOW - 100 * MS)
    sched.append_text("r", " more words to read", True)
    assert r.state is S.RUNNING and sched.wake_ns() is None
    plan = sched.schedule(NOW)
    assert [item.request for item in plan.decode] == [r]
    sched.update_lm(plan, [(1,)])
    assert r.num_frames - r.num_frames_chunked == 8  # the whole next chunk: cut at its size, not 4 + 4


def test_deadline_cuts_a_starved_first_chunk_at_once_and_never_holds_a_non_streaming_one():
    sched = make("deadline", has_lanes=True)
    first = starved(sched, "first", chunks=0, frames_held=1)
    batch = starved(sched, "batch", chunks=2, frames_held=7, first_chunk_ns=NOW - 100 * MS)
    batch.is_streaming = False
    assert not sched.holds_starved_frames(first) and not sched.holds_starved_frames(batch)
    assert sched.wake_ns() is None and sched.has_work(NOW)
    plan = sched.schedule(NOW)
    assert sorted((j.request.request_id, j.num_frames) for j in plan.codec) == [("batch", 4), ("first", 1)]


def test_every_policy_serves_token_streamed_text_cleanly():
    num_chunks = {}
    for policy in sorted(POLICIES):
        sched = make(policy, has_lanes=True, costs=CostModel(), num_slots=8, max_batch_size=4)
        runner = LaneRunner(sched, seed=7)
        words = "one two three four five six seven eight nine ten".split()
        requests = []
        for i in range(5):
            requests.append(add(sched, f"r{i}", num_words=None, arrival_ns=i * MS))
            sched.append_text(f"r{i}", words[0], False)
        for n in range(1, 2 * len(words) + 1):  # a word every other step to each request: they starve
            if n % 2 == 0 and n // 2 < len(words):
                for r in requests:
                    sched.append_text(r.request_id, " " + words[n // 2], n // 2 == len(words) - 1)
            runner.step()
        runner.run_until_done()
        for r in requests:
            assert r.state is S.FINISHED, (policy, r.request_id)
            jobs = runner.jobs[r.request_id]
            assert sum(job.num_frames for job in jobs) == r.num_frames
            assert [job.is_last for job in jobs] == [False] * (len(jobs) - 1) + [True]
        assert sched.pages.num_free == sched.pages.num_pages and sched.slots.num_free == sched.slots.num_slots
        num_chunks[policy] = sum(len(runner.jobs[r.request_id]) for r in requests)
    # base cuts whenever a request starves (1, 2, 1, 2, 1, 1, 8, 4 frames); deadline holds (1, 2, 4, 8, 5)
    assert num_chunks["deadline"] < num_chunks["base"]


# ---- more live requests than one batch ---------------------------------------------------------------------------


def test_max_live_requests_must_cover_a_batch():
    with pytest.raises(ValueError, match="max_live_requests"):
        SchedulerConfig(max_batch_size=4, max_live_requests=3)
    assert SchedulerConfig(max_batch_size=4).live_cap == 4
    assert SchedulerConfig(max_batch_size=4, max_live_requests=6).live_cap == 6


def test_deadline_decodes_the_least_slack_first_when_more_are_live_than_a_batch():
    sched = make("deadline", max_batch_size=2, max_live_requests=4)
    # next chunks (chunk 2, 8 frames from frame 6, 7 there) due +380, +80 and +180 ms
    far = hand_made(sched, "far", chunks=2, ready=False, first_chunk_ns=NOW - 100 * MS)
    near = hand_made(sched, "near", chunks=2, ready=False, first_chunk_ns=NOW - 400 * MS)
    mid = hand_made(sched, "mid", chunks=2, ready=False, first_chunk_ns=NOW - 300 * MS)
    before = (far.num_tokens, far.num_frames_in_flight)
    plan = sched.schedule(NOW)
    assert [item.request for item in plan.decode] == [near, mid]
    assert (far.num_tokens, far.num_frames_in_flight) == before  # nothing booked: it decodes in a later step


def test_admission_fills_the_live_cap_and_each_step_stays_a_batch():
    sched = make("deadline", has_lanes=True, costs=CostModel(), num_slots=12, max_batch_size=2,
                 max_live_requests=4)
    runner = LaneRunner(sched, seed=2)
    reqs = [add(sched, f"r{i}", num_words=6, arrival_ns=i * MS) for i in range(8)]
    most_live = 0
    for _ in range(2_000):
        if not sched.requests and not any(runner.lanes.values()):
            break
        plan = runner.step()
        assert len(plan.lm_requests) <= 2
        most_live = max(most_live, len(sched.running()))
    assert most_live == 4
    assert all(r.state is S.FINISHED for r in reqs)
    assert sched.slots.num_free == sched.slots.num_slots and sched.pages.num_free == sched.pages.num_pages


def test_deadline_slack_follows_every_event_its_kept_parts_depend_on():
    """The deadline policy keeps each stream's next-chunk deadline, size and codec time across steps
    (`_next_chunk_parts`): its slack must equal `next_chunk_slack_ns` after every event that changes them (a
    frame, a chunk cut, a playback report, the first chunk's completion, new costs, a new request under an
    ended one's id)."""
    sched = make("deadline")
    r = hand_made(sched, "r", chunks=2, ready=False, first_chunk_ns=NOW - 200 * MS)

    def check(request: Request) -> None:
        for step_ms in (10.0, 13.0):
            assert sched._slack_ns(request, NOW, step_ms) == next_chunk_slack_ns(
                request, NOW, SPEC, sched.costs, step_ms, STARTUP_NS)

    check(r)
    r.frames.append((1,))  # its next chunk is ready now
    check(r)
    job = sched.cut(sched.peek_chunk(r))  # the next chunk's deadline and size move on
    sched.complete_codec(job, NOW)
    check(r)
    r.playback = PlaybackAnchor(played_samples=5 * SPEC.samples_per_frame, anchor_ns=NOW - 10 * MS, is_stalled=False)
    check(r)
    r.playback = PlaybackAnchor(played_samples=6 * SPEC.samples_per_frame, anchor_ns=NOW, is_stalled=True)
    check(r)
    sched.costs = replace(SIMPLE_COSTS, codec_base_ms=7.0)
    check(r)
    s = hand_made(sched, "s", chunks=1, ready=False)  # its first chunk in flight: dated by its own deadline
    check(s)
    s.first_chunk_ns = NOW - 30 * MS
    check(s)
    sched.cancel("s")
    again = hand_made(sched, "s", chunks=1, ready=False, arrival_ns=NOW - 10 * MS)
    check(again)
