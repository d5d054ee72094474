"""BaseScheduler driven by a fake runner: admission, text feeding, stop rules, chunk cutting, cancel, and
KV exhaustion. Pure: no torch, the "model" is a function that makes up frames."""

from __future__ import annotations

import math
import re
import zlib
from collections import defaultdict

import pytest

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.base_policy import BaseScheduler
from voxrt.engine.sched.pages import PagePool, SlotPool
from voxrt.engine.sched.plan import CodecJob, ProgramSpec, StepPlan, codec_sizes
from voxrt.engine.sched.policies import POLICIES, policy_class
from voxrt.engine.sched.request import PromptTokens, Request, RequestState
from voxrt.engine.sched.scheduler import SchedulerConfig

S = RequestState
K = 3  # codebooks
PAD = 0  # text_pad_id
EOS = 999  # eos code (when the spec has one)
FPTT = 2.0
CHUNK = 4
FIRST_CHUNK = 2
PAGE_SIZE = 4
PROMPT_LEN = 3


def word_id(word: str) -> int:
    return zlib.crc32(word.encode()) % 500 + 1  # never PAD


def tokenize(text: str):
    """One id per whitespace-separated word."""
    matches = list(re.finditer(r"\S+", text))
    return [word_id(m.group()) for m in matches], [m.span() for m in matches]


def make_prompt_builder(prompt_len: int = PROMPT_LEN):
    def build_prompt(request: Request) -> PromptTokens:
        first = request.feed.token_ids[0]  # the scheduler only builds a prompt once there is text
        text_ids = (-1,) * (prompt_len - 1) + (first,)
        codec_ids = tuple(range(900, 900 + prompt_len))
        return PromptTokens(text_ids, codec_ids, num_text_tokens_used=1)

    return build_prompt


def make_spec(eos_code: int | None = None, incremental: bool = True, default_max_frames: int = 1000) -> ProgramSpec:
    return ProgramSpec(num_codebooks=K, chunk_frames=CHUNK, first_chunk_frames=FIRST_CHUNK,
                       consumes_text_incrementally=incremental, text_pad_id=PAD, eos_code=eos_code,
                       frames_per_text_token=FPTT, default_max_frames=default_max_frames)


def make_scheduler(num_pages: int = 64, num_slots: int = 8, *, eos_code: int | None = None, incremental: bool = True,
                   max_batch_size: int = 64, max_seq_len: int = 4096, max_prefill_tokens: int = 4096,
                   prompt_len: int = PROMPT_LEN, default_max_frames: int = 1000, page_size: int = PAGE_SIZE
                   ) -> BaseScheduler:
    return BaseScheduler(make_spec(eos_code, incremental, default_max_frames), PagePool(num_pages, page_size),
                         SlotPool(num_slots), make_prompt_builder(prompt_len), tokenize,
                         SchedulerConfig(max_batch_size=max_batch_size, max_seq_len=max_seq_len,
                                         max_prefill_tokens=max_prefill_tokens))


