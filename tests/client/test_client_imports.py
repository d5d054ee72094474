"""The client stays light: websockets and voxrt's sans-I/O protocol package, never torch or the gateway."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parents[2] / "voxrt" / "client"
BANNED = ("torch", "numpy", "starlette", "uvicorn", "voxrt.gateway", "voxrt.engine", "voxrt.models", "voxrt.audio")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_client_modules_import_nothing_heavy():
    files = sorted(CLIENT_DIR.glob("*.py"))
    assert files
    for path in files:
        bad = {name for name in _imports(path) for banned in BANNED if name == banned or name.startswith(banned + ".")}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_the_client_loads_no_torch():
    code = "import sys, voxrt.client; print(sorted(m for m in ('torch', 'numpy', 'voxrt.gateway') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
