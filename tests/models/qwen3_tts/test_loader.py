"""Checkpoint resolution: local directories, the local Hugging Face cache, and clear errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from voxrt.engine.errors import CheckpointError
from voxrt.models.qwen3_tts import loader


def _complete(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}")
    (directory / "vocab.json").write_text("{}")
    (directory / "merges.txt").write_text("#version: 0.2\n")
    save_file({"w": torch.zeros(2)}, str(directory / "model.safetensors"))
    return directory


def test_local_directory_resolves_and_missing_files_are_named(tmp_path):
    model = _complete(tmp_path / "model")
    assert loader.resolve(str(model)) == model
    loader.check_model_dir(model)
    (model / "merges.txt").unlink()
    (model / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors.*tokenizer files"):
        loader.check_model_dir(model)


def test_missing_directory_and_file_are_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        loader.resolve(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        loader.resolve(str(tmp_path / "f"))


def test_repo_id_resolves_from_the_local_cache_only(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache.*huggingface-cli download"):
        loader.resolve("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    # the cache's own layout: models--org--name/refs/main -> snapshots/<commit>/
    repo = cache / "models--Qwen--Qwen3-TTS-12Hz-1.7B-CustomVoice"
    commit = "0123456789abcdef0123456789abcdef01234567"
    _complete(repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    import huggingface_hub.constants as hf_constants
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    found = loader.resolve("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    assert found == repo / "snapshots" / commit
    loader.check_model_dir(found)


def test_codec_inside_the_model_or_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = _complete(tmp_path / "model")
    with pytest.raises(CheckpointError, match="speech_tokenizer"):
        loader.codec_dir(model)
    codec = _complete(tmp_path / "model" / "speech_tokenizer")
    assert loader.codec_dir(model) == codec
    other = _complete(tmp_path / "codec")
    assert loader.codec_dir(_complete(tmp_path / "m2"), str(other)) == other


def test_sharded_state_and_strict_loading(tmp_path):
    directory = tmp_path / "sharded"
    directory.mkdir()
    save_file({"a.weight": torch.ones(2, 2)}, str(directory / "s1.safetensors"))
    save_file({"b.weight": torch.ones(3, 2)}, str(directory / "s2.safetensors"))
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors"}}))
    state = loader.load_state(directory)
    assert set(state) == {"a.weight", "b.weight"}
    module = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 2, bias=False), "b": torch.nn.Linear(2, 3, bias=False)})
    loader.load_strict(module, state, "test")
    assert torch.equal(module["a"].weight, torch.ones(2, 2))
    with pytest.raises(CheckpointError, match=r"1 missing keys \['b.weight'\].*1 unexpected keys \['c.weight'\]"):
        loader.load_strict(module, {"a.weight": torch.ones(2, 2), "c.weight": torch.ones(1)}, "test")
    (directory / "s2.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing shards: s2.safetensors"):
        loader.load_state(directory)