class FakeRunner:
    """Runs plans like the engine does: schedule, make up one frame per LM request, update_lm, then
    complete every codec job. Checks the plan's invariants and the pools after every step."""

    def __init__(self, sched: BaseScheduler, eos_at: dict[str, int] | None = None) -> None:
        self.sched = sched
        self.now = 0
        self.eos_at = eos_at or {}  # request id -> index of the generated frame whose code 0 is EOS
        self.generated: dict[str, list[tuple[int, ...]]] = defaultdict(list)  # every frame made, EOS included
        self.text_fed: dict[str, list[int]] = defaultdict(list)  # text-track input of each decode step
        self.jobs: dict[str, list[tuple[CodecJob, tuple]]] = defaultdict(list)  # job and its frames at cut time
        self.plans: list[StepPlan] = []

    def frame(self, request: Request) -> tuple[int, ...]:
        made = self.generated[request.request_id]
        i = len(made)
        code0 = EOS if self.eos_at.get(request.request_id) == i else 100 + i
        frame = (code0,) + tuple(1000 * (k + 1) + i for k in range(K - 1))
        made.append(frame)
        return frame

    def plan(self) -> StepPlan:
        """Schedules a step, checks the plan and records its inputs."""
        self.now += 1_000
        plan = self.sched.schedule(self.now)
        self.plans.append(plan)
        self.check_plan(plan)
        for item in plan.decode:
            self.text_fed[item.request.request_id].append(item.text_id)
        for job in plan.codec:
            frames = tuple(job.request.frames[job.first_frame: job.first_frame + job.num_frames])
            self.jobs[job.request.request_id].append((job, frames))
        return plan

    def complete(self, plan: StepPlan) -> None:
        for job in plan.codec:
            self.sched.complete_codec(job, self.now)
        self.sched.check_integrity()

    def step(self) -> StepPlan:
        plan = self.plan()
        if plan.lm_requests:
            self.sched.update_lm(plan, [self.frame(r) for r in plan.lm_requests])
        self.complete(plan)
        return plan

    def check_plan(self, plan: StepPlan) -> None:
        page_size = self.sched.pages.page_size
        lm = plan.lm_requests
        assert len({id(r) for r in lm}) == len(lm), "a request twice in one LM batch"
        assert len(lm) <= self.sched.config.max_batch_size
        for request in plan.prefill:
            assert request.state is S.RUNNING
            assert request.slot is not None
            assert request.num_tokens == len(request.prompt)  # booked when planned
            assert len(request.pages) * page_size >= len(request.prompt)
        for item in plan.decode:
            request = item.request
            assert request.state is S.RUNNING
            assert request.slot is not None
            assert item.position == request.num_tokens - 1  # booked when planned
            assert len(request.pages) * page_size >= item.position + 1, "decode without a page for its token"
        ids = [job.request.request_id for job in plan.codec]
        assert len(ids) == len(set(ids)), "more than one codec job for a request in one plan"
        for job in plan.codec:
            assert job.num_frames >= 0
            assert job.first_frame + job.num_frames <= job.request.num_frames, "chunk of frames not generated"
            assert job.request.state in (S.RUNNING, S.STARVED, S.DRAINING)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def run_until_done(self, limit: int = 200) -> int:
        for n in range(limit):
            if not self.sched.requests:
                return n
            self.step()
        raise AssertionError(f"not done after {limit} steps: {[(r.request_id, r.state) for r in self.sched.requests.values()]}")

    def chunk_sizes(self, request_id: str) -> list[int]:
        return [job.num_frames for job, _ in self.jobs[request_id]]

    def assert_chunks_contiguous(self, request: Request, exact_sizes: bool = True) -> None:
        jobs = self.jobs[request.request_id]
        assert jobs, "no chunks"
        position = 0
        for index, (job, frames) in enumerate(jobs):
            assert job.request is request
            assert job.chunk_index == index
            assert job.first_frame == position
            assert job.is_last == (index == len(jobs) - 1)
            assert list(frames) == request.frames[position: position + job.num_frames]
            position += job.num_frames
        assert position == request.num_frames, "chunks do not cover every frame"
        if len(jobs) > 1 and exact_sizes:
            assert jobs[0][0].num_frames == FIRST_CHUNK
            assert all(job.num_frames == CHUNK for job, _ in jobs[1:-1])
        assert 0 <= jobs[-1][0].num_frames <= (FIRST_CHUNK if len(jobs) == 1 else CHUNK)


def add(sched: BaseScheduler, rid: str, text: str | None = None, final: bool = True, arrival_ns: int | None = None,
        **params) -> Request:
    request = sched.add(rid, "voice", SamplingParams(**params), arrival_ns if arrival_ns is not None else len(sched.requests))
    if text is not None:
        sched.append_text(rid, text, final)
    return request


def assert_clean(sched: BaseScheduler) -> None:
    sched.check_integrity()
    assert not sched.requests
    assert sched.pages.num_free == sched.pages.num_pages
    assert sched.pages.num_used == 0
    assert sched.slots.num_free == sched.slots.num_slots
    assert not sched.has_work()
    assert sched.pop_failures() == []


def expected_chunk_sizes(total: int) -> list[int]:
    """Sizes when generation ends by a rule that keeps the last frame (length, pinned, max_frames)."""
    if total <= FIRST_CHUNK:
        return [total]
    rest = total - FIRST_CHUNK
    full = (rest - 1) // CHUNK
    return [FIRST_CHUNK] + [CHUNK] * full + [rest - CHUNK * full]


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def words(n: int) -> str:
    return " ".join(WORDS[:n])


# ---- policies ------------------------------------------------------------------------------------------------


def test_policy_lookup():
    assert policy_class("base") is BaseScheduler
    assert POLICIES["base"] is BaseScheduler
    from voxrt.engine.errors import InvalidParamsError
    with pytest.raises(InvalidParamsError, match="nope"):
        policy_class("nope")


def test_duplicate_live_request_id_is_refused():
    sched = make_scheduler()
    add(sched, "a")
    with pytest.raises(ValueError):
        add(sched, "a")


def test_program_spec_validates_chunk_sizes():
    with pytest.raises(ValueError):
        ProgramSpec(K, chunk_frames=4, first_chunk_frames=5, consumes_text_incrementally=True, text_pad_id=0,
                    eos_code=None, frames_per_text_token=2.0, default_max_frames=10)
    with pytest.raises(ValueError):
        ProgramSpec(K, chunk_frames=4, first_chunk_frames=0, consumes_text_incrementally=True, text_pad_id=0,
                    eos_code=None, frames_per_text_token=2.0, default_max_frames=10)


# ---- admission -----------------------------------------------------------------------------------------------


