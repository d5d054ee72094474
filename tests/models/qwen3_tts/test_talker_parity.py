"""Our Qwen3-TTS talker and code predictor equal the reference (qwen-tts 0.1.1) on a tiny random checkpoint.

The checkpoint is saved by the reference in the released layout and loaded by `_load_dir`. Checked, in
float32 on the CPU: parameter names and values; the rotary reduction; prefill and decode logits of two
requests batched through our paged attention (non-contiguous pages of 4 tokens) against the reference's
own `talker.forward` with its DynamicCache, teacher-forced on the same codes; each of the 15 code-predictor
steps; greedy generation through `EngineCore` token for token (all 16 code groups), including EOS and
the reference's `min_new_tokens`; and, when the codec module exists, the streamed audio against the
reference codec's decode of the reference's codes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache

from reference import M
from tiny_talker import CODEBOOK, NUM_CODE_GROUPS, assistant_ids, cached_checkpoint, load_program, reference_prompt
from voxrt.engine.messages import AudioChunk, EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.attention import KVCache, SeqSlice, TorchAttention
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.sampling import SamplingTensors
from voxrt.engine.sched.request import Request
from voxrt.models.common.layers import apply_rotary, rotary_cos_sin

ATOL = 1e-4
CPU = torch.device("cpu")
TEXTS = {"vivian": "Hello world, the quick brown fox!", "eric": "Speech, real time."}


def make_request(program, rid: str, voice: str, text: str) -> Request:
    request = Request.create(rid, voice, SamplingParams(greedy=True), program.tokenize, 0)
    request.feed.append(text, is_final=True)
    return request


def test_parameter_names_and_values_equal_the_reference(ckpt):
    _, model, _, program = ckpt
    ours = {f"talker.{k}": v for k, v in program.talker.state_dict().items()}
    theirs = model.state_dict()
    assert set(ours) == set(theirs)  # CustomVoice: the whole state is the talker
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name


def test_multimodal_rotary_with_equal_axes_is_ordinary_rotary(ckpt):
    _, model, _, program = ckpt
    lm = program.cfg.talker.lm
    positions = torch.tensor([0, 1, 7, 300, 4095])
    q = torch.randn(1, lm.num_q_heads, len(positions), lm.head_dim)
    k = torch.randn(1, lm.num_kv_heads, len(positions), lm.head_dim)
    rope = model.talker.model.rotary_emb
    cos, sin = rope(q, positions.view(1, 1, -1).expand(3, 1, -1))
    scaling = model.config.talker_config.rope_scaling
    q_ref, k_ref = M.apply_multimodal_rotary_pos_emb(q, k, cos, sin, scaling["mrope_section"], scaling["interleaved"])
    cos2, sin2 = rotary_cos_sin(positions, lm.head_dim, lm.rope_theta)
    q_ours = apply_rotary(q.transpose(1, 2), cos2[None, :, None], sin2[None, :, None]).transpose(1, 2)
    k_ours = apply_rotary(k.transpose(1, 2), cos2[None, :, None], sin2[None, :, None]).transpose(1, 2)
    torch.testing.assert_close(q_ours, q_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(k_ours, k_ref, rtol=0, atol=1e-5)


class RefStream:
    """One request through the reference: prefill, then teacher-forced `talker.forward` decode steps."""

    def __init__(self, model, tokenizer, voice: str, text: str) -> None:
        self.model = model
        prompt = reference_prompt(model, assistant_ids(tokenizer, text), voice)
        self.embeds = prompt["inputs_embeds"]
        self.trailing, self.pad = prompt["trailing_text_hidden"], prompt["tts_pad_embed"]
        self.length = self.embeds.shape[1]
        self.cache = DynamicCache()
        self.step = 0
        with torch.no_grad():
            out = model.talker(inputs_embeds=self.embeds, attention_mask=torch.ones(1, self.length, dtype=torch.long),
                               past_key_values=self.cache, use_cache=True, trailing_text_hidden=self.trailing,
                               tts_pad_embed=self.pad)
        self.logits, self.past_hidden = out.logits[0, -1], out.past_hidden

    def predictor_logits(self, code0: int) -> list[torch.Tensor]:
        cp = self.model.talker.code_predictor
        code_embed = self.model.talker.get_input_embeddings()(torch.tensor([[code0]]))
        with torch.no_grad():
            out = cp.generate(inputs_embeds=torch.cat([self.past_hidden, code_embed], dim=1),
                              max_new_tokens=NUM_CODE_GROUPS - 1, do_sample=False, output_logits=True,
                              return_dict_in_generate=True)
        return [step[0] for step in out.logits]

    def decode(self, code0: int) -> list[int]:
        """Feeds code 0 of the last frame; returns the frame's codes (the reference predictor's, greedy)."""
        position = self.length + self.step
        with torch.no_grad():
            out = self.model.talker(
                input_ids=torch.tensor([[code0]]), past_hidden=self.past_hidden, trailing_text_hidden=self.trailing,
                tts_pad_embed=self.pad, generation_step=self.step, past_key_values=self.cache, use_cache=True,
                attention_mask=torch.ones(1, position + 1, dtype=torch.long), cache_position=torch.tensor([position]),
                subtalker_dosample=False)
        self.step += 1
        self.logits, self.past_hidden = out.logits[0, -1], out.past_hidden
        return out.hidden_states[1][0].tolist()


def test_prefill_decode_and_predictor_logits_through_paged_attention(ckpt):
    _, model, tokenizer, program = ckpt
    voices = list(TEXTS)
    requests = [make_request(program, f"r{i}", v, TEXTS[v]) for i, v in enumerate(voices)]
    refs = [RefStream(model, tokenizer, v, TEXTS[v]) for v in voices]
    prompts = [program.build_prompt(r) for r in requests]
    assert [len(p) for p in prompts] == [ref.length for ref in refs]

    lm = program.cfg.talker.lm
    kv = KVCache(lm.num_layers, 32, 4, lm.num_kv_heads, lm.head_dim, CPU, torch.float32)
    pages = [[9, 2, 17, 5, 30, 11, 0, 23], [1, 14, 6, 27, 3, 19, 8, 12]]  # shuffled, interleaved
    lengths = [len(p) for p in prompts]
    greedy = SamplingTensors.from_params([SamplingParams(greedy=True)] * 2, CPU)
    eos, pad = program.cfg.tts_eos_token_id, program.cfg.tts_pad_token_id
    trailing_ids = [r.feed.token_ids[1:] + [eos] for r in requests]

    with torch.inference_mode():
        attn = TorchAttention(kv, 2, sum(lengths), None, CPU)
        attn.fill([SeqSlice(p, n, n) for p, n in zip(pages, lengths)])
        x = program.embed_prompt(torch.tensor([t for p in prompts for t in p.text_ids]),
                                 torch.tensor([c for p in prompts for c in p.codec_ids]))
        torch.testing.assert_close(x, torch.cat([ref.embeds[0] for ref in refs]), rtol=0, atol=1e-5)
        hidden = program.lm_forward(x, attn.positions[: x.shape[0]], attn)[torch.tensor(lengths).cumsum(0) - 1]
        for step in range(min(len(t) for t in trailing_ids) + 2):  # the shorter text gets tts_eos, then tts_pad
            logits = program.talker.codec_head(hidden)
            for row, ref in enumerate(refs):
                torch.testing.assert_close(logits[row], ref.logits, rtol=0, atol=ATOL)
            code0 = logits[:, :CODEBOOK].argmax(-1)  # teacher forcing: the same code 0 for both
            recorded: list[torch.Tensor] = []
            codes = program.talker.code_predictor.generate(
                hidden, program.talker.model.codec_embedding(code0), code0, greedy, record_logits=recorded)
            assert torch.equal(codes, program.generate_depth(hidden, code0, greedy))
            assert len(recorded) == NUM_CODE_GROUPS - 1
            text_ids = []
            for row, ref in enumerate(refs):
                for i, theirs in enumerate(ref.predictor_logits(int(code0[row]))):
                    torch.testing.assert_close(recorded[i][row], theirs, rtol=0, atol=ATOL, msg=f"predictor step {i}")
                assert codes[row].tolist() == ref.decode(int(code0[row]))
                text_ids.append(trailing_ids[row][step] if step < len(trailing_ids[row]) else pad)
            attn = TorchAttention(kv, 2, 2, None, CPU)
            attn.fill([SeqSlice(p, 1, n + step + 1) for p, n in zip(pages, lengths)])
            x = program.embed_step(torch.tensor(text_ids), codes)
            hidden = program.lm_forward(x, attn.positions[:2], attn)


def reference_greedy(model, tokenizer, voice: str, text: str, max_new_tokens: int) -> list[list[int]]:
    with torch.no_grad():
        codes, _ = model.generate(input_ids=[assistant_ids(tokenizer, text)], languages=["auto"], speakers=[voice],
                                  non_streaming_mode=False, do_sample=False, subtalker_dosample=False,
                                  max_new_tokens=max_new_tokens, repetition_penalty=1.05)
    return codes[0].tolist()


def engine_greedy(program, jobs: dict[str, tuple[str, str]], max_frames: int, frame_path: str = "auto",
                  mixed_prefill: bool = False, stagger: int = 0):
    """Runs the jobs to the end in one EngineCore; returns their requests (frames) and audio. `stagger`: steps
    between submissions (0: all at once)."""
    core = EngineCore(EngineConfig(model="qwen3-tts", device="cpu", dtype="float32", max_batch_size=4,
                                   max_seq_len=128, page_size=4, num_pages=64, frame_path=frame_path,
                                   mixed_prefill=mixed_prefill), program=program)
    assert core.info.frame_path == ("reference" if frame_path == "auto" else frame_path)
    params = SamplingParams(greedy=True, repetition_penalty=1.05, max_frames=max_frames)
    pending = list(jobs.items()) if stagger else []
    requests = {} if stagger else {rid: core.submit(SubmitRequest(rid, voice, params, text, True))
                                   for rid, (voice, text) in jobs.items()}
    audio: dict[str, list[np.ndarray]] = {rid: [] for rid in jobs}
    for step in range(200):
        if pending and step % stagger == 0:
            rid, (voice, text) = pending.pop(0)
            requests[rid] = core.submit(SubmitRequest(rid, voice, params, text, True))
        if not core.has_work() and not pending:
            break
        for event in core.step():
            assert isinstance(event, AudioChunk), event
            audio[event.request_id].append(np.frombuffer(event.pcm, dtype="<f4"))
    assert not core.has_work()
    core.scheduler.check_integrity()
    return requests, {rid: np.concatenate(parts) for rid, parts in audio.items()}


def test_greedy_generation_through_the_engine_equals_the_reference(ckpt):
    _, model, tokenizer, program = ckpt
    max_frames = 12
    jobs = {"a": ("vivian", TEXTS["vivian"]), "b": ("eric", TEXTS["eric"]), "c": ("ryan", "Hi.")}
    requests, audio = engine_greedy(program, jobs, max_frames)
    reference_codec = cached_checkpoint(seed=0).codec
    for rid, (voice, text) in jobs.items():
        # max_new_tokens N gives N-1 frames: the N-th code 0 never gets its code-predictor pass
        expected = reference_greedy(model, tokenizer, voice, text, max_new_tokens=max_frames + 1)
        request = requests[rid]
        assert [list(f) for f in request.frames] == expected, rid
        assert request.finish_reason == ("stop" if len(expected) < max_frames else "max_frames")
        assert len(audio[rid]) == len(expected) * program.samples_per_frame
        if reference_codec is not None:  # the streamed audio is the reference codec's decode of its codes
            with torch.no_grad():
                wave = reference_codec.decode(torch.tensor([expected])).audio_values[0]
            np.testing.assert_allclose(audio[rid], wave.numpy(), rtol=0, atol=1e-4)
            assert np.abs(audio[rid]).max() > 1e-3  # not silence
    assert len({tuple(r.frames) for r in requests.values()}) == len(jobs)  # three different streams


def test_prompts_prefilled_beside_decodes_in_one_pass_equal_the_reference(ckpt):
    """--mixed-prefill: requests arriving while others decode are prefilled in the decode batch's LM pass;
    every stream is still the reference's greedy generation, and the mixed stage really ran."""
    _, model, tokenizer, program = ckpt
    jobs = {"a": ("vivian", TEXTS["vivian"]), "b": ("eric", TEXTS["eric"]), "c": ("ryan", "Hi.")}
    calls = []
    requests, _ = engine_greedy(program, jobs, max_frames=8, mixed_prefill=True, stagger=2)
    for rid, (voice, text) in jobs.items():
        expected = reference_greedy(model, tokenizer, voice, text, max_new_tokens=9)
        assert [list(f) for f in requests[rid].frames] == expected, rid
    core = EngineCore(EngineConfig(model="qwen3-tts", device="cpu", dtype="float32", max_batch_size=4,
                                   max_seq_len=128, page_size=4, num_pages=64, mixed_prefill=True), program=program)
    assert core.runner.mixed_stage_by_count is not None
    original = core.runner._mixed_body
    core.runner._mixed_body = lambda b: (calls.append(b.pre.slots.shape[0]), original(b))[1]
    for stage in core.runner.mixed_stage_by_count.values():
        stage.body = core.runner._mixed_body
    params = SamplingParams(greedy=True, max_frames=4)
    core.submit(SubmitRequest("x", "vivian", params, TEXTS["vivian"], True))
    core.step()
    core.submit(SubmitRequest("y", "eric", params, TEXTS["eric"], True))
    while core.has_work():
        core.step()
    assert calls == [1]
    core.scheduler.check_integrity()


