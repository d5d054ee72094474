"""Orpheus served by the engine (models/orpheus/program.py on engine/runtime): seven LM sub-steps a frame on
paged attention, no depth stage, the prompt at once, SNAC streamed exactly. Against the references: the
greedy frames of transformers' `LlamaForCausalLM` over the same tiny random checkpoint (with the rows each
position may take, as the program samples them), and the `snac` package's whole-sequence decode of those
frames (noise off), for requests decoded together at different positions, over KV pages smaller than a frame."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orpheus_tiny import TINY_SNAC_512, silence_noise, write_llama, write_snac
from voxrt.engine.messages import AudioChunk, EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.program import checked_spec
from voxrt.models.orpheus import tokens
from voxrt.models.orpheus.make_checkpoint import write_byte_tokenizer
from voxrt.models.orpheus.program import OrpheusProgram, load_program

TEXTS = {"a": ("tara", "Hello there."), "b": ("leo", "A longer line of text, to speak."), "c": ("zoe", "Hi.")}
PENALTY = 1.1


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(program, reference LM, reference SNAC with its noise off, tokenizer) over one tiny checkpoint."""
    from tokenizers import Tokenizer  # noqa: PLC0415

    directory = tmp_path_factory.mktemp("orpheus-served")
    model = write_llama(directory, seed=3)
    snac_model = write_snac(directory / "snac", TINY_SNAC_512, seed=4)
    silence_noise(snac_model)
    write_byte_tokenizer(directory)
    program = load_program(directory)
    program.codec.set_noise("off")
    return program, model, snac_model, Tokenizer.from_file(str(directory / "tokenizer.json"))


def reference_frames(model, tokenizer, voice: str, text: str, max_frames: int) -> tuple[list[list[int]], bool]:
    """Greedy decoding with transformers: the repetition penalty over every id so far (its logits processor),
    then only the rows the frame position may take (and a stop token at a frame's start), as the program
    samples. Returns frames of seven sliced-head rows (token id - 128256) and whether it stopped."""
    from transformers import RepetitionPenaltyLogitsProcessor  # noqa: PLC0415

    ids = tokens.encode_prompt(lambda s: tokenizer.encode(s, add_special_tokens=True).ids, text, voice)
    penalty = RepetitionPenaltyLogitsProcessor(PENALTY)
    frames, frame = [], []
    with torch.no_grad():
        while len(frames) < max_frames:
            position = len(frame)
            logits = model(torch.tensor([ids])).logits[:, -1].float()
            logits = penalty(torch.tensor([ids]), logits)[0]
            allowed = torch.zeros_like(logits, dtype=torch.bool)
            allowed[list(tokens.audio_token_range(position))] = True
            if position == 0:
                allowed[list(tokens.STOP_TOKEN_IDS)] = True
            token = int(logits.masked_fill(~allowed, float("-inf")).argmax())
            if token in tokens.STOP_TOKEN_IDS:
                return frames, True
            ids.append(token)
            frame.append(token - tokens.CUSTOM_TOKEN_BASE)
            if len(frame) == tokens.TOKENS_PER_FRAME:
                frames.append(frame)
                frame = []
    return frames, False


def run_engine(program: OrpheusProgram, jobs: dict, max_frames: int, stagger: int = 0, **config):
    """The jobs through one EngineCore (`stagger` steps between submissions); (requests, audio per job)."""
    cfg = dict(model="orpheus", device="cpu", dtype="float32", max_batch_size=4, max_seq_len=512, page_size=4,
               num_pages=512)
    cfg.update(config)
    core = EngineCore(EngineConfig(**cfg), program=program)
    params = SamplingParams(greedy=True, repetition_penalty=PENALTY, max_frames=max_frames)
    pending, requests = list(jobs.items()), {}
    audio: dict[str, list[np.ndarray]] = {rid: [] for rid in jobs}
    for step in range(2000):
        if pending and (not stagger or step % stagger == 0):
            for _ in range(len(pending) if not stagger else 1):
                rid, (voice, text) = pending.pop(0)
                requests[rid] = core.submit(SubmitRequest(rid, voice, params, text, True))
        if not core.has_work() and not pending:
            break
        for event in core.step():
            assert isinstance(event, AudioChunk), event
            audio[event.request_id].append(np.frombuffer(event.pcm, dtype="<f4"))
    assert not core.has_work()
    core.scheduler.check_integrity()
    assert core.scheduler.pages.num_free == core.scheduler.pages.num_pages
    return core, requests, {rid: np.concatenate(parts) if parts else np.zeros(0, np.float32)
                            for rid, parts in audio.items()}


def test_the_spec_says_seven_tokens_a_frame_and_the_codec_lag(served):
    program = served[0]
    spec = checked_spec(program)
    assert spec.lm_tokens_per_frame == 7 and not program.has_depth
    assert spec.samples_per_frame == 2048 and spec.codec_delay_samples == program.streamer.lookahead_samples > 0
    # the first chunk releases audio past the lag; eos is end_of_speech's row (real weights)
    assert spec.first_chunk_frames * 2048 > spec.codec_delay_samples
    assert spec.eos_code == tokens.END_OF_SPEECH - tokens.CUSTOM_TOKEN_BASE