def test_request_without_text_waits():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r")
    for _ in range(3):
        plan = runner.step()
        assert plan.is_empty
        assert r.state is S.WAITING
    assert not sched.has_work()
    assert sched.pages.num_used == 0 and sched.slots.num_free == sched.slots.num_slots

    sched.append_text("r", "Hel", False)  # a partial word is no token yet
    plan = runner.step()
    assert plan.is_empty and r.state is S.WAITING
    assert not sched.has_work()

    sched.append_text("r", "lo ", False)
    assert sched.has_work()
    plan = runner.step()
    assert plan.prefill == [r] and plan.decode == []
    assert r.state is S.RUNNING
    assert r.slot is not None and len(r.pages) == 1
    assert r.num_tokens == PROMPT_LEN and r.num_frames == 1 and r.num_text_consumed == 1


def test_final_text_is_prefilled_then_decoded_with_its_text_tokens_then_pads():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", words(4))
    plan = runner.step()
    assert plan.prefill == [r] and not plan.decode
    plan = runner.step()
    assert not plan.prefill and [item.request for item in plan.decode] == [r]
    assert plan.decode[0].position == PROMPT_LEN
    assert plan.decode[0].text_id == r.feed.token_ids[1]
    runner.run_until_done()
    assert r.state is S.FINISHED
    assert r.finish_reason == "length"
    assert r.num_frames == 8
    assert r.frames == runner.generated["r"]
    # The prompt used token 0; decode steps feed tokens 1..3 then the pad id.
    assert runner.text_fed["r"] == r.feed.token_ids[1:] + [PAD] * 4
    assert r.frame_text_index == [1, 2, 3, 4, 4, 4, 4, 4]
    assert r.first_chunk_ns is not None
    assert_clean(sched)


def test_segment_program_waits_for_final_text_and_decodes_pads():
    def build_whole_prompt(request: Request) -> PromptTokens:  # a segment program reads all the text at once
        ids = tuple(request.feed.token_ids)
        return PromptTokens((-1,) + ids, (900,) + (-1,) * len(ids), num_text_tokens_used=len(ids))

    sched = BaseScheduler(make_spec(incremental=False), PagePool(64, PAGE_SIZE), SlotPool(8), build_whole_prompt,
                          tokenize, SchedulerConfig())
    runner = FakeRunner(sched)
    r = add(sched, "r", "one two ", final=False)
    runner.run(3)
    assert r.state is S.WAITING
    sched.append_text("r", "three", True)
    plan = runner.step()
    assert plan.prefill == [r]
    assert len(r.prompt) == 4 and r.num_text_consumed == 3
    runner.run_until_done()
    assert r.finish_reason == "length" and r.num_frames == 6
    assert runner.text_fed["r"] == [PAD] * 5
    assert_clean(sched)


def test_max_batch_size_limits_admission():
    sched = make_scheduler(max_batch_size=2)
    runner = FakeRunner(sched)
    reqs = [add(sched, f"r{i}", words(2)) for i in range(5)]
    plan = runner.step()
    assert plan.prefill == reqs[:2]
    max_live = 0
    for _ in range(200):
        if not sched.requests:
            break
        runner.step()
        live = [r for r in reqs if r.state in (S.RUNNING, S.STARVED)]
        assert len(live) <= 2
        max_live = max(max_live, len(live))
    assert max_live == 2
    assert all(r.state is S.FINISHED and r.finish_reason == "length" and r.num_frames == 4 for r in reqs)
    # Admission is first come, first served.
    admitted_order = [r.request_id for plan in runner.plans for r in plan.prefill]
    assert admitted_order == [f"r{i}" for i in range(5)]
    assert_clean(sched)


def test_no_free_slot_defers_admission():
    sched = make_scheduler(num_slots=1)
    runner = FakeRunner(sched)
    a = add(sched, "a", words(1))
    b = add(sched, "b", words(1))
    runner.step()
    assert a.state is S.RUNNING and b.state is S.WAITING
    runner.run_until_done()
    assert a.state is S.FINISHED and b.state is S.FINISHED
    assert_clean(sched)


def test_prefill_token_budget_defers_the_second_prompt():
    sched = make_scheduler(max_prefill_tokens=PROMPT_LEN)  # one prompt per step
    runner = FakeRunner(sched)
    a = add(sched, "a", words(1))
    b = add(sched, "b", words(1))
    plan = runner.step()
    assert plan.prefill == [a] and b.state is S.WAITING
    plan = runner.step()
    assert plan.prefill == [b]
    runner.run_until_done()
    assert_clean(sched)


def test_prompt_larger_than_the_whole_pool_fails_with_capacity_at_once():
    sched = make_scheduler(num_pages=2, prompt_len=9)  # 9 tokens need 3 pages of 4
    runner = FakeRunner(sched)
    r = add(sched, "r", words(3))
    plan = runner.step()
    assert plan.is_empty
    assert r.state is S.FAILED
    failures = sched.pop_failures()
    assert [(f.request, f.code) for f in failures] == [(r, "capacity")]
    assert "exceeds" in failures[0].message
    assert r.error == failures[0].message
    assert_clean(sched)


