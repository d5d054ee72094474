"""Our Orpheus LM equals transformers' `LlamaForCausalLM` on a tiny random checkpoint saved by it in the released
layout (config.json + safetensors, tied head, Llama-3 rope scaling; a sharded untied variant) and loaded by
our code. Float32 on the CPU, through our paged attention (TorchAttention over shuffled pages of 4 tokens):
prompt logits of two requests batched, the audio head slice, and greedy tokens for 3 frames (21 tokens) both
over the whole vocabulary and restricted to each position's audio rows (tokens.audio_row_mask)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers.cache_utils import DynamicCache

from orpheus_tiny import write_llama
from voxrt.engine.errors import CheckpointError
from voxrt.engine.runtime.attention import KVCache, SeqSlice, TorchAttention
from voxrt.models.orpheus import tokens as T
from voxrt.models.orpheus.llama import LlamaConfig, inv_freq, load_lm
from voxrt.models.orpheus.make_checkpoint import ORPHEUS_3B_CONFIG

ATOL = 1e-4  # float32, as the Qwen3-TTS parity tests; what we see is <= 7e-6 on logits of magnitude ~10
CPU = torch.device("cpu")
_ORDER = torch.randperm(32, generator=torch.Generator().manual_seed(0)).tolist()
PAGES = [_ORDER[0::2][:12], _ORDER[1::2][:12]]  # shuffled, interleaved pages of 4 tokens (48 positions each)
NUM_STEPS = 3 * T.TOKENS_PER_FRAME


def prompts() -> list[list[int]]:
    """Two prompts in Orpheus's format (stand-in text ids: any Llama-3 ids would do)."""
    return [T.prompt_ids([T.BEGIN_OF_TEXT, 83, 5169, 25, 22691, 1917, 0]),  # "tara: Hello world!"-like
            T.prompt_ids([T.BEGIN_OF_TEXT, 40, 2, 1234, 99, 880, 17, 4, 3001, 6, 77])]


@pytest.fixture(scope="module")
def loaded(llama_ckpt):
    directory, ref = llama_ckpt
    return ref, load_lm(directory)


class Paged:
    """Our LM over a KV cache of pages, a batch of requests stepped together."""

    def __init__(self, lm, lengths: list[int]) -> None:
        cfg = lm.cfg
        self.lm, self.lengths = lm, list(lengths)
        self.kv = KVCache(cfg.num_layers, 32, 4, cfg.num_kv_heads, cfg.head_dim, CPU, torch.float32)

    def prefill(self, ids: list[list[int]]) -> torch.Tensor:
        """-> [sum(len), H] hidden of every prompt position."""
        attn = TorchAttention(self.kv, len(ids), sum(self.lengths), None, CPU)
        attn.fill([SeqSlice(p, n, n) for p, n in zip(PAGES, self.lengths)])
        x = self.lm.embed(torch.tensor([t for p in ids for t in p]))
        return self.lm.forward_paged(x, attn.positions[: x.shape[0]], attn)

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        """[B] ids at the next position of each request -> [B, H]."""
        self.lengths = [n + 1 for n in self.lengths]
        attn = TorchAttention(self.kv, len(self.lengths), len(self.lengths), None, CPU)
        attn.fill([SeqSlice(p, 1, n) for p, n in zip(PAGES, self.lengths)])
        return self.lm.forward_paged(self.lm.embed(token_ids), attn.positions[: len(self.lengths)], attn)


def test_config_and_rotary_equal_the_references(loaded):
    ref, lm = loaded
    assert set(lm.state_dict()) == set(ref.state_dict()) - {"lm_head.weight"}  # tied: the head is embed_tokens
    assert lm.head_weight is lm.model.embed_tokens.weight
    torch.testing.assert_close(lm.rotary_freqs(CPU), ref.model.rotary_emb.inv_freq, rtol=0, atol=0)
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    released = LlamaConfig.from_dict(ORPHEUS_3B_CONFIG)
    assert (released.num_layers, released.hidden_size, released.num_q_heads, released.num_kv_heads,
            released.head_dim, released.intermediate_size, released.vocab_size) == (28, 3072, 24, 8, 128, 8192, 156940)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](HFLlamaConfig(**ORPHEUS_3B_CONFIG), "cpu")
    torch.testing.assert_close(inv_freq(released), theirs, rtol=0, atol=0)


def test_prompt_logits_and_the_audio_slice_equal_the_reference(loaded):
    ref, lm = loaded
    ids = prompts()
    paged = Paged(lm, [len(p) for p in ids])
    with torch.no_grad():
        hidden = paged.prefill(ids)
        ours = lm.logits(hidden).split([len(p) for p in ids])
        for prompt, mine in zip(ids, ours):
            theirs = ref(torch.tensor([prompt])).logits[0]
            torch.testing.assert_close(mine, theirs, rtol=0, atol=ATOL)
        audio = lm.audio_logits(hidden)
    assert audio.shape == (hidden.shape[0], 156940 - 128256) and lm.num_audio_rows == audio.shape[1]
    assert audio.data_ptr() != 0 and lm.head_weight[128256:].is_contiguous()  # the slice is a view
    torch.testing.assert_close(audio, torch.cat(ours)[:, 128256:], rtol=0, atol=ATOL)