@pytest.mark.parametrize("stagger, max_frames", [(0, 5), (3, 5), (0, 1), (0, 2)])
def test_engine_frames_and_audio_equal_the_references(served, stagger, max_frames):
    """Three requests batched (at once, or arriving three steps apart: different positions in one batch);
    each stream's frames are the reference's greedy frames and its audio the whole decode of them, also for
    requests shorter than the codec's lag (1 and 2 frames: all their audio comes with the tail)."""
    program, model, snac_model, tokenizer = served
    _, requests, audio = run_engine(program, TEXTS, max_frames, stagger=stagger)
    streams = set()
    for rid, (voice, text) in TEXTS.items():
        expected, stopped = reference_frames(model, tokenizer, voice, text, max_frames)
        request = requests[rid]
        assert [list(f) for f in request.frames] == expected, rid
        assert request.finish_reason == ("stop" if stopped else "max_frames"), rid
        assert len(audio[rid]) == len(expected) * 2048, rid
        if expected:
            codes = tokens.frame_codes(torch.tensor([expected]))[0]
            with torch.no_grad():
                wave = snac_model.decode(tokens.frames_to_codebooks(codes))[0, 0].numpy()
            np.testing.assert_allclose(audio[rid], wave, rtol=0, atol=2e-5)
            assert np.abs(audio[rid]).max() > 1e-4  # not silence
        streams.add(tuple(map(tuple, expected)))
    assert len(streams) == len(TEXTS)


def test_a_pinned_length_runs_its_frames_and_the_audio_adds_up(served):
    """Pinned (benchmarks): exactly N frames, never a stop; N * 2048 samples in chunks of the schedule, the
    first chunk shorter by the codec's lag, the last one longer by it."""
    program = served[0]
    core = EngineCore(EngineConfig(model="orpheus", device="cpu", dtype="float32", max_batch_size=4, max_seq_len=512,
                                   page_size=16, num_pages=64), program=program)
    core.submit(SubmitRequest("p", "tara", SamplingParams(num_frames=9, temperature=0.8), "Pinned.", True))
    sizes = []
    while core.has_work():
        for event in core.step():
            assert isinstance(event, AudioChunk), event
            sizes.append(len(event.pcm) // 4)
    assert sum(sizes) == 9 * 2048
    assert sizes[0] == program.first_chunk_frames * 2048 - program.codec_delay_samples
    assert program.first_chunk_frames == 4  # 3 would release 58 ms: bench/results/2026-12-02-orpheus
    assert program.codec_sm_share == 16 / 132  # SNAC is cheap: the LM lane gets the rest of the GPU
    assert core.scheduler.pages.num_free == core.scheduler.pages.num_pages


def test_a_prompt_over_the_sequence_length_fails_clearly(served):
    program = served[0]
    core = EngineCore(EngineConfig(model="orpheus", device="cpu", dtype="float32", max_batch_size=4, max_seq_len=64,
                                   page_size=16, num_pages=64), program=program)
    core.submit(SubmitRequest("long", "tara", SamplingParams(greedy=True), "x" * 80, True))
    events = []
    while core.has_work():
        events += core.step()
    assert len(events) == 1 and events[0].code == "capacity", events
    assert "exceeds the KV capacity" in events[0].message
    assert core.scheduler.pages.num_free == core.scheduler.pages.num_pages


@pytest.mark.parametrize("stop_token", tokens.STOP_TOKEN_IDS)
def test_a_stop_token_ends_the_request_and_a_pinned_length_never_samples_it(served, stop_token, monkeypatch):
    """A stop token on top of every step (end_of_speech, or end_of_ai, which the program maps to it): a free
    request stops at its first frame with nothing to decode and returns its pages; a pinned one runs its frames
    (the sampler never offers a stop row then, nor at a frame's positions 1-6)."""
    program = served[0]
    original = program.lm.audio_logits
    row = stop_token - tokens.CUSTOM_TOKEN_BASE

    def stop_on_top(hidden):
        logits = original(hidden).clone()
        logits[:, row] = 1e4
        return logits

    monkeypatch.setattr(program.lm, "audio_logits", stop_on_top)
    core, requests, audio = run_engine(program, {"s": ("tara", "Stop here.")}, max_frames=6)
    assert requests["s"].finish_reason == "stop" and requests["s"].num_frames == 0 and len(audio["s"]) == 0
    core = EngineCore(EngineConfig(model="orpheus", device="cpu", dtype="float32", max_batch_size=4, max_seq_len=512,
                                   page_size=16, num_pages=64), program=program)
    pinned = core.submit(SubmitRequest("p", "tara", SamplingParams(greedy=True, num_frames=4), "Pinned.", True))
    while core.has_work():
        core.step()
    assert pinned.finish_reason == "pinned" and pinned.num_frames == 4
    assert all(0 <= code - 10 - 4096 * j < 4096 for frame in pinned.frames for j, code in enumerate(frame))


def test_loading_names_what_is_missing(served, tmp_path):
    """A directory without the codec (and no SNAC repo in the cache), or without its tokenizer: a
    CheckpointError that names it, through the registry as `voxrt serve --model orpheus` loads it."""
    from voxrt.engine.errors import CheckpointError  # noqa: PLC0415
    from voxrt.models.registry import build_program  # noqa: PLC0415

    directory = tmp_path / "no-codec"
    write_llama(directory, seed=5)
    write_byte_tokenizer(directory)
    with pytest.raises(CheckpointError, match="no SNAC codec found"):
        build_program("orpheus", str(directory))
    (directory / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="missing: tokenizer.json"):
        build_program("orpheus", str(directory))
    with pytest.raises(CheckpointError, match="does not exist"):
        build_program("orpheus", str(tmp_path / "nowhere"))