def test_prompt_longer_than_max_seq_len_fails_with_capacity():
    sched = make_scheduler(max_seq_len=2)
    runner = FakeRunner(sched)
    r = add(sched, "r", words(2))
    runner.step()
    assert r.state is S.FAILED
    assert [f.code for f in sched.pop_failures()] == ["capacity"]
    assert_clean(sched)


# ---- incremental text ----------------------------------------------------------------------------------------


def test_incremental_text_starves_and_resumes():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", "alpha beta ", final=False)
    plan = runner.step()
    assert plan.prefill == [r]
    plan = runner.step()
    assert [i.text_id for i in plan.decode] == [word_id("beta")]
    # Text ran out before it was final: starved, holds its pages and slot, not scheduled.
    plan = runner.step()
    assert r.state is S.STARVED
    assert not plan.decode and not plan.prefill
    assert r.slot is not None and r.pages
    for _ in range(3):
        plan = runner.step()
        assert not plan.decode and not plan.prefill
        assert r.state is S.STARVED
    assert r.num_frames == 2
    assert not sched.has_work()
    assert sched.pop_failures() == []

    sched.append_text("r", "gam", False)  # partial word: still nothing to feed
    assert r.state is S.STARVED
    plan = runner.step()
    assert not plan.decode and r.state is S.STARVED

    sched.append_text("r", "ma ", False)
    assert r.state is S.RUNNING
    plan = runner.step()
    assert [(i.request, i.text_id) for i in plan.decode] == [(r, word_id("gamma"))]
    runner.step()
    assert r.state is S.STARVED

    sched.append_text("r", "", True)  # final: pads until the length rule
    assert r.state is S.RUNNING
    runner.run_until_done()
    assert r.state is S.FINISHED and r.finish_reason == "length"
    assert r.num_frames == math.ceil(FPTT * 3)
    assert runner.text_fed["r"] == [word_id("beta"), word_id("gamma"), PAD, PAD, PAD]
    # a starved request decodes the frames it has instead of holding them for more text
    runner.assert_chunks_contiguous(r, exact_sizes=False)
    assert runner.chunk_sizes("r") == [FIRST_CHUNK, 1, 3]
    assert_clean(sched)


def test_starved_request_does_not_block_others():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    slow = add(sched, "slow", "one ", final=False)
    fast = add(sched, "fast", words(3))
    runner.run(3)
    assert slow.state is S.STARVED
    runner.run(20)
    assert fast.state is S.FINISHED and fast.num_frames == 6
    assert slow.state is S.STARVED
    sched.append_text("slow", "two", True)
    runner.run_until_done()
    assert slow.state is S.FINISHED and slow.num_frames == 4
    assert_clean(sched)


# ---- stop rules ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_words", [1, 2, 3, 4, 5, 6])
def test_final_text_ends_by_the_length_rule(num_words):
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", words(num_words))
    runner.run_until_done()
    assert r.state is S.FINISHED
    assert r.finish_reason == "length"
    assert r.num_frames == math.ceil(FPTT * num_words)
    runner.assert_chunks_contiguous(r)
    assert runner.chunk_sizes("r") == expected_chunk_sizes(r.num_frames)
    assert_clean(sched)


def test_chunk_cutting_first_then_full_then_remainder():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", words(4))  # 8 frames: 2, 4, then the remaining 2
    runner.run_until_done()
    jobs = [job for job, _ in runner.jobs["r"]]
    assert [(j.chunk_index, j.first_frame, j.num_frames, j.is_last) for j in jobs] == [
        (0, 0, 2, False), (1, 2, 4, False), (2, 6, 2, True)]
    runner.assert_chunks_contiguous(r)
    # A chunk is cut as soon as its frames exist: the first one right after frame 2.
    first_cut = next(i for i, p in enumerate(runner.plans) if p.codec)
    assert first_cut == 2  # steps 0 and 1 made frames 1 and 2
    assert_clean(sched)


def test_many_requests_chunks_are_contiguous_and_in_order():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    reqs = [add(sched, f"r{i}", words(1 + i % 5), final=(i % 2 == 0)) for i in range(8)]
    for step in range(300):
        if not sched.requests:
            break
        if step == 10:
            for i in range(1, 8, 2):
                sched.append_text(f"r{i}", " more words", True)
        runner.step()
    assert not sched.requests
    for i, r in enumerate(reqs):
        assert r.state is S.FINISHED
        runner.assert_chunks_contiguous(r, exact_sizes=(i % 2 == 0))  # starved ones cut partial chunks
        assert r.num_frames == math.ceil(FPTT * len(r.feed.token_ids))
    assert_clean(sched)


