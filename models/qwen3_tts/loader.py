"""Finding a Qwen3-TTS checkpoint on disk: a local directory, or a Hugging Face repo id resolved in the local
cache only (voxrt never downloads at run time). Missing pieces raise `CheckpointError` naming what is missing
and how to get it.

The released layout (`Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`): config.json, generation_config.json,
model.safetensors (or shards with model.safetensors.index.json), the Qwen2 BPE tokenizer files (vocab.json,
merges.txt, tokenizer_config.json), and the codec in `speech_tokenizer/` (config.json, model.safetensors);
the codec is also published alone as `Qwen/Qwen3-TTS-Tokenizer-12Hz`.
"""

from __future__ import annotations

from pathlib import Path

from voxrt.engine.errors import CheckpointError
from voxrt.models.common import checkpoint as _common
from voxrt.models.common.checkpoint import load_state, load_strict, read_json  # noqa: F401 (this module's API)

CODEC_REPO = "Qwen/Qwen3-TTS-Tokenizer-12Hz"
_HOW = ("download it on a machine with network access (`huggingface-cli download {repo}`) and copy the "
        "Hugging Face cache here (HF_HOME), or pass --checkpoint with a local directory")


def resolve(name_or_path: str) -> Path:
    """A directory holding the checkpoint: the path itself, or the repo's snapshot in the local HF cache."""
    return _common.resolve(name_or_path, "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", _HOW)


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
