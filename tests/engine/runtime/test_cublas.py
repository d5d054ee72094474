"""runtime/cublas.py: the engine's process runs cuBLAS without a workspace (no split-K) unless the user says
otherwise, set on import of the runtime package, before any GPU work."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from voxrt.engine.runtime import cublas


def test_no_workspace_unless_the_user_set_one():
    env: dict = {}
    assert cublas.configure_workspace(env) == ":0:0" and env == {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}
    assert "no split-K" in cublas.describe(env)
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert cublas.configure_workspace(env) == ":4096:8" and env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert cublas.describe(env) == "cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG=:4096:8"
    assert cublas.describe({}) == "cuBLAS workspace: PyTorch's default"


def test_cublaslt_keeps_a_workspace():
    """PyTorch caps cuBLASLt's workspace at cuBLAS's: with none, graph capture fails (H100, 2026-12-07), so a user
    who asks for cuBLASLt keeps PyTorch's default workspace; their own CUBLAS_WORKSPACE_CONFIG still wins."""
    env = {"TORCH_BLAS_PREFER_CUBLASLT": "1"}
    assert cublas.configure_workspace(env) is None and "CUBLAS_WORKSPACE_CONFIG" not in env
    assert "cuBLASLt needs one" in cublas.describe(env)
    env = {"TORCH_BLAS_PREFER_CUBLASLT": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert cublas.configure_workspace(env) == ":4096:8"
    assert cublas.describe(env) == "cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG=:4096:8"
    for off in ("0", "", " "):  # PyTorch's off values: the engine's no-workspace default stands
        env = {"TORCH_BLAS_PREFER_CUBLASLT": off}
        assert cublas.configure_workspace(env) == ":0:0" and not cublas.prefers_cublaslt(env)


def test_importing_the_runtime_sets_it_in_a_fresh_process():
    code = "import os, voxrt.engine.runtime; print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'))"
    env = {k: v for k, v in os.environ.items() if k not in ("CUBLAS_WORKSPACE_CONFIG", "TORCH_BLAS_PREFER_CUBLASLT")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ":0:0"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == ":16:8"


def test_the_sm_count_target_knob(monkeypatch):
    """VOXRT_BLAS_SM_TARGET: off by default, `lanes` for each green lane's partition, anything else an error that
    `voxrt serve` reports before it starts (knobs.check_env)."""
    from voxrt.engine.runtime import knobs

    monkeypatch.delenv("VOXRT_BLAS_SM_TARGET", raising=False)
    assert knobs.blas_sm_target() == "off"
    for raw, mode in (("lanes", "lanes"), (" LANES ", "lanes"), ("0", "off"), ("", "off")):
        monkeypatch.setenv("VOXRT_BLAS_SM_TARGET", raw)
        assert knobs.blas_sm_target() == mode
    monkeypatch.setenv("VOXRT_BLAS_SM_TARGET", "68")
    with pytest.raises(ValueError, match="VOXRT_BLAS_SM_TARGET='68'; expected off or lanes"):
        knobs.check_env()


def test_each_green_lane_gets_its_partitions_sm_count(monkeypatch):
    """Lanes.blas_sm_count: the lane's partition with green lanes and the knob on; None (the whole GPU) for the
    urgent lane, without the knob, and for lanes that are not partitions."""
    from voxrt.engine.runtime.lanes import LM, Lanes
    from voxrt.engine.sched.plan import BACKGROUND, URGENT

    green = Lanes("green", sm_counts={LM: 68, BACKGROUND: 64})
    monkeypatch.setenv("VOXRT_BLAS_SM_TARGET", "lanes")
    assert (green.blas_sm_count(LM), green.blas_sm_count(BACKGROUND), green.blas_sm_count(URGENT)) == (68, 64, None)
    for lanes in (Lanes("streams"), Lanes("off"), Lanes("inline", sm_counts={LM: 68, BACKGROUND: 64})):
        assert lanes.blas_sm_count(LM) is None
    monkeypatch.setenv("VOXRT_BLAS_SM_TARGET", "off")
    assert green.blas_sm_count(LM) is None


def test_the_loaded_libcublas_is_found_in_the_process_map():
    maps = ("7f00-7f01 r-xp 00000000 08:01 11 /opt/nvidia/cublas/lib/libcublasLt.so.13\n"
            "7f02-7f03 rw-p 00000000 00:00 0 \n"
            "7f04-7f05 r-xp 00000000 08:01 12                     /opt/nvidia/cublas/lib/libcublas.so.13\n")
    assert cublas.find_libcublas(maps) == "/opt/nvidia/cublas/lib/libcublas.so.13"
    assert cublas.find_libcublas("7f02-7f03 rw-p 00000000 00:00 0 \n") is None


def test_no_target_changes_nothing_and_a_bad_one_is_an_error():
    with cublas.sm_count_target(None):  # the CPU and every lane without a partition: no cuBLAS call at all
        pass
    with pytest.raises(ValueError, match="must be >= 1"):
        with cublas.sm_count_target(0):
            raise AssertionError("entered with a target of 0 SMs")
