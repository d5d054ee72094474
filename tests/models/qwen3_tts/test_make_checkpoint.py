"""`voxrt make-checkpoint` writes the released layout; our loader serves what it wrote."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from voxrt.engine.errors import CheckpointError
from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
from voxrt.models.qwen3_tts import make_checkpoint as maker


_RELEASED = maker.arch_config


def _shrunk(arch: str) -> dict:
    """The released config with small widths (the maker's code path, a CPU-sized model)."""
    config = _RELEASED(arch)
    talker = config["talker_config"]
    talker.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, text_hidden_size=64)
    talker["rope_scaling"]["mrope_section"] = [6, 5, 5]
    talker["code_predictor_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    return config


def test_released_configs_parse_for_both_sizes():
    from voxrt.models.qwen3_tts.config import Qwen3TTSConfig

    big = Qwen3TTSConfig.from_dict(maker.arch_config("qwen3-tts-1.7b")).talker
    small = Qwen3TTSConfig.from_dict(maker.arch_config("qwen3-tts-0.6b")).talker
    assert (big.lm.hidden_size, big.lm.num_layers) == (2048, 28)
    assert (small.lm.hidden_size, small.lm.num_layers) == (1024, 28)
    with pytest.raises(CheckpointError, match="available: qwen3-tts-1.7b, qwen3-tts-0.6b"):
        maker.arch_config("qwen3-tts-9b")


def test_made_checkpoint_loads_and_generates(tmp_path, monkeypatch):
    monkeypatch.setattr(maker, "arch_config", lambda arch: _shrunk(arch))
    codec_cfg = json.loads((maker.CONFIGS / "qwen3-tts-tokenizer-12hz.json").read_text())
    dec = codec_cfg["decoder_config"]
    dec.update(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=2, head_dim=16, latent_dim=32, codebook_dim=16, decoder_dim=32,
               vector_quantization_hidden_dimension=16)
    small_codec = tmp_path / "configs"
    small_codec.mkdir()
    (small_codec / "qwen3-tts-tokenizer-12hz.json").write_text(json.dumps(codec_cfg))
    (small_codec / "qwen3-tts-1.7b-customvoice.json").write_text(
        (maker.CONFIGS / "qwen3-tts-1.7b-customvoice.json").read_text())
    monkeypatch.setattr(maker, "CONFIGS", small_codec)
    out = maker.make_checkpoint("qwen3-tts-1.7b", str(tmp_path / "ckpt"), device="cpu", progress=lambda m: None)
    for name in ("config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt",
                 "speech_tokenizer/config.json", "speech_tokenizer/model.safetensors",
                 "speech_tokenizer/preprocessor_config.json", "README.voxrt.txt"):
        assert (out / name).is_file(), name
    # the reference loaders read the feature extractor from speech_tokenizer/ (qwen_tts Qwen3TTSTokenizer)
    from transformers import AutoFeatureExtractor  # noqa: PLC0415

    extractor = AutoFeatureExtractor.from_pretrained(str(out / "speech_tokenizer"))
    assert type(extractor).__name__ == "EncodecFeatureExtractor" and extractor.sampling_rate == 24000
    features = extractor(raw_audio=[np.zeros(4800, dtype=np.float32)], sampling_rate=24000, return_tensors="pt")
    assert tuple(features["input_values"].shape) == (1, 1, 4800)
    torch.set_num_threads(1)
    core = EngineCore(EngineConfig(model="qwen3-tts", checkpoint=str(out), device="cpu", max_batch_size=2,
                                   max_seq_len=256))
    assert core.info.voices and core.info.sample_rate == 24000
    request = core.submit(SubmitRequest("r", core.info.default_voice, SamplingParams(greedy=True, num_frames=5),
                                        "Hello from a random checkpoint.", True))
    chunks = []
    while core.has_work():
        chunks += core.step()
    assert request.num_frames == 5 and request.finish_reason == "pinned"
    assert sum(c.num_samples for c in chunks) == 5 * 1920
    core.scheduler.check_integrity()


def test_missing_tokenizer_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(CheckpointError, match="lacks vocab.json"):
        maker._tokenizer_source(str(tmp_path))
