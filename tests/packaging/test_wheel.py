"""The distribution as a user gets it: `python -m build` makes an sdist and, from it, a wheel; the wheel holds
every package of the source tree and its data; installed into a clean venv (no source tree on its path) its
`voxrt` command serves the tiny model, answers HTTP and the browser page, and drains on a real SIGTERM.

The clean venv gets the wheel itself and nothing else; the dependencies (torch and the rest, ~1 GB) are read
from the test environment through a plain path entry, whose own .pth files (the editable install's finder)
are not processed, so `import voxrt` can only find the wheel's copy. `pip check` then confirms that what the
wheel declares is what the serving needs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
DIST_NAME = "voxrt_gateway"


def _copy_tree(dst: Path) -> None:
    """The source tree as a clone has it (symlinks voxrt/models and voxrt/web kept), without build output."""
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache",
                                    "artifacts", ".gpu", "*.wav")
    shutil.copytree(ROOT, dst, symlinks=True, ignore=ignore)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("pkg")
    _copy_tree(work / "src")
    out = work / "dist"
    # without build isolation: the test environment's setuptools (pyproject's test extra), no index needed;
    # the default builds the sdist, then the wheel from the unpacked sdist (so a file the sdist lacks fails here)
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(work / "src")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def _source_packages() -> set[str]:
    packages = set()
    for init in (ROOT / "voxrt").rglob("__init__.py"):  # rglob does not follow symlinks: add models/ below
        packages.add(".".join(init.parent.relative_to(ROOT).parts))
    for init in (ROOT / "models").rglob("__init__.py"):
        packages.add(".".join(("voxrt",) + init.parent.relative_to(ROOT).parts))
    return {p for p in packages if "__pycache__" not in p}


def test_wheel_holds_every_package_and_its_data(dist):
    (wheel,) = dist.glob(f"{DIST_NAME}-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    in_wheel = {".".join(Path(n).parent.parts) for n in names if n.endswith("/__init__.py")}
    expected = _source_packages()
    assert "voxrt.engine.runtime.kernels" in expected and "voxrt.models.tiny" in expected
    assert expected <= in_wheel, sorted(expected - in_wheel)
    assert not [n for n in names if n.split("/")[0] in ("models", "tests", "web", "bench")]  # all under voxrt/
    for path in ["voxrt/py.typed", "voxrt/web/index.html", "voxrt/web/app.js",
                 "voxrt/models/qwen3_tts/configs/qwen3-tts-1.7b-customvoice.json"]:
        assert path in names, path
    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(info).decode()
    assert re.search(r"^Name: voxrt-gateway$", metadata, re.M)
    assert re.search(r"^License-Expression: Apache-2.0$", metadata, re.M)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "voxrt = voxrt.cli:main" in entry_points
    (sdist,) = dist.glob(f"{DIST_NAME}-*.tar.gz")
    members = tarfile.open(sdist).getnames()
    assert any(m.endswith("voxrt/engine/runtime/kernels/__init__.py") for m in members)
    assert any(m.endswith("/LICENSE") for m in members)


def test_wheel_in_a_clean_venv_serves_the_tiny_model_and_drains(dist, tmp_path):
    (wheel,) = dist.glob(f"{DIST_NAME}-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                             "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VOXRT_LOG_LEVEL", "VOXRT_LOG_JSON")}
    where = subprocess.run([str(python), "-c", "import voxrt, voxrt.engine.runtime.kernels; print(voxrt.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout  # the wheel's copy, not the source tree
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "check"], capture_output=True,
                           text=True, timeout=300)
    assert not [line for line in check.stdout.splitlines() if line.lower().startswith(("voxrt-gateway", "voxrt_gateway"))], \
        check.stdout

    server = subprocess.Popen([str(venv / "bin" / "voxrt"), "serve", "--port", "0", "--device", "cpu",
                               "--drain-grace-s", "5", "--log-level", "info"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        port = None
        deadline = time.monotonic() + 240
        while port is None:
            assert time.monotonic() < deadline and server.poll() is None, "".join(lines)
            line = server.stdout.readline()
            lines.append(line)
            found = re.search(r"http://localhost:(\d+)/v1/audio/speech", line)
            port = int(found.group(1)) if found else None
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/readyz", timeout=30).json()["status"] == "ready"
        speech = httpx.post(f"{base}/v1/audio/speech", json={"input": "Hi there.", "voice": "default",
                                                               "response_format": "wav"}, timeout=120)
        assert speech.status_code == 200 and speech.content[:4] == b"RIFF" and len(speech.content) > 44 + 2400
        page = httpx.get(f"{base}/", timeout=30)  # the browser page, from the wheel's voxrt/web
        assert page.status_code == 200 and "<html" in page.text.lower()
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=60)
        lines.append(out)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    log = "".join(lines)
    assert server.returncode in (0, -signal.SIGTERM), log  # uvicorn re-raises the signal after its shutdown
    assert "voxrt.access: http POST /v1/audio/speech 200" in log  # the access line
    assert "voxrt.gateway.drain: draining" in log and "drained in" in log
    assert "Traceback" not in log, log
