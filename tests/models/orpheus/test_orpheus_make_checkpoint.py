"""make_checkpoint writes Orpheus's released layouts; the references and our loaders read what it wrote. Written
at a tiny size through the maker's own path (`configs=`); the full-size shapes are checked on the meta device."""

from __future__ import annotations

import json

import pytest
import torch

from orpheus_tiny import TINY_LLAMA, TINY_SNAC
from voxrt.engine.errors import CheckpointError
from voxrt.models.orpheus import checkpoint
from voxrt.models.orpheus import make_checkpoint as maker
from voxrt.models.orpheus.llama import LlamaConfig, OrpheusLM, load_lm
from voxrt.models.orpheus.snac import load_snac


def tiny_configs() -> tuple[dict, dict]:
    lm, _ = maker.arch_config("orpheus-3b")
    lm.update({k: v for k, v in TINY_LLAMA.items() if k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                              "num_attention_heads", "num_key_value_heads", "head_dim")})
    return lm, dict(TINY_SNAC)


def test_full_size_shapes_are_the_released_architecture():
    lm_config, snac_config = maker.arch_config("orpheus-3b")
    with torch.device("meta"):
        lm = OrpheusLM(LlamaConfig.from_dict(lm_config))
    params = {k: v for k, v in lm.state_dict().items()}
    layers = sum(v.numel() for k, v in params.items() if ".layers." in k)
    assert 2.80e9 < layers < 2.82e9  # ~2.8 B in the layers (orpheus.md)
    assert params["model.embed_tokens.weight"].shape == (156940, 3072) and "lm_head.weight" not in params
    assert params["model.layers.27.self_attn.k_proj.weight"].shape == (8 * 128, 3072)
    assert params["model.layers.0.mlp.gate_proj.weight"].shape == (8192, 3072)
    assert snac_config == {"sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8],
                           "decoder_dim": 1024, "decoder_rates": [8, 8, 4, 2], "attn_window_size": None,
                           "codebook_size": 4096, "codebook_dim": 8, "vq_strides": [4, 2, 1], "noise": True,
                           "depthwise": True}
    with pytest.raises(CheckpointError, match="unknown arch 'orpheus-1b'; available: orpheus-3b"):
        maker.arch_config("orpheus-1b")


def test_made_checkpoint_loads_in_the_references_and_ours(tmp_path):
    out = maker.make_checkpoint("orpheus-3b", str(tmp_path / "ckpt"), device="cpu", progress=lambda m: None,
                                configs=tiny_configs(), max_shard_bytes=4 * 10**6)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for name in ("config.json", "generation_config.json", "snac/config.json", "snac/pytorch_model.bin",
                 "README.voxrt.txt", *shards):
        assert (out / name).is_file(), name
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [128258, 128262]

    from transformers import LlamaForCausalLM  # noqa: PLC0415

    ref = LlamaForCausalLM.from_pretrained(str(out), torch_dtype=torch.bfloat16)
    assert ref.config.tie_word_embeddings and ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()
    lm = load_lm(out)
    assert lm.head_weight.dtype == torch.bfloat16
    ours, theirs = lm.state_dict(), ref.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in ours.items())

    snac_dir = checkpoint.snac_dir(out)
    assert snac_dir == out / "snac"
    codec = load_snac(snac_dir, noise="off")
    audio = codec.decode([torch.zeros(1, n, dtype=torch.int64) for n in (1, 2, 4)])
    assert audio.shape == (1, 1, 4 * 64) and torch.isfinite(audio).all()
    with pytest.raises(CheckpointError, match="lacks tokenizer.json"):
        maker.make_checkpoint("orpheus-3b", str(tmp_path / "other"), tokenizer_dir=str(tmp_path), device="cpu",
                              progress=lambda m: None, configs=tiny_configs())


def test_tokenizer_files_are_copied_when_given(tmp_path):
    source = tmp_path / "tok"
    source.mkdir()
    (source / "tokenizer.json").write_text("{}")
    (source / "tokenizer_config.json").write_text("{}")
    out = maker.make_checkpoint("orpheus-3b", str(tmp_path / "ckpt"), tokenizer_dir=str(source), device="cpu",
                                progress=lambda m: None, configs=tiny_configs())
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    checkpoint.check_lm_dir(out, need_tokenizer=True)


def test_without_a_tokenizer_dir_the_checkpoint_serves_with_the_test_tokenizer(tmp_path):
    """No --tokenizer-dir: the byte-level test tokenizer is written (BOS at Llama-3's id), and the checkpoint
    loads as the served program, marked random."""
    from voxrt.models.orpheus.program import load_program  # noqa: PLC0415

    out = maker.make_checkpoint("orpheus-3b", str(tmp_path / "ckpt"), device="cpu", progress=lambda m: None,
                                configs=tiny_configs())
    program = load_program(out)
    assert program.random_weights and program.spec.eos_code is None
    ids, spans = program.tokenize("Hi there")
    assert len(ids) == len("Hi there") and spans[0] == (0, 1)
    from tokenizers import Tokenizer  # noqa: PLC0415
    assert Tokenizer.from_file(str(out / "tokenizer.json")).encode("Hi").ids[0] == 128000
