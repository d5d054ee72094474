"""runtime/cublas.py: the engine's process runs cuBLAS without a workspace (no split-K) unless the user says
otherwise, set on import of the runtime package, before any GPU work."""

from __future__ import annotations

import os
import subprocess
import sys

from voxrt.engine.runtime import cublas


def test_no_workspace_unless_the_user_set_one():
    env: dict = {}
    assert cublas.configure_workspace(env) == ":0:0" and env == {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}
    assert "no split-K" in cublas.describe(env)
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert cublas.configure_workspace(env) == ":4096:8" and env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert cublas.describe(env) == "cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG=:4096:8"
    assert cublas.describe({}) == "cuBLAS workspace: PyTorch's default"


def test_importing_the_runtime_sets_it_in_a_fresh_process():
    code = "import os, voxrt.engine.runtime; print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'))"
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ":0:0"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == ":16:8"
