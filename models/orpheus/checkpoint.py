"""Finding Orpheus's files: a local directory, or a Hugging Face repo id resolved in the local cache only
(voxrt never downloads at run time). Missing pieces raise `CheckpointError` naming what and how to get it.

Released layouts:
- the LM (`canopylabs/orpheus-3b-0.1-ft`): config.json (LlamaForCausalLM), model.safetensors or shards with
  model.safetensors.index.json, the Llama-3 tokenizer with Orpheus's custom tokens (tokenizer.json,
  tokenizer_config.json, special_tokens_map.json);
- the codec (`hubertsiuzdak/snac_24khz`): config.json and pytorch_model.bin, as `SNAC.from_pretrained`
  reads them (snac/snac.py; it calls hf_hub_download for a repo id, which we replace by a cache lookup).

Reading them (resolve, read_json, load_state, load_strict) is models/common/checkpoint.py's, shared with
Qwen3-TTS's loader.
"""

from __future__ import annotations

from pathlib import Path

from voxrt.engine.errors import CheckpointError
from voxrt.models.common import checkpoint as _common
from voxrt.models.common.checkpoint import load_state, load_strict, read_json  # noqa: F401 (this module's API)

LM_REPO = "canopylabs/orpheus-3b-0.1-ft"
SNAC_REPO = "hubertsiuzdak/snac_24khz"
SNAC_SUBDIR = "snac"  # make_checkpoint writes the codec here; a real download keeps it in its own repo


def resolve(name_or_path: str | Path, example: str = LM_REPO) -> Path:
    """A directory holding a checkpoint: the path itself, or the repo's snapshot in the local HF cache."""
    return _common.resolve(name_or_path, example)


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
