"""`voxrt make-checkpoint --arch orpheus-3b DIR`: a full-size Orpheus 3B checkpoint with RANDOM weights in the
released layouts, for benchmarks on machines that cannot download the real one (compute cost does not depend
on weight values).

Written: config.json (canopylabs/orpheus-3b-0.1-ft's LlamaForCausalLM config), generation_config.json (the
reference's sampling: tokens.SAMPLING_DEFAULTS, stop on end_of_speech), model-0000i-of-0000n.safetensors
with model.safetensors.index.json (bf16, tied head as released: no lm_head.weight), and snac/ holding the
SNAC 24 kHz codec's config.json and pytorch_model.bin with the decoding half of its state (the `decoder.*`
and the quantizers' codebooks and out_proj, in the release's key names; the encoder and in_proj, used only
to encode audio, are left out, so `SNAC.from_pretrained` would refuse it while our loader takes it).
The tokenizer: `tokenizer_dir`'s (its tokenizer.json, tokenizer_config.json, special_tokens_map.json are
copied), else a byte-level test tokenizer (`write_byte_tokenizer`; the Llama-3 vocabulary ships with no
package here), so that the checkpoint serves as it is; its prompts are ~4x longer than Llama-3's would be. A random model never
learns to stop: voxrt.json marks the weights random (program.py then ends a generation by a length rule, and
never samples a stop token); pin output lengths for benchmarks.

`--arch orpheus-tiny`: the same layout at toy width (2 layers of 32, the real 156,940-token vocabulary, a SNAC
decoder of 32 channels with the release's 2048 samples a frame), so that `voxrt serve --model orpheus
--checkpoint DIR` runs anywhere: the CI's Orpheus pass and the docs' try-it. The byte-level test tokenizer
(`tokenizers`; <|begin_of_text|> at Llama-3's id 128000, one token per byte) is no Llama-3 tokenizer.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file

from voxrt.engine.errors import CheckpointError
from voxrt.models.orpheus import tokens
from voxrt.models.orpheus.checkpoint import SNAC_SUBDIR

ARCHS = ("orpheus-3b", "orpheus-tiny")
# canopylabs/orpheus-3b-0.1-ft config.json (Llama-3.2-3B-Instruct's shape with the vocabulary grown to 156,940)
ORPHEUS_3B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": tokens.BEGIN_OF_TEXT, "eos_token_id": tokens.END_OF_TEXT, "pad_token_id": 128004,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False, "num_attention_heads": 24,
    "num_hidden_layers": 28, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 156940,
}
# hubertsiuzdak/snac_24khz config.json
SNAC_24KHZ_CONFIG = {"sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8], "decoder_dim": 1024,
                     "decoder_rates": [8, 8, 4, 2], "attn_window_size": None, "codebook_size": 4096,
                     "codebook_dim": 8, "vq_strides": [4, 2, 1], "noise": True, "depthwise": True}
GENERATION_CONFIG = {"bos_token_id": tokens.BEGIN_OF_TEXT, "eos_token_id": list(tokens.STOP_TOKEN_IDS),
                     "do_sample": True, "temperature": tokens.SAMPLING_DEFAULTS["temperature"],
                     "top_p": tokens.SAMPLING_DEFAULTS["top_p"],
                     "repetition_penalty": tokens.SAMPLING_DEFAULTS["repetition_penalty"],
                     "max_new_tokens": tokens.SAMPLING_DEFAULTS["max_tokens"]}
# orpheus-tiny: a toy width, the real vocabulary (Orpheus's ids need it); the release's 2048 samples a frame
ORPHEUS_TINY_CONFIG = dict(
    ORPHEUS_3B_CONFIG, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, torch_dtype="float32", initializer_range=0.3)
SNAC_TINY_CONFIG = dict(SNAC_24KHZ_CONFIG, encoder_dim=4, decoder_dim=32)
TINY_FRAMES_PER_TEXT_TOKEN = 0.8  # a byte a token: ~14 characters an audio second (11.7 frames), as speech
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
MAX_SHARD_BYTES = 5 * 10**9  # transformers' default shard size


def arch_config(arch: str) -> tuple[dict, dict]:
    """(LM config, SNAC config) of `arch`, fresh copies."""
    if arch not in ARCHS:
        raise CheckpointError(f"unknown arch {arch!r}; available: {', '.join(ARCHS)}")
    if arch == "orpheus-tiny":
        return copy.deepcopy(ORPHEUS_TINY_CONFIG), copy.deepcopy(SNAC_TINY_CONFIG)
    return copy.deepcopy(ORPHEUS_3B_CONFIG), copy.deepcopy(SNAC_24KHZ_CONFIG)


def write_byte_tokenizer(out: Path) -> None:
    """A byte-level tokenizer.json (one token per byte, ids 0..255) whose post-processor puts
    <|begin_of_text|> (id 128000, as Llama-3's) in front, as the real one does: a test tokenizer."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors  # noqa: PLC0415
    except ImportError:
        raise CheckpointError("orpheus-tiny's test tokenizer needs the `tokenizers` package") from None
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: i for i, char in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    bos = "<|begin_of_text|>"
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                             special_tokens=[(bos, tokens.BEGIN_OF_TEXT)])
    tokenizer.save(str(out / "tokenizer.json"))


