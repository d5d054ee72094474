"""Import boundaries, checked statically: every .py file is parsed with `ast`, none is imported.

- The pure core (voxrt/engine/sched/, messages.py, errors.py, params.py, headroom.py, client.py,
  replicas.py) imports no torch, asyncio, time, socket or starlette (client.py and replicas.py, the engine's
  I/O edge in the gateway's process, may use asyncio, time and socket: the client joins an engine over a Unix
  socket and shuts that socket down to wake its reader thread).
- Nothing under voxrt/engine imports starlette or uvicorn, voxrt.gateway or voxrt.loadgen.
- Nothing anywhere imports a top-level `models` package: `models/` ships as `voxrt.models`.
- Nothing under models/ imports voxrt.gateway.
- The sched modules do not import voxrt.engine.runtime.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__", "site-packages"}
PURE_BANNED = ("torch", "asyncio", "socket", "time", "starlette")


def _skipped_dir(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg-info")


def python_files() -> list[Path]:
    """Every .py file of the repository, walked without following symlinks (voxrt/models links to
    models/ for editable installs: each file is checked once, under its real path)."""
    found = []
    for folder, dirs, files in os.walk(ROOT, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not _skipped_dir(d))
        found.extend(Path(folder) / f for f in files if f.endswith(".py") and not (Path(folder) / f).is_symlink())
    return sorted(found)


def module_name(rel: Path) -> str:
    """Dotted module name of a repo-relative file (`models/` is installed as `voxrt.models`)."""
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "models":
        parts = ["voxrt", *parts]
    return ".".join(parts)


def _resolve(rel: Path, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    package = module_name(rel).split(".")
    if rel.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*base, *([module] if module else [])])


def imports_of_source(source: str, rel: Path) -> set[str]:
    """Every module a file may import: `import a.b`, `from a import b` (a and a.b: b may be a module),
    relative imports resolved, and importlib.import_module / __import__ of a string literal. Imports
    inside functions and `if TYPE_CHECKING:` blocks count too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(rel))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(rel, node.level, node.module)
            if base:
                found.add(base)
            for alias in node.names:
                if alias.name != "*":
                    found.add(f"{base}.{alias.name}" if base else alias.name)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in ("import_module", "__import__"):
                found.add(node.args[0].value)
    return found


def imports_of(path: Path) -> set[str]:
    rel = path.relative_to(ROOT)
    return imports_of_source(path.read_text(encoding="utf-8"), rel)


def hits(imported: set[str], banned: str) -> list[str]:
    return sorted(m for m in imported if m == banned or m.startswith(banned + "."))


def under(rel: Path, folder: str) -> bool:
    return rel.as_posix().startswith(folder.rstrip("/") + "/")


ALL = python_files()
REL = [p.relative_to(ROOT) for p in ALL]
PURE_FILES = [p for p, r in zip(ALL, REL) if under(r, "voxrt/engine/sched") or r.as_posix() in {
    "voxrt/engine/messages.py", "voxrt/engine/errors.py", "voxrt/engine/params.py", "voxrt/engine/client.py",
    "voxrt/engine/headroom.py", "voxrt/engine/replicas.py"}]
IO_EDGE_FILES = {"voxrt/engine/client.py", "voxrt/engine/replicas.py"}  # may use asyncio, time and socket


def _ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


# ---- the checker itself ------------------------------------------------------------------------------------


def test_the_walker_finds_the_code():
    rels = {r.as_posix() for r in REL}
    for expected in ("voxrt/engine/sched/scheduler.py", "voxrt/engine/sched/pages.py", "voxrt/engine/params.py",
                     "voxrt/engine/errors.py", "voxrt/engine/messages.py", "models/registry.py"):
        assert expected in rels
    assert not any(r.parts[0] == ".venv" for r in REL)
    assert len(rels) == len(REL)
    assert not any(r.as_posix().startswith("voxrt/models/") for r in REL)  # the symlink is not followed
    assert len([p for p in PURE_FILES if under(p.relative_to(ROOT), "voxrt/engine/sched")]) >= 7