@pytest.mark.parametrize(("eos_index", "sizes"), [
    (0, [0]),  # EOS on the prefill frame: nothing to say, one empty last chunk
    (1, [1]),
    (2, [2, 0]),
    (4, [2, 2]),
    (5, [2, 3]),
    (6, [2, 4, 0]),
    (7, [2, 4, 1]),
])
def test_eos_code_ends_with_stop_and_is_not_a_frame(eos_index, sizes):
    sched = make_scheduler(eos_code=EOS)
    runner = FakeRunner(sched, eos_at={"r": eos_index})
    r = add(sched, "r", words(10))  # the length rule would allow 20 frames
    runner.run_until_done()
    assert r.state is S.FINISHED
    assert r.finish_reason == "stop"
    assert r.num_frames == eos_index
    assert len(runner.generated["r"]) == eos_index + 1
    assert runner.generated["r"][-1][0] == EOS
    assert r.frames == runner.generated["r"][:-1]
    assert all(frame[0] != EOS for frame in r.frames)
    assert len(r.frame_text_index) == r.num_frames
    runner.assert_chunks_contiguous(r)
    assert runner.chunk_sizes("r") == sizes
    assert all(EOS not in (f[0] for f in frames) for _, frames in runner.jobs["r"])
    assert_clean(sched)


def test_eos_code_configured_but_never_emitted_falls_back_to_length():
    sched = make_scheduler(eos_code=EOS)
    runner = FakeRunner(sched)
    r = add(sched, "r", words(2))
    runner.run_until_done()
    assert r.finish_reason == "length" and r.num_frames == 4
    assert_clean(sched)


@pytest.mark.parametrize(("num_words", "pinned"), [(1, 7), (5, 3), (2, 4), (3, 1)])
def test_pinned_num_frames_overrides_the_length_rule(num_words, pinned):
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", words(num_words), num_frames=pinned)
    runner.run_until_done()
    assert r.state is S.FINISHED
    assert r.finish_reason == "pinned"
    assert r.num_frames == pinned
    runner.assert_chunks_contiguous(r)
    assert runner.chunk_sizes("r") == expected_chunk_sizes(pinned)
    assert_clean(sched)


def test_pinned_num_frames_suppresses_eos():
    sched = make_scheduler(eos_code=EOS)
    runner = FakeRunner(sched, eos_at={"r": 1})
    r = add(sched, "r", words(1), num_frames=5)
    runner.run_until_done()
    assert r.finish_reason == "pinned"
    assert r.num_frames == 5
    assert r.frames == runner.generated["r"]  # the EOS-coded frame is kept: stop rules are off
    assert_clean(sched)


def test_pinned_request_still_waits_for_incremental_text():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", "one ", final=False, num_frames=4)
    runner.run(4)
    assert r.state is S.STARVED and r.num_frames == 1
    sched.append_text("r", "", True)
    runner.run_until_done()
    assert r.finish_reason == "pinned" and r.num_frames == 4
    assert_clean(sched)


def test_max_frames_param_caps_generation():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", words(6), max_frames=3)
    runner.run_until_done()
    assert r.finish_reason == "max_frames" and r.num_frames == 3
    runner.assert_chunks_contiguous(r)
    assert_clean(sched)


def test_default_max_frames_caps_generation():
    sched = make_scheduler(default_max_frames=5)
    runner = FakeRunner(sched)
    r = add(sched, "r", words(6))
    runner.run_until_done()
    assert r.finish_reason == "max_frames" and r.num_frames == 5
    assert_clean(sched)


def test_max_seq_len_ends_generation():
    sched = make_scheduler(max_seq_len=PROMPT_LEN + 3)
    runner = FakeRunner(sched)
    r = add(sched, "r", words(6))
    runner.run_until_done()
    assert r.finish_reason == "max_frames"
    assert r.num_frames == 4  # the prompt plus 3 fed-back frames fill max_seq_len; the 4th is not fed back
    assert r.num_tokens == PROMPT_LEN + 3
    runner.assert_chunks_contiguous(r)
    assert_clean(sched)


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_final_text_finishes_empty_with_one_empty_last_chunk(text):
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", text)
    plan = runner.step()
    assert not plan.prefill and not plan.decode
    assert len(plan.codec) == 1
    job = plan.codec[0]
    assert (job.request, job.first_frame, job.num_frames, job.chunk_index, job.is_last) == (r, 0, 0, 0, True)
    assert r.state is S.FINISHED
    assert r.finish_reason == "empty"
    assert r.num_frames == 0
    assert runner.plans[0].codec == [job]
    assert_clean(sched)


def test_empty_final_text_after_submit_without_text():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r")
    runner.run(2)
    sched.append_text("r", "", True)
    runner.run_until_done()
    assert r.finish_reason == "empty"
    assert runner.chunk_sizes("r") == [0]
    assert_clean(sched)


# ---- cancel --------------------------------------------------------------------------------------------------


