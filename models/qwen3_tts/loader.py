"""Finding a Qwen3-TTS checkpoint on disk: a local directory, or a Hugging Face repo id resolved in the local
cache only (voxrt never downloads at run time). Missing pieces raise `CheckpointError` naming what is missing
and how to get it.

The released layout (`Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`): config.json, generation_config.json,
model.safetensors (or shards with model.safetensors.index.json), the Qwen2 BPE tokenizer files (vocab.json,
merges.txt, tokenizer_config.json), and the codec in `speech_tokenizer/` (config.json, model.safetensors);
the codec is also published alone as `Qwen/Qwen3-TTS-Tokenizer-12Hz`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from voxrt.engine.errors import CheckpointError

log = logging.getLogger("voxrt.models.qwen3_tts")

CODEC_REPO = "Qwen/Qwen3-TTS-Tokenizer-12Hz"
_HOW = ("download it on a machine with network access (`huggingface-cli download {repo}`) and copy the "
        "Hugging Face cache here (HF_HOME), or pass --checkpoint with a local directory")


def resolve(name_or_path: str) -> Path:
    """A directory holding the checkpoint: the path itself, or the repo's snapshot in the local HF cache."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"checkpoint {name_or_path!r} is a file; expected a directory in the released layout")
    if name_or_path.count("/") != 1 or name_or_path.startswith((".", "/", "~")):
        raise CheckpointError(f"checkpoint directory {name_or_path!r} does not exist (nor is it a repo id like "
                              f"'Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice')")
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415
        from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover (a dependency of transformers)
        raise CheckpointError("huggingface_hub is needed to resolve repo ids; pass a local directory") from exc
    try:
        return Path(snapshot_download(name_or_path, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise CheckpointError(f"{name_or_path} is not in the local Hugging Face cache ({cache}); "
                              + _HOW.format(repo=name_or_path)) from None


def check_model_dir(model_dir: Path) -> None:
    missing = [name for name in ("config.json",) if not (model_dir / name).is_file()]
    if not ((model_dir / "model.safetensors").is_file() or (model_dir / "model.safetensors.index.json").is_file()):
        missing.append("model.safetensors (or model.safetensors.index.json and its shards)")
    has_bpe = (model_dir / "vocab.json").is_file() and (model_dir / "merges.txt").is_file()
    if not has_bpe and not (model_dir / "tokenizer.json").is_file():
        missing.append("tokenizer files (vocab.json + merges.txt, or tokenizer.json)")
    if missing:
        raise CheckpointError(f"checkpoint {model_dir} is missing: {', '.join(missing)}")


def codec_dir(model_dir: Path, codec: str | None = None) -> Path:
    """The codec: an explicit path or repo, else `speech_tokenizer/` inside the model, else the codec repo in
    the local cache."""
    candidates = [codec] if codec else []
    if (model_dir / "speech_tokenizer" / "config.json").is_file():
        return model_dir / "speech_tokenizer"
    candidates.append(CODEC_REPO)
    errors = []
    for candidate in candidates:
        try:
            found = resolve(candidate)
        except CheckpointError as exc:
            errors.append(exc.message)
            continue
        if (found / "config.json").is_file() and (found / "model.safetensors").is_file():
            return found
        errors.append(f"{found} lacks config.json or model.safetensors")
    raise CheckpointError(f"no codec for {model_dir}: expected speech_tokenizer/ inside it, or {CODEC_REPO}; "
                          + "; ".join(errors))


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None


def load_state(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors checkpoint, single file or sharded."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        missing = [s for s in shards if not (directory / s).is_file()]
        if missing:
            raise CheckpointError(f"checkpoint {directory} is missing shards: {', '.join(missing)}")
    else:
        shards = ["model.safetensors"]
    start = time.monotonic()
    state: dict[str, torch.Tensor] = {}
    for i, shard in enumerate(shards, 1):  # progress on long starts: a 1.7B checkpoint is several GB
        path = directory / shard
        log.info("loading weights %d/%d: %s (%.2f GB)", i, len(shards), path, path.stat().st_size / 1e9)
        state.update(load_file(str(path)))
    log.info("loaded %d tensors from %s in %.1f s", len(state), directory, time.monotonic() - start)
    return state


def load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """`load_state_dict(strict=True)` with an error that lists the missing and unexpected keys: a wrong key
    must never leave random weights in place silently."""
    expected = set(module.state_dict())
    missing = sorted(expected - set(state))
    unexpected = sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{what}: {len(missing)} missing keys {missing[:8]}, "
                              f"{len(unexpected)} unexpected keys {unexpected[:8]}")
    module.load_state_dict(state, strict=True)