def test_the_import_collector_sees_every_form():
    src = (
        "import torch.nn as nn\n"
        "from time import monotonic\n"
        "from . import runtime\n"
        "from ..runtime import core\n"
        "def f():\n"
        "    import asyncio\n"
        "    importlib.import_module('socket')\n"
        "    return __import__('starlette.routing')\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import uvicorn\n"
    )
    found = imports_of_source(src, Path("voxrt/engine/sched/x.py"))
    assert hits(found, "torch") == ["torch.nn"]
    assert hits(found, "time") == ["time", "time.monotonic"]
    assert "voxrt.engine.sched.runtime" in found
    assert hits(found, "voxrt.engine.runtime") == ["voxrt.engine.runtime", "voxrt.engine.runtime.core"]
    for name in ("asyncio", "socket", "starlette.routing", "uvicorn"):
        assert name in found
    assert not hits({"timeit", "torchaudio_x", "models_extra"}, "time")
    # models/ is the package voxrt.models: its relative imports resolve there, not to a top-level `models`.
    found = imports_of_source("from ..common import layers\nfrom . import codec\n", Path("models/tiny/program.py"))
    assert found == {"voxrt.models.common", "voxrt.models.common.layers", "voxrt.models.tiny",
                     "voxrt.models.tiny.codec"}
    assert hits(imports_of_source("from models.tiny import program\n", Path("bench/x.py")), "models")
    assert hits(imports_of_source("import models\n", Path("bench/x.py")), "models")


# ---- the boundaries ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PURE_FILES, ids=_ids(PURE_FILES))
def test_pure_core_imports_no_torch_asyncio_socket_time_starlette(path):
    rel = path.relative_to(ROOT)
    imported = imports_of(path)
    banned = [b for b in PURE_BANNED
              if not (b in ("asyncio", "time", "socket") and rel.as_posix() in IO_EDGE_FILES)]
    bad = {b: hits(imported, b) for b in banned if hits(imported, b)}
    assert not bad, f"{rel} imports {bad}"


SCHED_FILES = [p for p in ALL if under(p.relative_to(ROOT), "voxrt/engine/sched")]


@pytest.mark.parametrize("path", SCHED_FILES, ids=_ids(SCHED_FILES))
def test_sched_does_not_import_runtime(path):
    bad = hits(imports_of(path), "voxrt.engine.runtime")
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


ENGINE_FILES = [p for p in ALL if under(p.relative_to(ROOT), "voxrt/engine")]


@pytest.mark.parametrize("path", ENGINE_FILES, ids=_ids(ENGINE_FILES))
def test_engine_imports_no_web_framework(path):
    imported = imports_of(path)
    bad = hits(imported, "starlette") + hits(imported, "uvicorn")
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", ENGINE_FILES, ids=_ids(ENGINE_FILES))
def test_engine_imports_no_gateway_and_no_load_generator(path):
    """Arrows point down: the gateway and the load generator use the engine, never the other way (the
    scheduler's simulation shares the listener from engine/sched/listener.py)."""
    imported = imports_of(path)
    bad = hits(imported, "voxrt.gateway") + hits(imported, "voxrt.loadgen")
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", ALL, ids=_ids(ALL))
def test_nothing_imports_a_top_level_models_package(path):
    bad = hits(imports_of(path), "models")
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}; use voxrt.models..."


MODEL_FILES = [p for p in ALL if under(p.relative_to(ROOT), "models")]


@pytest.mark.parametrize("path", MODEL_FILES, ids=_ids(MODEL_FILES))
def test_models_do_not_import_the_gateway(path):
    bad = hits(imports_of(path), "voxrt.gateway")
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


GATEWAY_FILES = [p for p in ALL if under(p.relative_to(ROOT), "voxrt/gateway")]
TORCH_SIDE = ("torch", "voxrt.engine.runtime", "voxrt.models", "numpy.torch")


@pytest.mark.parametrize("path", GATEWAY_FILES, ids=_ids(GATEWAY_FILES))
def test_gateway_never_imports_torch(path):
    """The gateway meets the engine only through EngineClient and the typed messages."""
    imported = imports_of(path)
    bad = [hit for name in TORCH_SIDE for hit in hits(imported, name)]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_gateway_process_does_not_load_torch():
    """Importing the whole gateway (app, server, realtime, http) pulls no torch into the process."""
    import subprocess
    import sys

    code = ("import sys; import voxrt.gateway.server, voxrt.gateway.app, voxrt.cli; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
