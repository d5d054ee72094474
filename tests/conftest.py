"""Fixtures shared by every test directory."""

from __future__ import annotations

import os

import pytest
import torch

# Triton's kernels (voxrt/engine/runtime/kernels) run in its CPU interpreter where there is no GPU. The switch
# is read when a kernel is defined (at import), so it is set before any test module imports them.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from voxrt_live import live_server

if os.environ.get("PYTEST_XDIST_WORKER"):  # scripts/test.sh: two workers on two cores, one torch thread each
    torch.set_num_threads(1)
    # ... and so do the processes a worker starts (a live server's engine process, `voxrt bench`, the wheel's
    # server), which read it when they import torch: at torch's default of one thread per core, two workers'
    # engines spin four OpenMP threads on two cores, and the tiny model's small matmuls ran 2-4x slower
    # (the openai instructions test: 127 s alone -> 33 s).
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist with `--dist loadgroup` (scripts/test.sh): the tests of a module that share a
    module-scoped fixture (a live server, an engine core) run on one worker, so that fixture starts once;
    every other test goes to whichever worker is free.

    xdist's own hook turns the `xdist_group` marker into a `@group` suffix of the node id, which is all its
    scheduler sees; pytest 9.2 keeps node ids structured and ignores that write (pytest-xdist#1386), so every
    test was scheduled alone and each worker started its own copy of a module's server. The marker goes on
    before xdist's hook; after it, a suffix that did not take is written the way pytest 9.2 reads it. On a
    worker `--dist` reads "no": xdist's `loadgroup` flag says the mode."""
    grouped = []
    if getattr(config.option, "loadgroup", False):
        for item in items:
            info = getattr(item, "_fixtureinfo", None)
            defs = info.name2fixturedefs.values() if info is not None else ()
            if any(d[-1].scope in ("module", "package", "class") for d in defs if d):
                group = item.nodeid.split("::")[0]
                item.add_marker(pytest.mark.xdist_group(group))
                grouped.append((item, group))
    result = yield
    for item, group in grouped:
        if not item.nodeid.endswith("@" + group):
            item._id = type(item._id).parse(f"{item.nodeid}@{group}")
    return result


# Modules that start first under `--dist loadgroup`, longest first (seconds of one worker for the whole module,
# measured on the 2-core CI machine; rough is enough): a long module that starts last leaves the other worker
# idle until it ends. Everything else follows, most tests first (xdist's own order).
SLOW_FIRST = {
    "tests/loadgen/test_loadgen_run.py": 70,
    "tests/web/test_browser.py": 70,
    "tests/reliability/test_gateway_reliability.py": 60,
    "tests/models/qwen3_tts/test_fused.py": 50,
    "tests/models/qwen3_tts/test_instructions.py": 50,
    "tests/gateway/test_realtime.py": 45,
    "tests/compat/test_openai_sdk.py": 35,
    "tests/engine/test_core.py": 30,
    "tests/gateway/test_word_forwarding.py": 30,
    "tests/reliability/test_engine_recovery.py": 20,
    "tests/models/qwen3_tts/test_talker_parity.py": 20,
    "tests/engine/runtime/test_kernels.py": 20,
    "tests/compat/test_elevenlabs.py": 20,
    "tests/compat/test_cartesia.py": 20,
    "tests/compat/test_slow_peers.py": 35,
    "tests/gateway/test_native_slow_peer.py": 50,
    "tests/gateway/test_http.py": 20,
    "tests/gateway/test_dp_replicas.py": 20,  # two engine processes, one of them killed and restarted
    "tests/gateway/test_workers_replicas.py": 15,
    "tests/packaging/test_wheel.py": 20,
    "tests/test_cli.py": 15,  # no shared fixture: its tests go one by one, the `voxrt bench` run ~13 s of them
}


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with the SLOW_FIRST modules' work units (a group, or one test) at the front."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # noqa: PLC0415

    class SlowFirst(LoadGroupScheduling):
        _ordered = False

        def _assign_work_unit(self, node):
            if not self._ordered:  # the queue is complete at the first assignment
                self._ordered = True
                units = list(self.workqueue.items())
                units.sort(key=lambda unit: -SLOW_FIRST.get(unit[0].split("@")[-1].split("::")[0], 0))  # stable
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return SlowFirst(config, log)


@pytest.fixture(autouse=True)
def _restore_logging():
    """A test that runs `voxrt.cli.main` in-process gets the CLI's logging (a root handler on the captured
    stderr, VOXRT_LOG_* exported for child processes): undone after it, so no later test logs into a closed
    capture or hands its level to the engine processes it starts."""
    import logging  # noqa: PLC0415

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    env = {k: os.environ.get(k) for k in ("VOXRT_LOG_LEVEL", "VOXRT_LOG_JSON")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def live():
    """A real server (uvicorn + the tiny model's engine process on the CPU) for the tests of one module."""
    with live_server() as server:
        yield server