def reference_greedy(ref, prompt: list[int], mask_rows: bool) -> list[int]:
    """transformers' model with its DynamicCache, one token a step; `mask_rows`: argmax over the rows
    tokens.audio_row_mask allows for the position (the same restriction, applied to the full logits)."""
    cache, out, position = DynamicCache(), [], len(prompt)
    with torch.no_grad():
        logits = ref(torch.tensor([prompt]), past_key_values=cache, use_cache=True).logits[0, -1]
        for step in range(NUM_STEPS):
            if mask_rows:
                mask = T.audio_row_mask(torch.tensor([step % 7]), 156940 - 128256)[0]
                token = 128256 + int(logits[128256:].masked_fill(~mask, float("-inf")).argmax())
            else:
                token = int(logits.argmax())
            out.append(token)
            logits = ref(torch.tensor([[token]]), past_key_values=cache, use_cache=True,
                         cache_position=torch.tensor([position])).logits[0, -1]
            position += 1
    return out


@pytest.mark.parametrize("mask_rows", [False, True], ids=["whole-vocabulary", "audio-rows"])
def test_greedy_tokens_equal_the_reference_for_three_frames(loaded, mask_rows):
    ref, lm = loaded
    ids = prompts()
    paged = Paged(lm, [len(p) for p in ids])
    generated: list[list[int]] = [[], []]
    with torch.no_grad():
        hidden = paged.prefill(ids)[torch.tensor([len(p) for p in ids]).cumsum(0) - 1]  # last positions
        for step in range(NUM_STEPS):
            if mask_rows:  # the decode path: the sliced head, masked per position
                mask = T.audio_row_mask(torch.full((2,), step % 7), lm.num_audio_rows)
                tokens = 128256 + lm.audio_logits(hidden).masked_fill(~mask, float("-inf")).argmax(-1)
            else:
                tokens = lm.logits(hidden).argmax(-1)
            for row in range(2):
                generated[row].append(int(tokens[row]))
            hidden = paged.step(tokens)
    for prompt, mine in zip(ids, generated):
        assert mine == reference_greedy(ref, prompt, mask_rows)
    if mask_rows:  # restricted to the audio rows, every token is a code: 3 whole frames
        for mine in generated:
            frames, stopped = T.parse_response(mine)
            assert len(frames) == 3 and not stopped


def test_sharded_untied_checkpoint_loads(tmp_path):
    ref = write_llama(tmp_path, seed=1, max_shard_size="4MB", tie_word_embeddings=False, num_hidden_layers=1)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and "lm_head.weight" in index["weight_map"]
    lm = load_lm(tmp_path)
    assert torch.equal(lm.head_weight, ref.lm_head.weight) and not torch.equal(lm.head_weight, lm.model.embed_tokens.weight)
    prompt = prompts()[0]
    paged = Paged(lm, [len(prompt)])
    with torch.no_grad():
        torch.testing.assert_close(lm.logits(paged.prefill([prompt])), ref(torch.tensor([prompt])).logits[0],
                                   rtol=0, atol=ATOL)
    shard = sorted(set(index["weight_map"].values()))[-1]
    (tmp_path / shard).unlink()
    with pytest.raises(CheckpointError, match=f"missing shards: {shard}"):
        load_lm(tmp_path)


def test_load_in_bfloat16_keeps_rotary_in_float32(llama_ckpt):
    directory, _ = llama_ckpt
    lm = load_lm(directory, dtype=torch.bfloat16)
    assert lm.head_weight.dtype == torch.bfloat16
    assert lm.rotary_freqs(CPU).dtype == torch.float32


def test_checkpoint_errors_name_what_is_wrong(llama_ckpt, tmp_path):
    from safetensors.torch import load_file, save_file

    directory, _ = llama_ckpt
    with pytest.raises(CheckpointError, match="missing: config.json, model.safetensors"):
        load_lm(tmp_path)
    with pytest.raises(CheckpointError, match="missing: tokenizer.json"):
        load_lm(directory, need_tokenizer=True)
    config = json.loads((directory / "config.json").read_text())
    state = load_file(str(directory / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    broken = dict(state)
    del broken["model.layers.1.mlp.up_proj.weight"]
    broken["model.layers.1.mlp.extra"] = torch.zeros(1)
    save_file(broken, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"1 missing keys \['model.layers.1.mlp.up_proj.weight'\], "
                                              r"1 unexpected keys \['model.layers.1.mlp.extra'\]"):
        load_lm(tmp_path)
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    with pytest.raises(CheckpointError, match="shapes do not match the config: model.layers.0.mlp.gate_proj.weight"):
        load_lm(tmp_path)
    for bad, match in (({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling type 'yarn'"),
                       ({"attention_bias": True}, "attention_bias=True is not supported"),
                       ({"model_type": "mistral"}, "expected 'llama'"),
                       ({"hidden_size": None}, None)):
        cfg = {**config, **bad}
        if match is None:
            del cfg["hidden_size"]
            match = "lacks 'hidden_size'"
        with pytest.raises(CheckpointError, match=match):
            LlamaConfig.from_dict(cfg)
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="cannot read"):
        load_lm(tmp_path)
