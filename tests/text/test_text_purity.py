"""voxrt/text is pure: standard library only, and no clocks, event loops, sockets, threads or randomness.

Checked statically (every file parsed with `ast`, none imported), like tests/test_boundaries.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

TEXT_DIR = Path(__file__).resolve().parents[2] / "voxrt" / "text"
FILES = sorted(TEXT_DIR.rglob("*.py"))
BANNED = {"asyncio", "time", "socket", "threading", "random", "torch", "numpy"}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_the_package_is_found():
    assert {p.name for p in FILES} >= {"__init__.py", "segmenter.py", "boundaries.py", "speakable.py"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_imports_only_the_standard_library(path):
    for module in imported_modules(path):
        top = module.split(".")[0]
        if module.startswith(".") or module == "voxrt.text" or module.startswith("voxrt.text."):
            continue
        assert top in sys.stdlib_module_names and top != "voxrt", f"{path.name} imports {module}"
        assert top not in BANNED, f"{path.name} imports {module}: voxrt/text must stay pure"
