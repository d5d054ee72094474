"""docker/: the images cannot be built here (no registry for base images), so this checks what can be checked
without one: the files parse, the commands they run exist (the voxrt CLI's own parser reads them), the files
they copy are in the repository and not excluded by .dockerignore, and their install steps match the project's
setup (scripts/setup.sh, pyproject.toml)."""

from __future__ import annotations

import fnmatch
import io
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from voxrt.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile.*"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUP = (ROOT / "scripts" / "setup.sh").read_text()


def instructions(path: Path) -> list[tuple[str, str]]:
    parser = DockerfileParser(fileobj=io.BytesIO(path.read_bytes()))
    return [(i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"]


def exec_form(value: str) -> list[str]:
    words = json.loads(value)  # exec form only: the shell form would put sh, not voxrt, at PID 1 (no SIGTERM)
    assert isinstance(words, list) and all(isinstance(w, str) for w in words)
    return words


def pip_installs(steps: list[tuple[str, str]]) -> list[list[str]]:
    out = []
    for kind, value in steps:
        if kind == "RUN":
            for command in re.split(r"&&|;", value):
                words = shlex.split(command)
                if words[:4] == ["python", "-m", "pip", "install"]:
                    out.append(words[4:])
    return out


def test_both_images_and_compose_exist():
    assert {p.name for p in DOCKERFILES} == {"Dockerfile.gpu", "Dockerfile.cpu"}
    assert (ROOT / "docker" / "compose.yaml").is_file() and (ROOT / ".dockerignore").is_file()


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_structure_and_command(path):
    steps = instructions(path)
    kinds = [k for k, _ in steps]
    assert "FROM" in kinds and all(k in ("ARG", "FROM") for k in kinds[:kinds.index("FROM") + 1])
    entrypoint = exec_form(dict(steps)["ENTRYPOINT"])
    assert entrypoint == ["voxrt"] and "voxrt" in PYPROJECT["project"]["scripts"]
    cmd = exec_form(dict(steps)["CMD"])
    args = build_parser().parse_args(cmd)  # SystemExit on an option voxrt does not have
    assert args.command == "serve" and args.log_json
    exposed = {int(v) for k, v in steps if k == "EXPOSE"}
    env = " ".join(v for k, v in steps if k == "ENV")
    assert "VOXRT_HOST=0.0.0.0" in env and {int(re.search(r"VOXRT_PORT=(\d+)", env).group(1))} == exposed
    health = dict(steps)["HEALTHCHECK"]
    assert "/readyz" in health and f":{exposed.pop()}/" in health
    assert dict(steps)["STOPSIGNAL"] == "SIGTERM"  # the drain's signal
    assert "USER" in kinds  # not root


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_what_exists_and_is_not_ignored(path):
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    copied = []
    for kind, value in instructions(path):
        if kind == "COPY":
            copied += shlex.split(value)[:-1]
    assert copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), (source, "is in .dockerignore")
    # what the package needs: its code, the model programs (voxrt.models), the browser page (voxrt/web)
    assert {"voxrt", "models", "web", "pyproject.toml"} <= set(copied)
    assert {".venv", ".git", "tests"} <= set(ignored)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_install_steps_match_the_project_setup(path):
    steps = instructions(path)
    installs = pip_installs(steps)
    run = " ".join(v for k, v in steps if k == "RUN")
    assert "libopus0" in run and "libopus0" in SETUP  # opuslib binds the system's libopus, as setup.sh installs it
    assert "chromium" not in run  # the browser is a test tool, never in a serving image
    torch_pins = [w for words in installs for w in words if w.startswith("torch")]
    assert torch_pins == ["torch==${TORCH_VERSION}"]
    version = re.search(r"ARG TORCH_VERSION=(\S+)", path.read_text()).group(1)
    assert f"torch=={version}" in SETUP  # the torch setup.sh installs without a GPU
    project = [w for words in installs for w in words if w.startswith("/src")]
    assert len(project) == 1, installs  # the project installed once, from the copied tree, like `pip install -e .`
    extras = re.findall(r"\[([^\]]*)\]", project[0])
    for extra in (extras[0].split(",") if extras else []):
        assert extra in PYPROJECT["project"]["optional-dependencies"], extra
    assert "test" not in (extras[0] if extras else "")  # the runtime only, as `scripts/setup.sh serve`
    if path.name == "Dockerfile.gpu":
        assert extras and "gpu" in extras[0].split(",")  # FlashInfer
        assert re.search(r"ARG CUDA_IMAGE=nvidia/cuda:\S+", path.read_text())


def test_compose_services():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"gateway-cpu", "gateway-gpu"}
    for name, service in services.items():
        build = service["build"]
        dockerfile = (ROOT / "docker" / build["context"] / build["dockerfile"]).resolve()
        assert dockerfile in DOCKERFILES, dockerfile
        args = build_parser().parse_args(service["command"])
        assert args.command == "serve"
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        assert "VOXRT_API_KEYS" in service["environment"]  # the image binds 0.0.0.0, which needs keys
        grace = float(service["stop_grace_period"].rstrip("s"))
        assert grace >= args.drain_grace_s + 5
    gpu = services["gateway-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