def _advance_to(runner: FakeRunner, request: Request, state: RequestState, limit: int = 50) -> None:
    for _ in range(limit):
        if request.state is state:
            return
        runner.step()
    raise AssertionError(f"{request.request_id} never reached {state} (is {request.state})")


@pytest.mark.parametrize("where", ["waiting-no-text", "waiting-no-slot", "running", "starved", "draining"])
def test_cancel_returns_all_pages_and_slots(where):
    sched = make_scheduler(num_pages=16, num_slots=2)
    runner = FakeRunner(sched)
    other = add(sched, "other", words(3))
    if where == "waiting-no-text":
        r = add(sched, "r")
        runner.run(2)
        assert r.state is S.WAITING
    elif where == "waiting-no-slot":
        blocker = add(sched, "blocker", words(3))
        r = add(sched, "r", words(3))
        runner.step()
        assert r.state is S.WAITING and sched.slots.num_free == 0
        assert sched.cancel("blocker") is blocker
    elif where == "running":
        r = add(sched, "r", words(6))
        runner.run(3)
        assert r.state is S.RUNNING and r.pages and r.slot is not None
    elif where == "starved":
        r = add(sched, "r", "a b c d e ", final=False)
        _advance_to(runner, r, S.STARVED)
        assert r.pages and r.slot is not None
    else:
        r = add(sched, "r", words(6))  # 12 frames, longer than `other`
        _advance_to(runner, r, S.DRAINING)
        assert not r.pages and r.slot is not None  # pages return at once, the slot when the audio is done
    assert sched.cancel("r") is r
    assert r.state is S.CANCELLED
    assert r.pages == [] and r.slot is None
    assert "r" not in sched.requests
    sched.check_integrity()
    assert sched.cancel("r") is None  # already ended
    runner.run_until_done()
    assert other.state is S.FINISHED
    assert_clean(sched)


def test_cancel_unknown_request_returns_none():
    sched = make_scheduler()
    assert sched.cancel("nope") is None


def test_cancel_while_the_step_runs_is_ignored_by_the_results():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    a = add(sched, "a", words(3))
    b = add(sched, "b", words(3))
    runner.run(2)
    plan = sched.schedule(runner.now + 1)
    assert a in plan.lm_requests and any(job.request is a for job in plan.codec)
    sched.cancel("a")
    sched.update_lm(plan, [runner.frame(r) for r in plan.lm_requests])
    for job in plan.codec:
        sched.complete_codec(job, runner.now + 1)
    sched.check_integrity()
    assert a.state is S.CANCELLED and a.num_frames == 2  # the frame made for it after cancel is dropped
    runner.run_until_done()
    assert b.state is S.FINISHED
    assert_clean(sched)


def test_cancel_after_the_last_chunk_was_cut():
    sched = make_scheduler()
    runner = FakeRunner(sched)
    r = add(sched, "r", words(1))
    _advance_to(runner, r, S.DRAINING)
    plan = sched.schedule(runner.now + 1)
    (job,) = plan.codec
    assert job.is_last
    sched.cancel("r")
    sched.complete_codec(job, runner.now + 1)
    assert r.state is S.CANCELLED
    assert_clean(sched)


# ---- KV exhaustion -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("newest_added_first", [False, True])
def test_kv_exhaustion_fails_the_newest_and_the_other_finishes(newest_added_first):
    # 2 pages of 4 tokens; each 3-token prompt takes one page. After one decode both hold 4 tokens and need
    # a second page: none is free, so the newest (by arrival) is failed and the other goes on.
    sched = make_scheduler(num_pages=2)
    runner = FakeRunner(sched)
    if newest_added_first:
        new = add(sched, "new", words(3), arrival_ns=2)
        old = add(sched, "old", words(3), arrival_ns=1)
    else:
        old = add(sched, "old", words(3), arrival_ns=1)
        new = add(sched, "new", words(3), arrival_ns=2)
    plan = runner.step()
    assert {r.request_id for r in plan.prefill} == {"old", "new"}
    assert sched.pages.num_free == 0
    runner.step()
    assert old.num_tokens == new.num_tokens == 4
    assert sched.pop_failures() == []
    plan = runner.step()  # both blocked on a page
    assert not plan.prefill and not plan.decode
    failures = sched.pop_failures()
    assert [(f.request, f.code) for f in failures] == [(new, "capacity")]
    assert "KV cache exhausted" in failures[0].message
    assert new.state is S.FAILED and new.pages == [] and new.slot is None
    assert old.state is S.RUNNING
    assert sched.pop_failures() == []  # popped once
    runner.run_until_done()
    assert old.state is S.FINISHED and old.finish_reason == "length" and old.num_frames == 6
    runner.assert_chunks_contiguous(old)
    assert_clean(sched)


def test_single_request_that_outgrows_the_pool_fails_instead_of_hanging():
    sched = make_scheduler(num_pages=1)
    runner = FakeRunner(sched)
    r = add(sched, "r", words(6))
    runner.run(5)
    assert r.state is S.FAILED
    assert [f.code for f in sched.pop_failures()] == ["capacity"]
    assert_clean(sched)


