"""Finding and reading checkpoints in their released layouts, for every model program: a local directory, or
a Hugging Face repo id resolved in the local cache only (voxrt never downloads at run time). Anything missing
or malformed raises `CheckpointError` naming what and how to get it."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import torch

from voxrt.engine.errors import CheckpointError

log = logging.getLogger("voxrt.models")

HOW = ("download it on a machine with network access (`huggingface-cli download {repo}`) and copy the "
       "Hugging Face cache here (HF_HOME), or pass a local directory")


def resolve(name_or_path: str | Path, example: str, how: str = HOW) -> Path:
    """A directory holding a checkpoint: the path itself, or the repo's snapshot in the local HF cache.
    `example`: a repo id the error messages show; `how` (with `{repo}`): how to get a missing one."""
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
    except ImportError as exc:  # pragma: no cover (a dependency of transformers)
        raise CheckpointError("huggingface_hub is needed to resolve repo ids; pass a local directory") from exc
    try:
        return Path(snapshot_download(text, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise CheckpointError(f"{text} is not in the local Hugging Face cache ({cache}); "
                              + how.format(repo=text)) from None


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None


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
    for i, shard in enumerate(shards, 1):  # progress on long starts: a checkpoint is several GB
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


def key_listing(kind: str, keys: list[str], limit: int = 10) -> str:
    """`keys` for an error message: "3 missing keys: a, b, c", at most `limit` named."""
    if not keys:
        return f"no {kind} keys"
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{len(keys)} {kind} keys: {', '.join(keys[:limit])}{more}"


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
        raise CheckpointError(f"{what}: shapes do not match the config: {'; '.join(shapes[:4])} "
                              f"({len(shapes)} tensors of the wrong shape)")
    module.load_state_dict(state, strict=True, assign=assign)
