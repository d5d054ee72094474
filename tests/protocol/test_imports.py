"""voxrt/protocol is sans-I/O: it imports the standard library (no clocks, sockets or event loops) and itself.
Checked statically with `ast`, like tests/test_boundaries.py; nothing is imported to check it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "voxrt" / "protocol"
FILES = sorted(PACKAGE.rglob("*.py"))
# Standard library modules that read clocks or do I/O: time is always an argument here.
BANNED_STDLIB = {"asyncio", "time", "datetime", "socket", "select", "selectors", "ssl", "threading",
                 "multiprocessing", "subprocess", "concurrent", "os", "io", "random"}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: use absolute imports (voxrt.protocol....)"
            found.add(node.module or "")
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            assert name not in ("import_module", "__import__"), f"{path.name}: no dynamic imports"
    return found


def test_the_walker_finds_the_package():
    names = {p.name for p in FILES}
    assert {"__init__.py", "session.py", "events.py", "frames.py", "clock.py", "config.py", "errors.py",
            "actions.py"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_protocol_imports_only_the_standard_library_and_itself(path):
    bad = []
    for module in imported_modules(path):
        top = module.split(".")[0]
        if module == "voxrt.protocol" or module.startswith("voxrt.protocol."):
            continue
        if top == "__future__" or (top in sys.stdlib_module_names and top not in BANNED_STDLIB):
            continue
        bad.append(module)
    assert not bad, f"{path.name} imports {sorted(bad)}"
