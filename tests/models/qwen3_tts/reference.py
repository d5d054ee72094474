"""Imports the Qwen3-TTS reference implementation (`qwen-tts` 0.1.1, Apache-2.0) for parity tests.

The package imports `sox`, `torchaudio` and `gradio` at module level for its 25 Hz tokenizer and its UI,
which the 12 Hz classes never use; they are not installed (torchaudio would pull another torch build), so
empty stand-in packages answer those imports. They are installed only after `transformers` has probed for
torchaudio. Usage: `from reference import M, T` (M: modeling_qwen3_tts, T: the 12 Hz tokenizer module).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

import transformers  # noqa: F401  (must import before the stand-ins exist)


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOTS = ("sox", "torchaudio", "gradio")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


if not any(isinstance(f, _StandIns) for f in sys.meta_path):
    sys.meta_path.insert(0, _StandIns())

from qwen_tts.core.models import configuration_qwen3_tts as C  # noqa: E402
from qwen_tts.core.models import modeling_qwen3_tts as M  # noqa: E402
from qwen_tts.core.tokenizer_12hz import configuration_qwen3_tts_tokenizer_v2 as TC  # noqa: E402
from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as T  # noqa: E402

__all__ = ["C", "M", "T", "TC"]
