"""The engine core on the tiny model, in-process on the CPU: batching, streaming, cancel, failures, text."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from conftest import assert_pools_empty, drain, make_core, pcm, submit
from voxrt.engine.errors import (InvalidParamsError, ServerBusyError, UnknownModelError, UnknownVoiceError,
                                 error_from_code)
from voxrt.engine.messages import EngineConfig, RequestFailed
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import (CODEC_BATCH_32_MIN_BYTES, EngineCore, codec_batch_for_memory,
                                       default_max_codec_batch)
from voxrt.engine.sched.plan import chunk_schedule, codec_sizes
from voxrt.engine.sched.request import RequestState

TEXT = "Hello there, this is a test of the batching engine."
OTHERS = ["Another sentence, somewhat longer than the first one.", "Short one.", "Numbers like 3.50 are text.",
          "The quick brown fox.", "Jumps over the lazy dog, twice.", "A seventh request.", "And the eighth."]


def test_one_request_alone_equals_inside_a_batch_of_8(core):
    alone = submit(core, "alone", TEXT)
    chunks, failures = drain(core)
    assert not failures
    batch = [submit(core, "b0", TEXT)] + [submit(core, f"b{i + 1}", t) for i, t in enumerate(OTHERS)]
    chunks_b, failures_b = drain(core)
    assert not failures_b and len(batch) == 8
    assert alone.frames and batch[0].frames == alone.frames  # identical tokens
    np.testing.assert_allclose(pcm(chunks_b["b0"]), pcm(chunks["alone"]), rtol=0, atol=1e-5)  # identical audio
    assert_pools_empty(core)


def test_the_asynchronous_loop_gives_the_synchronous_loops_frames_and_audio():
    """--async-lm plans step N+1 before step N's frames reach the scheduler; the default loop waits for them.
    Same requests (greedy, one with incremental text, one sampled from the same seeded generator): same
    frames, same audio."""
    results = []
    for async_lm in (True, False):
        core = make_core(async_lm=async_lm)
        torch.manual_seed(1234)
        reqs = [submit(core, "a", TEXT), submit(core, "b", OTHERS[0]),
                submit(core, "c", "Streaming text ", final=False),
                submit(core, "d", OTHERS[3], params=SamplingParams())]
        for _ in range(6):
            core.step()
        core.append_text("c", "that ends here.", True)
        chunks, failures = drain(core)
        assert not failures
        results.append(([r.frames for r in reqs], [r.frame_text_index for r in reqs],
                        {rid: pcm(c) for rid, c in chunks.items()}))
        assert_pools_empty(core)
    (frames_a, text_a, audio_a), (frames_s, text_s, audio_s) = results
    assert frames_a == frames_s and all(frames_a)
    assert text_a == text_s
    assert audio_a.keys() == audio_s.keys()
    for rid in audio_a:
        np.testing.assert_array_equal(audio_a[rid], audio_s[rid])


def test_streamed_chunks_equal_whole_offline_decode(core):
    request = submit(core, "s", TEXT)
    chunks, _ = drain(core)
    indexes = [c.chunk_index for c in chunks["s"]]
    assert indexes == list(range(len(indexes))) and chunks["s"][-1].is_last
    sizes = [c.num_frames for c in chunks["s"]]
    schedule = chunk_schedule(core.info.first_chunk_frames, core.info.chunk_frames)  # 2, 4, 8, 10, 10, ...
    assert sizes[:-1] == [schedule[min(i, len(schedule) - 1)] for i in range(len(sizes) - 1)]
    # the last chunk is odd-sized (run padded to a captured size, its audio trimmed): still exact below
    assert sizes[-1] not in codec_sizes(core.info.first_chunk_frames, core.info.chunk_frames), sizes
    with torch.inference_mode():
        whole = core.program.decode_offline(torch.tensor([request.frames]))[0].numpy()
    streamed = pcm(chunks["s"])
    assert streamed.shape == whole.shape == (len(request.frames) * core.info.samples_per_frame,)
    np.testing.assert_allclose(streamed, whole, rtol=0, atol=1e-5)


def test_codec_state_slots_do_not_leak_between_requests(core):
    """A slot reused by a new request starts clean: its audio equals that of a fresh engine."""
    for i in range(3):
        submit(core, f"warm{i}", OTHERS[i])
    drain(core)
    request = submit(core, "reuse", TEXT)
    chunks, _ = drain(core)
    fresh = make_core()
    fresh_request = submit(fresh, "reuse", TEXT)
    fresh_chunks, _ = drain(fresh)
    assert request.frames == fresh_request.frames
    np.testing.assert_allclose(pcm(chunks["reuse"]), pcm(fresh_chunks["reuse"]), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("when", "async_lm"), [
    ("waiting", False), ("prefill", False), ("decoding", False), ("draining", False),
    ("prefill", True), ("in-flight", True), ("decoding", True), ("draining", True),
])  # "in-flight": only the asynchronous loop has a step in flight between steps
def test_cancel_returns_every_page_and_slot(when, async_lm):
    core = make_core(async_lm=async_lm)
    other = submit(core, "other", OTHERS[0])
    request = submit(core, "victim", TEXT)
    if when == "prefill":  # cancel arrives while the prefill launch is being queued
        real_launch = core.runner.launch_lm

        def launch_then_cancel(plan, **kw):
            launch = real_launch(plan, **kw)
            assert request in plan.prefill
            assert core.cancel("victim")
            return launch

        core.runner.launch_lm = launch_then_cancel
        try:
            core.step()
        finally:
            core.runner.launch_lm = real_launch
    elif when == "in-flight":  # between steps, with its decode step launched and its frame not yet seen
        for _ in range(4):
            core.step()
        assert core._lm_in_flight is not None and request in core._lm_in_flight.plan.lm_requests
    elif when == "decoding":
        for _ in range(5):
            core.step()
        assert request.state is RequestState.RUNNING and request.pages
    elif when == "draining":
        while request.state is not RequestState.DRAINING:
            core.step()
        assert request.slot is not None and not request.pages
    if when != "prefill":
        assert core.cancel("victim")
    assert request.state is RequestState.CANCELLED and not request.pages and request.slot is None
    assert not core.cancel("victim")  # idempotent
    chunks, failures = drain(core)
    assert "victim" not in failures and all(not c.is_last for c in chunks.get("victim", []))
    assert other.state is RequestState.FINISHED
    assert_pools_empty(core)


def test_a_step_that_raises_fails_its_requests_and_the_engine_goes_on():
    core = make_core()
    submit(core, "doomed", TEXT)
    real_launch = core.runner.launch_lm

    def boom(plan, **kw):
        raise RuntimeError("injected")

    core.runner.launch_lm = boom
    events = core.step()
    core.runner.launch_lm = real_launch
    assert [(e.request_id, e.code) for e in events] == [("doomed", "request_failed")]
    assert "injected" not in events[0].message  # internals never leak to clients
    assert core.num_failed_steps == 1
    assert_pools_empty(core)
    submit(core, "next", TEXT)
    chunks, failures = drain(core)
    assert not failures and chunks["next"][-1].is_last


def test_a_step_that_fails_on_the_device_after_its_launch_fails_its_requests():
    """An asynchronous failure (seen when the step's codes are awaited, a step later) fails that step's
    requests; the step launched meanwhile, for the same requests, is dropped with them."""
    core = make_core(async_lm=True)
    submit(core, "doomed", TEXT)
    other = submit(core, "later", TEXT)
    core.step()  # both prefilled, in flight
    real_launch = core.runner.launch_lm
    launched = []

    def failing_launch(plan, **kw):
        launch = real_launch(plan, **kw)
        launched.append(launch)

        def wait():
            raise RuntimeError("device fault")
        launch.wait = wait
        return launch

    core.runner.launch_lm = failing_launch
    core.step()  # launches step 2 (its wait will fail), finishes step 1 normally
    core.runner.launch_lm = real_launch
    events = core.step()  # finishes step 2: its failure fails both
    assert sorted((e.request_id, e.code) for e in events if isinstance(e, RequestFailed)) == [
        ("doomed", "request_failed"), ("later", "request_failed")]
    assert other.state is RequestState.FAILED
    drain(core)
    assert_pools_empty(core)
    submit(core, "next", TEXT)
    chunks, failures = drain(core)
    assert not failures and chunks["next"][-1].is_last


def test_a_codec_step_that_raises_fails_its_requests():
    core = make_core()
    submit(core, "doomed", TEXT)
    real = core.runner.run_codec
    core.runner.run_codec = lambda jobs: (_ for _ in ()).throw(RuntimeError("codec broke"))
    _, failures = drain(core)
    core.runner.run_codec = real
    assert failures["doomed"].code == "request_failed"
    assert_pools_empty(core)
    submit(core, "next", TEXT)
    chunks, failures = drain(core)
    assert not failures and chunks["next"][-1].is_last


def test_text_appended_to_a_running_request_is_consumed(core):
    request = submit(core, "inc", "Streaming text ", final=False)
    early = []
    for _ in range(20):
        early += core.step()
    assert request.state is RequestState.STARVED  # ran out of text before final: waits, does not end
    consumed = request.num_text_consumed
    frames = request.num_frames
    assert consumed == len(request.feed.token_ids)
    assert not core.has_work()  # a starved request costs no steps
    core.append_text("inc", "arrives in pieces, ", False)
    for _ in range(3):
        early += core.step()
    assert request.num_text_consumed > consumed and request.num_frames > frames
    core.append_text("inc", "and then it ends.", True)
    chunks, failures = drain(core)
    assert not failures
    assert request.state is RequestState.FINISHED and request.finish_reason == "length"
    assert request.num_text_consumed == len(request.feed.token_ids)
    spans = [c.text_span for c in early + chunks["inc"] if c.text_span]
    assert spans and spans[0][0] == 0 and max(end for _, end in spans) == len(request.feed.text.rstrip())
    assert not core.append_text("inc", "too late", True)  # dropped, not an error
    assert_pools_empty(core)


def test_empty_final_text_finishes_with_an_empty_last_chunk(core):
    submit(core, "empty", "", final=True)
    chunks, failures = drain(core)
    assert not failures
    assert len(chunks["empty"]) == 1 and chunks["empty"][0].is_last and chunks["empty"][0].num_samples == 0
    assert chunks["empty"][0].finish_reason == "empty"


def test_pinned_frames_set_the_length(core):
    request = submit(core, "pin", "Hi.", params=SamplingParams(greedy=True, num_frames=23))
    chunks, _ = drain(core)
    assert request.num_frames == 23 and chunks["pin"][-1].finish_reason == "pinned"
    assert len(pcm(chunks["pin"])) == 23 * core.info.samples_per_frame


def test_sampled_requests_differ_and_stay_in_range(core):
    a = submit(core, "s1", TEXT, params=SamplingParams())
    b = submit(core, "s2", TEXT, params=SamplingParams())
    drain(core)
    assert a.frames != b.frames
    assert all(0 <= code < core.program.cfg.codebook_size for frame in a.frames for code in frame)


def test_kv_exhaustion_waits_or_refuses_never_crashes():
    core = make_core(num_pages=12, page_size=4, max_batch_size=4)
    requests = [submit(core, f"r{i}", OTHERS[i % len(OTHERS)]) for i in range(6)]
    chunks, failures = drain(core)
    assert set(chunks) | set(failures) == {r.request_id for r in requests}
    assert all(f.code == "capacity" and "KV cache" in f.message for f in failures.values())
    assert any(c[-1].is_last for c in chunks.values())  # some finished despite the pressure
    assert_pools_empty(core)


def test_a_prompt_that_can_never_fit_is_refused():
    core = make_core(num_pages=1, page_size=4)
    submit(core, "big", TEXT)
    _, failures = drain(core)
    assert failures["big"].code == "capacity"
    assert_pools_empty(core)


def test_a_stream_not_started_within_the_admission_wait_is_refused_server_busy():
    """--max-admission-wait-ms through the engine: with one batch slot and no wait allowed, the second stream is
    refused (`server_busy`, the wire's code; the client side rebuilds `ServerBusyError`) while the first one is
    served whole, and nothing is left held."""
    core = make_core(max_batch_size=1, max_admission_wait_ms=0.0)
    submit(core, "first", TEXT)
    submit(core, "second", OTHERS[0])
    chunks, failures = drain(core)
    assert set(failures) == {"second"} and failures["second"].code == "server_busy"
    assert "server at capacity" in failures["second"].message
    assert chunks["first"][-1].is_last and "second" not in chunks
    assert_pools_empty(core)
    error = error_from_code(failures["second"].code, failures["second"].message)
    assert isinstance(error, ServerBusyError) and error.code == "server_busy"


def test_the_auto_admission_wait_is_off_on_the_cpu():
    """The "auto" bound (`voxrt serve`'s and `voxrt loadgen`'s default): 100 ms on CUDA, none on the CPU, so a slow
    CPU step never refuses a stream; EngineConfig's own default is off; an explicit bound reaches the scheduler as
    it is."""
    assert make_core(max_admission_wait_ms="auto").scheduler.config.max_admission_wait_ms is None
    assert make_core().scheduler.config.max_admission_wait_ms is None
    assert make_core(max_admission_wait_ms=250.0).scheduler.config.max_admission_wait_ms == 250.0
    assert make_core().scheduler.config.admission_text_wait_ms == 50.0
    assert make_core(admission_text_wait_ms=0.0).scheduler.config.admission_text_wait_ms == 0.0


def test_the_late_chunk_hold_reaches_the_deadline_policy_and_is_off_by_default(caplog):
    """EngineConfig.late_chunk_hold_ms reaches the scheduler (off by default); the engine says so in its log,
    and warns that another policy ignores it. A step that held admission counts in `held_steps`."""
    assert make_core().scheduler.config.late_chunk_hold_ms is None
    with caplog.at_level(logging.INFO, logger="voxrt.engine"):
        core = make_core(scheduler_type="deadline", late_chunk_hold_ms=100.0)
    assert core.scheduler.config.late_chunk_hold_ms == 100.0
    assert "no stream is admitted while half the chunks of the last 100 ms were late" in caplog.text
    assert core.stats(token=0).held_steps == 0
    with caplog.at_level(logging.WARNING, logger="voxrt.engine"):
        make_core(scheduler_type="base", late_chunk_hold_ms=100.0)
    assert "late_chunk_hold_ms=100 is ignored" in caplog.text
    caplog.clear()
    # "auto" (serve's and loadgen's default): off on the CPU, said once for the deadline policy, silent for others
    with caplog.at_level(logging.INFO, logger="voxrt.engine"):
        assert make_core(scheduler_type="deadline", late_chunk_hold_ms="auto").scheduler.config.late_chunk_hold_ms is None
    assert "late-chunk hold auto, on the CPU" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="voxrt.engine"):
        assert make_core(scheduler_type="base", late_chunk_hold_ms="auto").scheduler.config.late_chunk_hold_ms is None
    assert "late_chunk_hold" not in caplog.text and "late-chunk hold" not in caplog.text


def test_unknown_model_lists_the_available_ones():
    with pytest.raises(UnknownModelError, match="available: .*tiny"):
        EngineCore(EngineConfig(model="nope", device="cpu"))


def test_unknown_voice_and_bad_params_are_typed_errors(core):
    with pytest.raises(UnknownVoiceError, match="available"):
        submit(core, "v", TEXT, voice="nobody")
    with pytest.raises(InvalidParamsError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(InvalidParamsError, match="unknown sampling parameters"):
        SamplingParams.from_dict({"temprature": 0.5})
    assert not core.scheduler.requests


def test_stats_report_pools(core):
    stats = core.stats()
    assert stats.pool_ok and stats.num_pages_free == stats.num_pages_total and stats.num_requests == 0


def test_the_codec_batch_defaults_by_device_and_bad_values_are_refused():
    """EngineConfig.max_codec_batch None: 32 chunks a launch on the CPU and on a GPU of 64 GiB or more, 16 on a
    smaller GPU (the codec's CUDA graphs grow with it); the resolved value reaches the runner and the scheduler;
    an explicit value is kept, and one under 1 is a typed error."""
    assert EngineConfig().max_codec_batch is None
    assert default_max_codec_batch(torch.device("cpu")) == 32
    assert codec_batch_for_memory(80 * 10**9) == codec_batch_for_memory(CODEC_BATCH_32_MIN_BYTES) == 32  # H100
    assert codec_batch_for_memory(CODEC_BATCH_32_MIN_BYTES - 1) == codec_batch_for_memory(48 * 2**30) == 16
    core = make_core()
    assert core.config.max_codec_batch == core.runner.cfg.max_codec_batch == core.scheduler.config.max_codec_batch == 32
    core = make_core(max_codec_batch=4)
    assert core.runner.cfg.max_codec_batch == core.scheduler.config.max_codec_batch == 4
    with pytest.raises(InvalidParamsError, match="max_codec_batch must be >= 1"):
        make_core(max_codec_batch=0)


def test_codec_groups_larger_than_max_codec_batch_are_split_with_equal_audio():
    def run(max_codec_batch):
        core = make_core(max_codec_batch=max_codec_batch)
        for i in range(6):
            submit(core, f"r{i}", OTHERS[i])
        chunks, failures = drain(core)
        assert not failures
        return {rid: pcm(c) for rid, c in chunks.items()}

    whole, split = run(16), run(4)
    for rid in whole:
        np.testing.assert_allclose(split[rid], whole[rid], rtol=0, atol=1e-6)


def test_padded_prefill_buckets_equal_an_exact_length_prefill():
    """Prompts of lengths in every bucket (and past the last: eager), in one plan: the graphed stages' padded
    prefill gives each prompt the hidden state and code 0 of an exact-length prefill, in the plan's order."""
    import torch  # noqa: PLC0415

    from voxrt.engine.runtime.runner import PREFILL_LENGTHS  # noqa: PLC0415
    from voxrt.engine.sched.request import PromptTokens, Request  # noqa: PLC0415

    core = EngineCore(EngineConfig(device="cpu", max_batch_size=8, max_seq_len=256))
    runner, sched = core.runner, core.scheduler
    lengths = [5, PREFILL_LENGTHS[1], 3, PREFILL_LENGTHS[-1] + 7, PREFILL_LENGTHS[0] + 1, 9]
    g = torch.Generator().manual_seed(0)
    requests = []
    for i, n in enumerate(lengths):
        request = Request.create(f"p{i}", "default", SamplingParams(greedy=True), core.program.tokenize, 0)
        text = tuple(int(t) for t in torch.randint(16, 4000, (n,), generator=g))
        codec = tuple(-1 if j % 3 else int(torch.randint(0, 256, (), generator=g)) for j in range(n))
        request.prompt = PromptTokens(text, codec, num_text_tokens_used=1)
        request.pages = sched.pages.allocate(sched.pages.pages_for_tokens(n))
        request.slot = sched.slots.allocate()
        requests.append(request)
    with torch.inference_mode():
        hidden, code0 = runner._run_prefill(requests)
        exact = [runner._prefill_eager([r]) for r in requests]
    for i, (h, c) in enumerate(exact):
        torch.testing.assert_close(hidden[i], h[0], atol=1e-4, rtol=1e-4)
        assert int(code0[i]) == int(c[0]), i


def test_the_lm_loop_defaults_to_synchronous_on_the_cpu_and_the_live_cap_is_checked():
    core = make_core()
    assert core.async_lm is False  # async_lm=None: asynchronous on CUDA only
    assert core.scheduler.config.max_live_requests == 8  # the base policy's default: one batch
    assert make_core(scheduler_type="deadline").scheduler.config.max_live_requests == 16  # two: its default
    assert make_core(async_lm=True).async_lm is True
    for bad in (7, 65):  # under a batch, or over the codec slots (8 x max_batch_size by default)
        with pytest.raises(InvalidParamsError, match="max_live_requests"):
            make_core(max_live_requests=bad)
    with pytest.raises(InvalidParamsError, match="max_live_requests"):
        make_core(max_live_requests=17, codec_slots=16)
    with pytest.raises(InvalidParamsError, match="codec_slots"):
        make_core(codec_slots=0)


def test_codec_slots_default_to_8_per_batch_row_and_can_be_set():
    """Draining requests (generation over, chunks still to decode) keep their codec slot, so the slots are
    sized apart from the live cap: 8 per batch row unless set."""
    core = make_core()
    assert core.stats().num_slots_total == 64 == core.scheduler.slots.num_slots
    assert {t.shape[0] for t in core.runner.codec_state.values()} == {65}  # one scratch row past the slots
    core = make_core(codec_slots=20, scheduler_type="deadline")
    assert core.stats().num_slots_total == 20
    reqs = [submit(core, f"r{i}", OTHERS[i % len(OTHERS)]) for i in range(3)]
    drain(core)
    assert all(r.state is RequestState.FINISHED for r in reqs)
    assert_pools_empty(core)


def test_more_live_requests_than_a_batch_each_get_their_frames():
    """max_live_requests 8 over max_batch_size 4: of 10 requests 8 are admitted at once, each step decodes at
    most 4 of them, and a request gets the same frames as alone (greedy)."""
    core = make_core(max_batch_size=4, max_live_requests=8, scheduler_type="deadline")
    alone = submit(core, "alone", OTHERS[0])
    drain(core)
    batches = []
    schedule = core.scheduler.schedule

    def recording(*args, **kwargs):
        plan = schedule(*args, **kwargs)
        batches.append(len(plan.lm_requests))
        return plan

    core.scheduler.schedule = recording
    reqs = [submit(core, f"r{i}", OTHERS[i % len(OTHERS)]) for i in range(10)]
    most_live = 0
    while core.has_work():
        core.step()
        most_live = max(most_live, len(core.scheduler.running()))
    assert most_live == 8 and max(batches) == 4
    assert all(r.state is RequestState.FINISHED for r in reqs)
    assert reqs[0].frames == alone.frames
    assert_pools_empty(core)


def test_mixed_prefill_steps_give_the_separate_stages_frames_and_audio():
    """--mixed-prefill: prompts admitted while others decode ride in the decode batch's LM pass. The same
    arrivals (greedy) give the same frames and audio as prefill and decode run as their own stages; the
    mixed path really ran (prompts of 1 and of 3 together, next to decodes), and pools come back."""
    from voxrt.engine.runtime.runner import MIXED_LENGTH  # noqa: PLC0415

    results, used = [], []
    for mixed in (False, True):
        core = make_core(mixed_prefill=mixed)
        runs = []
        original = core.runner._fill_mixed
        core.runner._fill_mixed = lambda b, size, items, prompts: (runs.append((len(items), len(prompts))),
                                                                  original(b, size, items, prompts))[1]
        reqs = [submit(core, "a", TEXT)]
        core.step()
        core.step()
        reqs.append(submit(core, "b", OTHERS[0]))  # one prompt next to one decode
        core.step()
        core.step()
        reqs += [submit(core, f"c{i}", t) for i, t in enumerate(OTHERS[1:4])]  # three together
        chunks, failures = drain(core)
        assert not failures
        assert all(len(r.prompt) <= MIXED_LENGTH for r in reqs), [len(r.prompt) for r in reqs]
        results.append(([r.frames for r in reqs], {rid: pcm(c) for rid, c in chunks.items()}))
        used.append(runs)
        assert_pools_empty(core)
    assert make_core().runner.mixed_stages is None  # the default on the CPU: off (on with CUDA)
    assert used[0] == [] and (1, 1) in used[1] and any(p == 3 for _, p in used[1]), used
    (frames_s, audio_s), (frames_m, audio_m) = results
    assert frames_m == frames_s and all(frames_s)
    for rid in audio_s:
        np.testing.assert_allclose(audio_m[rid], audio_s[rid], rtol=0, atol=1e-5)


@pytest.mark.parametrize("async_lm", [False, True])
def test_cancel_during_a_mixed_step_returns_every_page_and_slot(async_lm):
    """A prompt admitted beside decodes (a mixed step) and cancelled while that launch is queued: its pages
    and slot return at once, the stream beside it finishes, nothing leaks."""
    core = make_core(async_lm=async_lm, mixed_prefill=True)
    other = submit(core, "other", OTHERS[0])
    core.step()
    core.step()
    request = submit(core, "victim", TEXT)
    real_launch, seen = core.runner.launch_lm, []

    def launch_then_cancel(plan, **kw):
        launch = real_launch(plan, **kw)
        if request in plan.prefill:
            seen.append(core.runner._mixed_stage_for(plan) is not None)
            assert core.cancel("victim")
        return launch

    core.runner.launch_lm = launch_then_cancel
    try:
        for _ in range(3):
            core.step()
    finally:
        core.runner.launch_lm = real_launch
    assert seen == [True]  # it was prefilled in a mixed step
    assert request.state is RequestState.CANCELLED and not request.pages and request.slot is None
    chunks, failures = drain(core)
    assert "victim" not in failures and all(not c.is_last for c in chunks.get("victim", []))
    assert other.state is RequestState.FINISHED
    assert_pools_empty(core)


def test_max_batch_size_none_is_the_devices_default_and_below_one_is_refused():
    """EngineConfig(max_batch_size=None), what the CLI passes when --max-batch-size is unset: the engine process
    picks its device's default (64 on the CPU); 0 is a clear error."""
    core = EngineCore(EngineConfig(device="cpu", max_batch_size=None, max_seq_len=256))
    try:
        assert core.config.max_batch_size == 64 and core.scheduler.config.max_batch_size == 64
    finally:
        core.close()
    with pytest.raises(InvalidParamsError, match="max_batch_size"):
        EngineCore(EngineConfig(device="cpu", max_batch_size=0, max_seq_len=256))


def test_the_first_chunk_size_is_an_engine_option():
    """--first-chunk-frames: every request's first chunk has that many frames, the next ones double up to the
    program's chunk size, and the streamed audio still equals the whole offline decode; a size the program cannot
    start with is a typed error before any work."""
    core = make_core(first_chunk_frames=3)
    assert core.info.first_chunk_frames == 3 and core.info.chunk_frames == 10
    request = submit(core, "s", TEXT)
    chunks, failures = drain(core)
    assert not failures
    sizes = [c.num_frames for c in chunks["s"]]
    assert sizes[:3] == [3, 6, 10] and len(sizes) > 3, sizes
    with torch.inference_mode():
        whole = core.program.decode_offline(torch.tensor([request.frames]))[0].numpy()
    np.testing.assert_allclose(pcm(chunks["s"]), whole, rtol=0, atol=1e-5)
    assert_pools_empty(core)
    for bad in (0, 11):
        with pytest.raises(InvalidParamsError, match=r"first_chunk_frames must be between 1 and the program's "
                                                     r"chunk_frames \(10\), got " + str(bad)):
            make_core(first_chunk_frames=bad)


def test_a_first_chunk_the_codec_cannot_release_is_refused_and_the_program_kept():
    """A program whose streaming codec lags (Orpheus: its first chunk must outlast the lag) refuses a first chunk
    too short to release audio, through its spec's own check, and keeps the size it had."""
    import dataclasses  # noqa: PLC0415

    from voxrt.models.tiny.program import TinyConfig, TinyProgram  # noqa: PLC0415

    class LaggingProgram(TinyProgram):
        @property
        def spec(self):
            return dataclasses.replace(super().spec, codec_delay_samples=self.codec_delay_samples)

    program = LaggingProgram(TinyConfig())
    program.codec_delay_samples = 3 * program.samples_per_frame // 2  # a frame and a half of lag
    with pytest.raises(ValueError, match="releases no audio"):
        program.set_first_chunk_frames(1)
    assert program.first_chunk_frames == 2 and program.spec.first_chunk_frames == 2
    program.set_first_chunk_frames(3)
    assert program.spec.first_chunk_frames == 3