def test_no_request_is_failed_for_capacity_while_pages_are_free():
    """BUG (voxrt/engine/sched/base_policy.py `schedule`, with scheduler.py `next_decode`): in the decode
    loop an older request A finds no free page and is put in `blocked`; a later request B in the same loop
    reaches max_seq_len and `_end_generation` returns its pages. Nothing was prefilled or decoded, so
    `fail_one_blocked_on_pages([A])` fails A with "KV cache exhausted ... all in use" although B's pages
    are free by then. A should simply wait one step and get a page."""
    sched = make_scheduler(num_pages=3, max_seq_len=8)
    runner = FakeRunner(sched)
    a = add(sched, "a", arrival_ns=1)  # added first (first in the running order), text comes later
    b = add(sched, "b", words(10), arrival_ns=2)  # runs to max_seq_len: 8 tokens = 2 pages
    runner.run(4)
    sched.append_text("a", words(10), True)
    runner.run(2)  # A prefilled (1 page, the last free one), then one decode: 4 tokens, needs a 2nd page
    assert a.num_tokens == 4 and len(a.pages) == 1
    assert b.num_tokens == 8 and len(b.pages) == 2
    assert sched.pages.num_free == 0
    runner.step()  # A waits for a page; B ends at max_seq_len and frees 2 pages
    assert b.finish_reason == "max_frames" and b.pages == []
    failures = sched.pop_failures()
    assert failures == [], (f"{[(f.request.request_id, f.code, f.message) for f in failures]}: failed in the "
                            f"same step in which B returned its 2 pages to the pool")
    runner.run_until_done()
    assert a.state is S.FINISHED
    assert_clean(sched)


def test_prompt_over_the_prefill_budget_is_not_left_waiting_forever():
    """BUG (voxrt/engine/sched/scheduler.py `try_admit`): a prompt longer than `max_prefill_tokens` (but
    within max_seq_len and the pool) is never admitted (`num_tokens > token_budget` returns 0 every step)
    and never failed, so the request waits forever with `has_work()` true: a silent hang. It should be
    admitted alone in a step or failed with a typed error."""
    sched = make_scheduler(max_prefill_tokens=PROMPT_LEN - 1)
    runner = FakeRunner(sched)
    r = add(sched, "r", words(2))
    runner.run(20)
    failures = sched.pop_failures()
    assert r.state is not S.WAITING or failures, (
        f"prompt of {PROMPT_LEN} tokens with max_prefill_tokens={PROMPT_LEN - 1}: still WAITING after 20 steps, "
        f"no failure reported, has_work()={sched.has_work()}")


def test_chunk_schedule_grows_from_the_first_chunk_and_codec_sizes_cover_starved_cuts():
    from voxrt.engine.sched.plan import chunk_schedule, codec_sizes

    assert chunk_schedule(2, 25) == [2, 4, 8, 16, 25]
    assert chunk_schedule(2, 10) == [2, 4, 8, 10]
    assert chunk_schedule(3, 3) == [3]
    assert codec_sizes(2, 25) == [1, 2, 4, 8, 16, 25]
    assert codec_sizes(4, 25) == [1, 2, 4, 8, 16, 25]
    assert codec_sizes(1, 4) == [1, 2, 4]
    spec = ProgramSpec(num_codebooks=K, chunk_frames=25, first_chunk_frames=2, consumes_text_incrementally=True,
                       text_pad_id=0, eos_code=None, frames_per_text_token=None, default_max_frames=100)
    for first, most in [(2, 25), (1, 25), (3, 25), (2, 10), (4, 4)]:  # frames cut so far -> the schedule
        other = ProgramSpec(num_codebooks=K, chunk_frames=most, first_chunk_frames=first,
                            consumes_text_incrementally=True, text_pad_id=0, eos_code=None,
                            frames_per_text_token=None, default_max_frames=100)
        sizes, cut = [], 0
        for _ in range(8):
            sizes.append(other.next_chunk_size(cut))
            cut += sizes[-1]
        schedule = chunk_schedule(first, most)
        assert sizes == schedule + [schedule[-1]] * (8 - len(schedule))
    # after a chunk cut short the next one follows the audio cut so far: 2 + 2 (short) -> 4, then 8, 16, 25
    assert [spec.next_chunk_size(n) for n in (4, 8, 16, 32)] == [4, 8, 16, 25]
    assert [spec.largest_codec_size(n) for n in (1, 3, 7, 15, 24, 40)] == [1, 2, 4, 8, 16, 25]
    sizes = codec_sizes(spec.first_chunk_frames, spec.chunk_frames)  # the lookup table is the max rule
    assert [spec.largest_codec_size(n) for n in range(1, 80)] == [max(x for x in sizes if x <= n) for n in range(1, 80)]
    with pytest.raises(ValueError):
        spec.largest_codec_size(0)