@pytest.mark.parametrize("eos", ["likely", "always"])
def test_eos_stops_where_the_reference_stops(eos):
    """EOS made likely (the reference stops after several frames) or always on top (the reference's
    min_new_tokens=2 holds it off for exactly two frames, here with the same code 0 twice)."""
    tiny = cached_checkpoint(seed=0, eos=eos)
    directory, model, tokenizer = tiny.directory, tiny.model, tiny.tokenizer
    program = load_program(directory)
    jobs = {"a": ("vivian", TEXTS["vivian"]), "b": ("eric", TEXTS["eric"])}
    requests, _ = engine_greedy(program, jobs, max_frames=40)
    for rid, (voice, text) in jobs.items():
        expected = reference_greedy(model, tokenizer, voice, text, max_new_tokens=41)
        assert len(expected) < 40, "the reference should stop on EOS here"
        assert [list(f) for f in requests[rid].frames] == expected, rid
        assert requests[rid].finish_reason == "stop"
    if eos == "always":
        assert all(r.num_frames == 2 for r in requests.values())


def test_a_pinned_length_never_samples_eos():
    """Benchmarks pin a random model's length; with EOS always on top, a pinned request must still run its
    frames and never emit the EOS code (the codec has no entry for it)."""
    program = load_program(cached_checkpoint(seed=0, eos="always").directory)
    core = EngineCore(EngineConfig(model="qwen3-tts", device="cpu", dtype="float32", max_batch_size=4,
                                   max_seq_len=128, page_size=4, num_pages=64), program=program)
    request = core.submit(SubmitRequest("p", "vivian", SamplingParams(greedy=True, num_frames=9), TEXTS["vivian"], True))
    while core.has_work():
        core.step()
    eos = program.spec.eos_code
    assert request.num_frames == 9 and request.finish_reason == "pinned"
    assert all(frame[0] != eos and frame[0] < program.cfg.talker.vocab_size - 1024 for frame in request.frames)
    core.scheduler.check_integrity()
