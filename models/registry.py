"""Model programs by name. A name maps to a builder `(checkpoint) -> ModelProgram`, imported lazily so
that listing the models imports no torch."""

from __future__ import annotations

import importlib

from voxrt.engine.errors import UnknownModelError

# name -> "module:function"
MODELS: dict[str, str] = {
    "tiny": "voxrt.models.tiny.program:build_tiny",
    "tiny-lite": "voxrt.models.tiny.program:build_tiny_lite",  # tiny with 4 codebooks: the test suites' model
    # Qwen3-TTS 12 Hz CustomVoice: --checkpoint DIR or repo id (local HF cache); the sized names default to
    # the released repos in the cache
    "qwen3-tts": "voxrt.models.qwen3_tts.program:build_qwen3_tts",
    "qwen3-tts-1.7b": "voxrt.models.qwen3_tts.program:build_qwen3_tts_1_7b",
    "qwen3-tts-0.6b": "voxrt.models.qwen3_tts.program:build_qwen3_tts_0_6b",
    # Orpheus 3B (Llama + SNAC 24 kHz): --checkpoint DIR or repo id (default canopylabs/orpheus-3b-0.1-ft in the cache)
    "orpheus": "voxrt.models.orpheus.program:build_orpheus",
    # random weights in the real talker/predictor shapes, toy codec: engine benchmarks only
    "qwen3-tts-1.7b-shape": "voxrt.models.tiny.program:build_qwen3_tts_1_7b_shape",
}


# make-checkpoint architectures: name -> "module:function", a maker `(arch, out_dir, tokenizer_dir, device,
# seed)` that writes full-size random weights in the released layout (benchmarks)
CHECKPOINT_MAKERS: dict[str, str] = {
    "qwen3-tts-1.7b": "voxrt.models.qwen3_tts.make_checkpoint:make_checkpoint",
    "qwen3-tts-0.6b": "voxrt.models.qwen3_tts.make_checkpoint:make_checkpoint",
    "orpheus-3b": "voxrt.models.orpheus.make_checkpoint:make_checkpoint",
    "orpheus-tiny": "voxrt.models.orpheus.make_checkpoint:make_checkpoint",  # toy width and test tokenizer: CI
}


def available_models() -> list[str]:
    return sorted(MODELS)


def available_archs() -> list[str]:
    return sorted(CHECKPOINT_MAKERS)


def make_checkpoint(arch: str, out_dir: str, tokenizer_dir: str | None = None, device: str = "auto", seed: int = 0):
    """Writes a random checkpoint of `arch` (`CHECKPOINT_MAKERS`); an unknown arch is a typed error."""
    try:
        target = CHECKPOINT_MAKERS[arch]
    except KeyError:
        raise UnknownModelError(f"unknown architecture {arch!r}; available: {', '.join(available_archs())}") from None
    module_name, func = target.split(":")
    return getattr(importlib.import_module(module_name), func)(arch, out_dir, tokenizer_dir, device, seed)


def build_program(name: str, checkpoint: str | None = None):
    try:
        target = MODELS[name]
    except KeyError:
        raise UnknownModelError(f"unknown model {name!r}; available: {', '.join(available_models())}") from None
    module_name, func = target.split(":")
    return getattr(importlib.import_module(module_name), func)(checkpoint)