# ---- the engine's asynchronous loop: results a step late -------------------------------------------------------


class LaggedRunner(FakeRunner):
    """Runs plans as the engine's asynchronous loop does: step N's frames update the scheduler after step N+1
    was planned (the GPU runs N+1 while the host reads N's results). Frames are made at launch, so a frame
    planned after the stopping one is made and must be dropped."""

    def __init__(self, sched: BaseScheduler, eos_at: dict[str, int] | None = None) -> None:
        super().__init__(sched, eos_at)
        self.pending: tuple[StepPlan, list[tuple[int, ...]]] | None = None

    def step(self) -> StepPlan:
        plan = self.plan()
        launched = (plan, [self.frame(r) for r in plan.lm_requests]) if plan.lm_requests else None
        if self.pending is not None:
            self.sched.update_lm(*self.pending)
        self.pending = launched
        self.complete(plan)
        return plan

    def run_until_done(self, limit: int = 300) -> int:
        for n in range(limit):
            if not self.sched.requests and self.pending is None:
                return n
            self.step()
        raise AssertionError(f"not done after {limit} steps: {[(r.request_id, r.state) for r in self.sched.requests.values()]}")


def _scenario(name: str, runner_cls):
    """A mixed set of requests; returns (scheduler, runner, requests)."""
    if name == "eos":
        sched = make_scheduler(eos_code=EOS)
        runner = runner_cls(sched, eos_at={f"r{i}": i for i in range(8)})
        reqs = [add(sched, f"r{i}", words(8)) for i in range(8)]
    elif name == "pinned":
        sched = make_scheduler(eos_code=EOS)
        runner = runner_cls(sched, eos_at={"r1": 1})
        reqs = [add(sched, f"r{i}", words(1 + i), num_frames=1 + 2 * i) for i in range(6)]
    elif name == "caps":
        sched = make_scheduler(max_seq_len=PROMPT_LEN + 5, default_max_frames=7)
        runner = runner_cls(sched)
        reqs = [add(sched, "a", words(10)), add(sched, "b", words(10), max_frames=3), add(sched, "c", words(2))]
    else:  # "incremental": text arriving while requests run, some starving
        sched = make_scheduler()
        runner = runner_cls(sched)
        reqs = [add(sched, f"r{i}", words(1 + i % 5), final=(i % 2 == 0)) for i in range(8)]
    return sched, runner, reqs


@pytest.mark.parametrize("name", ["eos", "pinned", "caps", "incremental"])
def test_results_a_step_late_give_the_same_frames(name):
    """The asynchronous loop changes when the scheduler sees frames, never which frames a request keeps, its
    stop reason, the text each frame had read, or its chunks; and every page and slot returns."""
    results = []
    for runner_cls in (FakeRunner, LaggedRunner):
        sched, runner, reqs = _scenario(name, runner_cls)
        for step in range(300):
            if not sched.requests and getattr(runner, "pending", None) is None:
                break
            if name == "incremental" and step == 10:
                for i in range(1, 8, 2):
                    sched.append_text(f"r{i}", " more words", True)
            runner.step()
        for r in reqs:
            assert r.state is S.FINISHED, (runner_cls.__name__, r.request_id, r.state)
            runner.assert_chunks_contiguous(r, exact_sizes=False)
            assert len(r.frame_text_index) == r.num_frames
        assert_clean(sched)
        results.append([(r.request_id, r.finish_reason, r.frames, r.frame_text_index) for r in reqs])
    assert results[0] == results[1]


def test_pinned_lengths_plan_no_frame_past_the_pin_with_results_late():
    """A step in flight that makes a pinned request's last frame: the next plan leaves the request out
    instead of making a frame to drop."""
    sched = make_scheduler()
    runner = LaggedRunner(sched)
    r = add(sched, "r", words(5), num_frames=3)
    runner.run_until_done()
    assert r.finish_reason == "pinned" and r.num_frames == 3
    assert len(runner.generated["r"]) == 3  # no wasted step
    assert_clean(sched)


@pytest.mark.parametrize("when", ["prefill", "decode"])
def test_cancel_with_a_step_in_flight_returns_pages_and_slot_at_once(when):
    sched = make_scheduler(num_pages=16, num_slots=2)
    runner = LaggedRunner(sched)
    other = add(sched, "other", words(3))
    r = add(sched, "r", words(6))
    runner.step()  # both prefilled: the prefill is in flight
    if when == "decode":
        runner.run(3)
        assert any(item.request is r for item in runner.pending[0].decode)
    else:
        assert r in runner.pending[0].prefill
    assert sched.cancel("r") is r
    assert r.pages == [] and r.slot is None
    sched.check_integrity()
    frames = r.num_frames
    runner.run_until_done()
    assert r.num_frames == frames  # the frame in flight for it was dropped
    assert other.state is S.FINISHED
    assert_clean(sched)
