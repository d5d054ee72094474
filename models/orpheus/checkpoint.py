"""Finding Orpheus's files: a local directory, or a Hugging Face repo id resolved in the local cache only
(voxrt never downloads at run time). Missing pieces raise `CheckpointError` naming what and how to get it.

Released layouts:
- the LM (`canopylabs/orpheus-3b-0.1-ft`): config.json (LlamaForCausalLM), model.safetensors or shards with
  model.safetensors.index.json, the Llama-3 tokenizer with Orpheus's custom tokens (tokenizer.json,
  tokenizer_config.json, special_tokens_map.json);
- the codec (`hubertsiuzdak/snac_24khz`): config.json and pytorch_model.bin, as `SNAC.from_pretrained`
  reads them (snac/snac.py; it calls hf_hub_download for a repo id, which we replace by a cache lookup).

These helpers mirror models/qwen3_tts/loader.py (resolve, load_state, load_strict) with Orpheus's names; both
belong in models/common once that can move.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch

from voxrt.engine.errors import CheckpointError

log = logging.getLogger("voxrt.models.orpheus")

LM_REPO = "canopylabs/orpheus-3b-0.1-ft"
SNAC_REPO = "hubertsiuzdak/snac_24khz"
SNAC_SUBDIR = "snac"  # make_checkpoint writes the codec here; a real download keeps it in its own repo
_HOW = ("download it on a machine with network access (`huggingface-cli download {repo}`) and copy the "
        "Hugging Face cache here (HF_HOME), or pass a local directory")


def resolve(name_or_path: str | Path, example: str = LM_REPO) -> Path:
    """A directory holding a checkpoint: the path itself, or the repo's snapshot in the local HF cache."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"checkpoint {text!r} is a file; expected a directory in the released layout")
    if text.count("/") != 1 or text.startswith((".", "/", "~")):
        raise CheckpointError(f"checkpoint directory {text!r} does not exist (nor is it a repo id like {example!r})")
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415
        from huggingface_hub.errors import LocalEntryNotFoundError  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover (a dependency of transformers and snac)
        raise CheckpointError("huggingface_hub is needed to resolve repo ids; pass a local directory") from exc
    try:
        return Path(snapshot_download(text, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise CheckpointError(f"{text} is not in the local Hugging Face cache ({cache}); "
                              + _HOW.format(repo=text)) from None


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None


def check_lm_dir(model_dir: Path, need_tokenizer: bool = True) -> None:
    missing = [] if (model_dir / "config.json").is_file() else ["config.json"]
    if not ((model_dir / "model.safetensors").is_file() or (model_dir / "model.safetensors.index.json").is_file()):
        missing.append("model.safetensors (or model.safetensors.index.json and its shards)")
    if need_tokenizer and not (model_dir / "tokenizer.json").is_file():
        missing.append("tokenizer.json (the Llama-3 tokenizer with Orpheus's custom tokens)")
    if missing:
        raise CheckpointError(f"Orpheus checkpoint {model_dir} is missing: {', '.join(missing)}")


def snac_dir(model_dir: Path | None = None, snac: str | Path | None = None) -> Path:
    """The codec: an explicit directory or repo id, else `snac/` inside the model directory, else the SNAC repo
    in the local cache. A candidate must hold config.json and pytorch_model.bin (or model.safetensors)."""
    candidates: list[str | Path] = [snac] if snac else []
    if not snac and model_dir is not None and (model_dir / SNAC_SUBDIR).is_dir():
        candidates.append(model_dir / SNAC_SUBDIR)
    if not snac:
        candidates.append(SNAC_REPO)
    errors = []
    for candidate in candidates:
        try:
            found = resolve(candidate, example=SNAC_REPO)
        except CheckpointError as exc:
            errors.append(exc.message)
            continue
        has_weights = (found / "pytorch_model.bin").is_file() or (found / "model.safetensors").is_file()
        if (found / "config.json").is_file() and has_weights:
            return found
        errors.append(f"{found} lacks config.json or pytorch_model.bin")
    raise CheckpointError("no SNAC codec found: " + "; ".join(errors))


def load_state(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors checkpoint, single file or sharded (model.safetensors.index.json)."""
    from safetensors.torch import load_file  # noqa: PLC0415

    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map")
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (directory / s).is_file()]
        if missing:
            raise CheckpointError(f"checkpoint {directory} is missing shards: {', '.join(missing)}")
    elif (directory / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {directory}")
    start = time.monotonic()
    state: dict[str, torch.Tensor] = {}
    for i, shard in enumerate(shards, 1):  # progress on long starts: the 3B checkpoint is ~6.6 GB
        path = directory / shard
        log.info("loading weights %d/%d: %s (%.2f GB)", i, len(shards), path, path.stat().st_size / 1e9)
        try:
            state.update(load_file(str(path)))
        except Exception as exc:  # noqa: BLE001 (a truncated or foreign file: say which)
            raise CheckpointError(f"cannot read {path}: {exc}") from None
    if index.is_file():
        absent = sorted(set(weight_map) - set(state))
        if absent:
            raise CheckpointError(f"{index} lists tensors its shards lack: {absent[:8]}")
    log.info("loaded %d tensors from %s in %.1f s", len(state), directory, time.monotonic() - start)
    return state


def load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str, assign: bool = False) -> None:
    """`load_state_dict(strict=True)` with an error that lists the missing and unexpected keys and any shape
    mismatch: a wrong key must never leave random weights in place silently."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{what}: {len(missing)} missing keys {missing[:8]}, "
                              f"{len(unexpected)} unexpected keys {unexpected[:8]}")
    shapes = [f"{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})"
              for k, v in expected.items() if state[k].shape != v.shape]
    if shapes:
        raise CheckpointError(f"{what}: shapes do not match the config: {'; '.join(shapes[:4])}")
    module.load_state_dict(state, strict=True, assign=assign)
