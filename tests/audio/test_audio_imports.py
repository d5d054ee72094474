"""voxrt/audio/ imports numpy, soxr, opuslib, the standard library and itself only (design.md: "pure +
opuslib"): the gateway and tools can use it without torch, and nothing here needs an event loop."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

AUDIO_DIR = Path(__file__).resolve().parents[2] / "voxrt" / "audio"
ALLOWED_THIRD_PARTY = {"numpy", "soxr", "opuslib"}
BANNED_STDLIB = {"asyncio", "socket", "threading", "audioop"}  # no I/O or loops; audioop is deprecated


def top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            names.add("voxrt.audio")  # relative imports stay inside the package
    return names


def test_audio_imports_only_numpy_soxr_opuslib_and_stdlib():
    files = sorted(AUDIO_DIR.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in top_level_imports(path):
            root = name.split(".")[0]
            allowed = (
                name == "voxrt.audio"
                or name.startswith("voxrt.audio.")
                or root in ALLOWED_THIRD_PARTY
                or (root in sys.stdlib_module_names and root not in BANNED_STDLIB)
            )
            assert allowed, f"{path.name} imports {name}"