def save_sharded(state: dict[str, torch.Tensor], out: Path, max_shard_bytes: int = MAX_SHARD_BYTES) -> list[str]:
    """transformers' sharded layout: model-0000i-of-0000n.safetensors and model.safetensors.index.json."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    weight_map = {}
    for name, shard in zip(names, shards):
        save_file(shard, str(out / name), metadata={"format": "pt", "voxrt": "random weights"})
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(t.numel() * t.element_size() for t in state.values())
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return names


def make_checkpoint(arch: str, out_dir: str, tokenizer_dir: str | None = None, device: str = "auto", seed: int = 0,
                    progress: Callable[[str], None] = print, *, configs: tuple[dict, dict] | None = None,
                    max_shard_bytes: int = MAX_SHARD_BYTES) -> Path:
    """`configs`: (LM, SNAC) configs instead of the arch's (tests write a tiny one through the same path)."""
    from voxrt.models.orpheus.llama import LlamaConfig, OrpheusLM  # noqa: PLC0415
    from voxrt.models.orpheus.snac import SnacConfig, SnacDecoder  # noqa: PLC0415

    lm_config, snac_config = configs if configs is not None else arch_config(arch)
    is_tiny = configs is None and arch == "orpheus-tiny"
    tokenizer = Path(tokenizer_dir) if tokenizer_dir else None
    if tokenizer is not None and not (tokenizer / "tokenizer.json").is_file():
        raise CheckpointError(f"{tokenizer} lacks tokenizer.json (the Llama-3 tokenizer with Orpheus's custom tokens)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    torch.manual_seed(seed)
    t0 = time.monotonic()
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32 if is_tiny else torch.bfloat16)  # the checkpoint's dtype: 6.6 GB, not 13
    try:
        with torch.device(dev):
            lm = OrpheusLM(LlamaConfig.from_dict(lm_config))
    finally:
        torch.set_default_dtype(default_dtype)
    state = {k: v.detach().cpu().contiguous() for k, v in lm.state_dict().items()}
    del lm
    num_params = sum(t.numel() for t in state.values())
    progress(f"LM: {num_params / 1e9:.2f} B parameters, initialized in {time.monotonic() - t0:.1f} s; writing ...")
    save_sharded(state, out, max_shard_bytes)
    del state
    (out / "config.json").write_text(json.dumps(lm_config, indent=2))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    for name in TOKENIZER_FILES:
        if tokenizer is not None and (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, out / name)
    if tokenizer is None:
        write_byte_tokenizer(out)
    marker = {"random_weights": True, "arch": arch}
    if is_tiny:
        marker["frames_per_text_token"] = TINY_FRAMES_PER_TEXT_TOKEN
    (out / "voxrt.json").write_text(json.dumps(marker, indent=2))
    with torch.device(dev):
        codec = SnacDecoder(SnacConfig.from_dict(snac_config))
    codec_state = {k: v.detach().float().cpu().contiguous() for k, v in codec.state_dict().items()}
    (out / SNAC_SUBDIR).mkdir(exist_ok=True)
    (out / SNAC_SUBDIR / "config.json").write_text(json.dumps(snac_config, indent=2))
    torch.save(codec_state, out / SNAC_SUBDIR / "pytorch_model.bin")
    (out / "README.voxrt.txt").write_text(
        f"Made by `voxrt make-checkpoint --arch {arch}`: RANDOM weights in Orpheus's released layout (the LM as\n"
        "canopylabs/orpheus-3b-0.1-ft, the codec in snac/ as hubertsiuzdak/snac_24khz with its decoding half only),\n"
        f"for benchmarks only. Tokenizer: {'copied from ' + str(tokenizer) if tokenizer else 'a byte-level test tokenizer (not Llama-3)'}. The audio is noise;\n"
        "pin output lengths.\n")
    progress(f"wrote {out} in {time.monotonic() - t0:.1f} s")
    return out
