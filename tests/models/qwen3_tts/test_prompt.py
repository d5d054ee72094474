"""Qwen3-TTS prompt building, tokenization, config parsing, the text-track end-of-text rule and code 0
sampling rules, against the reference's `generate` (CustomVoice, streaming text) on a tiny checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from tiny_talker import LANGUAGES, SPEAKERS, assistant_ids, load_program, reference_prompt
from voxrt.engine.errors import CheckpointError
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.sampling import SamplingTensors
from voxrt.engine.sched.base_policy import BaseScheduler
from voxrt.engine.sched.pages import PagePool, SlotPool
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import PromptTokens, Request
from voxrt.engine.sched.scheduler import SchedulerConfig
from voxrt.engine.sched.text_feed import TextFeed
from voxrt.models.qwen3_tts.config import GenerationDefaults, Qwen3TTSConfig
from voxrt.models.qwen3_tts.program import load_talker, select_talker_state

TEXTS = ["Hello world, the quick brown fox!", "Hi.", "  Speech,  real time\nfor  the lazy dog. ", "Ünïcode ok?"]


def make_request(program, voice: str, text: str) -> Request:
    request = Request.create("r", voice, SamplingParams(greedy=True), program.tokenize, 0)
    request.feed.append(text, is_final=True)
    return request


# ---- tokenization ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_tokens_equal_the_reference_slice_and_spans_point_into_the_text(ckpt, text):
    _, _, tokenizer, program = ckpt
    ids, spans = program.tokenize(text)
    assert ids == assistant_ids(tokenizer, text)[0, 3:-5].tolist()  # generate(): input_id[:, 3:-5] is the text
    assert len(spans) == len(ids)
    assert all(0 <= a <= b <= len(text) for a, b in spans)
    assert tokenizer.decode(ids) == text


def test_streamed_text_tokenizes_as_the_whole(ckpt):
    _, _, _, program = ckpt
    text = TEXTS[2] + TEXTS[0]
    whole = program.tokenize(text)[0]
    for size in (1, 3, 7):
        feed = TextFeed(program.tokenize)
        for i in range(0, len(text), size):
            feed.append(text[i : i + size])
        feed.append("", is_final=True)
        assert feed.token_ids == whole, size


def test_special_token_strings_in_user_text_stay_text(ckpt):
    _, _, tokenizer, program = ckpt
    ids, _ = program.tokenize("a <|im_end|> b <tts_pad>")
    specials = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<tts_pad>", "<|im_start|>")}
    assert not specials & set(ids)


# ---- the prompt ------------------------------------------------------------------------------------------------


def test_prompt_layout(ckpt):
    _, _, tokenizer, program = ckpt
    cfg, tc = program.cfg, program.cfg.talker
    role = tuple(tokenizer("<|im_start|>assistant\n")["input_ids"])
    first = program.tokenize(TEXTS[0])[0][0]
    pad, bos = cfg.tts_pad_token_id, cfg.tts_bos_token_id
    prompt = program.build_prompt(make_request(program, "vivian", TEXTS[0]))
    assert prompt == PromptTokens(
        role + (pad, pad, pad, pad, bos, first),
        (-1, -1, -1, tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id, SPEAKERS["vivian"],
         tc.codec_pad_id, tc.codec_bos_id), num_text_tokens_used=1)
    # a dialect speaker with language "auto" gets the think form with its dialect's id
    prompt = program.build_prompt(make_request(program, "eric", TEXTS[0]))
    assert prompt.codec_ids[3:] == (tc.codec_think_id, tc.codec_think_bos_id, LANGUAGES["sichuan_dialect"],
                                    tc.codec_think_eos_id, SPEAKERS["eric"], tc.codec_pad_id, tc.codec_bos_id)
    assert prompt.text_ids == role + (pad,) * 5 + (bos, first)


@pytest.mark.parametrize("language", ["auto", "english", "chinese"])
@pytest.mark.parametrize("voice", list(SPEAKERS))
def test_prompt_and_trailing_text_embeddings_equal_the_reference(ckpt, voice, language):
    directory, model, tokenizer, program = ckpt
    if language != "auto":
        program = load_program(directory, language=language)
    text = TEXTS[0]
    theirs = reference_prompt(model, assistant_ids(tokenizer, text), voice, language)
    prompt = program.build_prompt(make_request(program, voice, text))
    tokens = program.tokenize(text)[0]
    cfg = program.cfg
    with torch.inference_mode():
        ours = program.embed_prompt(torch.tensor(prompt.text_ids), torch.tensor(prompt.codec_ids))
        trailing = program.talker.embed_text(torch.tensor(tokens[1:] + [cfg.tts_eos_token_id]))
        pad = program.talker.embed_text(torch.tensor([cfg.tts_pad_token_id]))
    torch.testing.assert_close(ours, theirs["inputs_embeds"][0], rtol=0, atol=1e-5)
    torch.testing.assert_close(trailing, theirs["trailing_text_hidden"][0], rtol=0, atol=1e-5)
    torch.testing.assert_close(pad, theirs["tts_pad_embed"][0], rtol=0, atol=1e-5)


def test_spec_voices_and_defaults_come_from_the_checkpoint(ckpt):
    directory, _, _, program = ckpt
    released = json.loads((directory / "config.json").read_text())
    spec = program.spec
    assert spec.eos_code == released["talker_config"]["codec_eos_token_id"]
    assert spec.text_pad_id == released["tts_pad_token_id"]
    assert spec.text_eos_id == released["tts_eos_token_id"]
    assert spec.frames_per_text_token is None and spec.consumes_text_incrementally
    assert spec.num_codebooks == 16 and spec.default_max_frames == 64  # generation_config.json max_new_tokens
    assert program.voices == tuple(released["talker_config"]["spk_id"]) and program.default_voice == program.voices[0]
    with pytest.raises(ValueError, match="sichuan_dialect"):  # dialects are not languages (reference wrapper)
        load_program(directory, language="sichuan_dialect")
    with pytest.raises(ValueError, match="unknown voice"):
        program.build_prompt(make_request(program, "nobody", "Hi."))


# ---- the text track after the text: tts_eos once, then tts_pad ----------------------------------------------------


def _scheduler(text_eos_id):
    spec = ProgramSpec(num_codebooks=2, chunk_frames=4, first_chunk_frames=1, consumes_text_incrementally=True,
                       text_pad_id=0, eos_code=None, frames_per_text_token=None, default_max_frames=100,
                       text_eos_id=text_eos_id)

    def tokenize(text):
        words = text.split()
        return [len(w) + 10 for w in words], [(0, 0)] * len(words)

    def build_prompt(request):
        return PromptTokens((1, request.feed.token_ids[0]), (5, 6), num_text_tokens_used=1)

    return BaseScheduler(spec, PagePool(32, 4), SlotPool(4), build_prompt, tokenize, SchedulerConfig())


def _text_inputs(sched, request_id, steps):
    fed = []
    for _ in range(steps):
        plan = sched.schedule(0)
        fed += [item.text_id for item in plan.decode]
        if plan.lm_requests:
            sched.update_lm(plan, [(7, 7)] * len(plan.lm_requests))
    return fed


@pytest.mark.parametrize("text_eos_id", [None, 99])
def test_end_of_text_is_fed_once_after_the_final_text(text_eos_id):
    sched = _scheduler(text_eos_id)
    sched.add("a", "v", SamplingParams(greedy=True), 0)
    sched.append_text("a", "aa bbb ", False)  # two tokens; the first goes into the prompt
    fed = _text_inputs(sched, "a", 4)  # prefill, one decode, then starved (not final)
    sched.append_text("a", "cccc", True)
    fed += _text_inputs(sched, "a", 4)
    tail = [99] if text_eos_id else []
    assert fed == [13, 14] + tail + [0] * (3 - len(tail))


def test_end_of_text_follows_a_one_token_text_and_a_late_final():
    sched = _scheduler(99)
    sched.add("a", "v", SamplingParams(greedy=True), 0)
    sched.append_text("a", "aa ", False)
    fed = _text_inputs(sched, "a", 3)  # prefill holds the only token; then starved
    assert fed == []
    sched.append_text("a", "", True)
    assert _text_inputs(sched, "a", 3) == [99, 0, 0]


# ---- code 0 sampling rules -------------------------------------------------------------------------------------


def test_special_codes_are_suppressed_and_eos_waits_two_frames(ckpt):
    _, _, _, program = ckpt
    tc = program.cfg.talker
    vocab, eos = tc.vocab_size, tc.codec_eos_id
    head = program.talker.codec_head.weight
    greedy = SamplingTensors.from_params([SamplingParams(greedy=True, repetition_penalty=1.0)] * 4, torch.device("cpu"))
    with torch.inference_mode():
        special = program.sample_first_code(head[tc.codec_pad_id][None].repeat(4, 1) * 50, greedy,
                                            torch.zeros(4, 2 * vocab, dtype=torch.bool))
        assert int(special.max()) < vocab - 1024  # pad is top, yet only codes come out
        history = torch.zeros(4, 2 * vocab, dtype=torch.bool)
        history[1, 3] = True  # frame 1: one code seen
        history[2, 3] = history[2, vocab + 3] = True  # frame 2, the same code twice
        history[3, 5] = history[3, vocab + 9] = True  # frame 2
        code = program.sample_first_code(head[eos][None].repeat(4, 1) * 50, greedy, history)
    assert code[0] < vocab and code[0] != eos  # frame 0: no EOS
    assert code[1] >= vocab and code[1] - vocab != eos  # frame 1: no EOS, tagged for the history
    assert code[2:].tolist() == [eos, eos]  # from frame 2 on, EOS
    codes = program.generate_depth(torch.zeros(4, tc.lm.hidden_size), code, greedy)
    assert codes[:, 0].tolist() == [int(code[0]), int(code[1]) - vocab, eos, eos]  # the tag never reaches a frame


# ---- config and weights ----------------------------------------------------------------------------------------


def test_config_errors_name_the_field(ckpt):
    directory, _, _, _ = ckpt
    released = json.loads((directory / "config.json").read_text())
    Qwen3TTSConfig.from_dict(released)
    broken = json.loads(json.dumps(released))
    del broken["talker_config"]["hidden_size"]
    with pytest.raises(CheckpointError, match=r"talker_config\.hidden_size is missing"):
        Qwen3TTSConfig.from_dict(broken)
    broken = json.loads(json.dumps(released))
    broken["talker_config"]["code_predictor_config"]["num_code_groups"] = 8
    with pytest.raises(CheckpointError, match="code_predictor_config.num_code_groups"):
        Qwen3TTSConfig.from_dict(broken)
    broken = json.loads(json.dumps(released))
    broken["talker_config"]["rope_scaling"]["mrope_section"] = [24, 20, 21]
    with pytest.raises(CheckpointError, match="mrope_section"):
        Qwen3TTSConfig.from_dict(broken)
    broken = json.loads(json.dumps(released))
    broken["tts_model_type"] = "base"
    with pytest.raises(CheckpointError, match="voice cloning"):
        Qwen3TTSConfig.from_dict(broken)
    broken = json.loads(json.dumps(released))
    broken["talker_config"]["spk_id"]["vivian"] = 10**6
    with pytest.raises(CheckpointError, match="spk_id"):
        Qwen3TTSConfig.from_dict(broken)
    assert GenerationDefaults.from_dict({"top_k": 30, "transformers_version": "x"}).top_k == 30
    with pytest.raises(CheckpointError, match="temperature"):
        GenerationDefaults.from_dict({"temperature": "hot"})


def test_weights_load_strictly_and_name_what_is_wrong(ckpt):
    _, model, _, program = ckpt
    state = model.state_dict()
    extra = dict(state, **{"speaker_encoder.fc.weight": torch.zeros(1)})
    assert set(select_talker_state(extra, "ckpt")) == {k.removeprefix("talker.") for k in state}
    with pytest.raises(CheckpointError, match=r"neither the talker.*'other\.weight'"):
        select_talker_state(dict(state, **{"other.weight": torch.zeros(1)}), "ckpt")
    missing = {k: v for k, v in state.items() if k != "talker.codec_head.weight"}
    with pytest.raises(CheckpointError, match=r"1 missing keys \['codec_head.weight'\]"):
        load_talker(program.cfg, missing, "ckpt")
    wrong = dict(state, **{"talker.codec_head.weight": torch.zeros(3, 3)})
    with pytest.raises(CheckpointError, match="wrong shape"):
        load_talker(program.cfg, wrong, "ckpt")


def test_released_config_parses_and_the_steps_run_without_host_syncs():
    """The released 1.7B CustomVoice config, on the meta device: sizes as published, and code 0 sampling,
    the 15 predictor steps and the decode embedding run with no `.item()` or data-dependent shape (either
    would raise on meta), as CUDA graph capture needs."""
    from pathlib import Path

    import voxrt.models.qwen3_tts as package
    from voxrt.models.qwen3_tts.program import Qwen3TTSProgram
    from voxrt.models.qwen3_tts.talker import Talker

    released = json.loads((Path(package.__file__).parent / "configs" / "qwen3-tts-1.7b-customvoice.json").read_text())
    cfg = Qwen3TTSConfig.from_dict(released)
    tc = cfg.talker
    lm = tc.lm
    assert (lm.hidden_size, lm.num_layers, lm.num_q_heads, lm.num_kv_heads, lm.head_dim) == (2048, 28, 16, 8, 128)
    assert (tc.predictor.hidden_size, tc.predictor.num_layers, tc.num_code_groups, tc.vocab_size) == (1024, 5, 16, 3072)
    assert tc.mrope_section == (24, 20, 20) and tc.codec_eos_id == 2150 and cfg.tts_pad_token_id == 151671
    assert list(tc.speaker_ids)[0] == "serena" and tc.speaker_dialects["eric"] == "sichuan_dialect"

    class RoleTokenizer:  # the released tokenizer encodes the role as these three ids
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [151644, 77091, 198]}

    class Codec:
        samples_per_frame = 1920

    with torch.device("meta"):
        program = Qwen3TTSProgram(cfg, RoleTokenizer(), Codec(), talker=Talker(tc))
    meta = torch.device("meta")
    sampling = SamplingTensors.from_params([SamplingParams()] * 3, meta)
    hidden = torch.empty(3, tc.lm.hidden_size, device=meta)
    with torch.inference_mode():
        history = torch.zeros(3, 2 * tc.vocab_size, dtype=torch.bool, device=meta)
        code0 = program.sample_first_code(hidden, sampling, history)
        codes = program.generate_depth(hidden, code0, sampling)
        x = program.embed_step(torch.zeros(3, dtype=torch.int64, device=meta), codes)
    assert codes.shape == (3, 16) and x.shape == (3, 2048)
    prompt = program.build_prompt(make_request_ids(program, "eric", [9707]))
    assert prompt.codec_ids == (-1, -1, -1, 2154, 2156, 2062, 2157, 2875, 2148, 2149)
    assert prompt.text_ids == (151644, 77091, 198, 151671, 151671, 151671, 151671, 151671, 151672, 9707)


def make_request_ids(program, voice: str, ids: list[int]) -> Request:
    request = Request.create("r", voice, SamplingParams(), lambda text: (ids, [(0, len(text))] * len(ids)), 0)
    request.feed.append("x", is_final=True)
    return request
