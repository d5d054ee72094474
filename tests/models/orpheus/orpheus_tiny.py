"""Tiny random Orpheus checkpoints in the released layouts, written by the references themselves: a Llama
checkpoint by transformers' `LlamaForCausalLM.save_pretrained` (config.json + safetensors, tied head as
released, optionally sharded), a SNAC repo directory by the `snac` package's `SNAC` (config.json +
pytorch_model.bin, which `SNAC.from_pretrained` loads). Weights are perturbed away from their initial values
(norm weights of 1, weight-norm gains equal to |v|, Snake alphas of 1) so that a wrongly mapped tensor shows."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from voxrt.models.orpheus.tokens import CUSTOM_TOKEN_BASE, NUM_AUDIO_TOKENS

# Orpheus's ids need the real vocabulary size; the width is what makes it tiny.
VOCAB_SIZE = 156940
assert VOCAB_SIZE >= CUSTOM_TOKEN_BASE + 10 + NUM_AUDIO_TOKENS
TINY_LLAMA = dict(
    vocab_size=VOCAB_SIZE, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072,
    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192},
    bos_token_id=128000, eos_token_id=128009, tie_word_embeddings=True,
    initializer_range=0.3)  # wide enough that greedy decoding does not just repeat one token
# The released 24 kHz layout (strides 4 2 1, depthwise, noise), narrow: 2 decoder rates, 64 samples a latent frame.
TINY_SNAC = dict(sampling_rate=24000, encoder_dim=4, encoder_rates=[2, 4, 8], decoder_dim=32, decoder_rates=[8, 8],
                 attn_window_size=None, codebook_size=4096, codebook_dim=8, vq_strides=[4, 2, 1], noise=True,
                 depthwise=True)
# 512 samples a latent frame like the release, so a frame is 2048 samples and the reference streamer's slice
# (2048..4096) means what it means there; narrow channels keep it fast.
TINY_SNAC_512 = dict(TINY_SNAC, encoder_rates=[2, 4, 8, 8], decoder_dim=32, decoder_rates=[8, 8, 4, 2])


def perturb(model: torch.nn.Module, seed: int, scale: float = 0.1) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * scale
            if name.endswith(("layernorm.weight", "norm.weight", "alpha", "original0")):
                p.mul_(1 + noise).abs_()  # positive gains near their initial values
            else:
                p.add_(noise)


def write_llama(directory: Path, seed: int = 0, max_shard_size: str | None = None, **overrides):
    """A random LlamaForCausalLM saved in the released layout; returns the reference model (float32, eval)."""
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    torch.manual_seed(seed)
    config = LlamaConfig(**{**TINY_LLAMA, **overrides})
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).eval()
    perturb(model, seed)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(directory, safe_serialization=True, **kwargs)
    return model


def write_snac(directory: Path, config: dict = TINY_SNAC, seed: int = 0):
    """A random `snac.SNAC` saved as its repo is laid out; returns the reference model (eval)."""
    from snac import SNAC  # noqa: PLC0415

    torch.manual_seed(seed)
    model = SNAC(**config).eval()
    perturb(model, seed)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    return model


def silence_noise(snac_model) -> None:
    """The reference's NoiseBlocks as identities (the `noise="off"` of ours)."""
    from snac.layers import NoiseBlock  # noqa: PLC0415

    for module in snac_model.modules():
        if isinstance(module, NoiseBlock):
            module.forward = lambda x: x
