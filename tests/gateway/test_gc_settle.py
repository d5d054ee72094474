"""A gateway process's garbage collections (voxrt/gcpause.py): `voxrt serve` settles its start-up heap once the
engine client is connected (a full collection then walks only what sessions allocate), and the stats file keeps
a histogram of every collection while serving, which holds the event loop and with it every session's frames."""

from __future__ import annotations

import gc
import glob
import json

import voxrt.gateway.app as gateway_app
from voxrt.cli import main
from voxrt.gateway.stats import StatsWriter
from voxrt_live import live_server


def test_serve_settles_the_heap_and_the_stats_file_counts_collections(tmp_path, monkeypatch):
    settled, raised = [], []
    # the test process hosts many apps: a real freeze here would keep their garbage for good (config.py), and a
    # real threshold would change every later test's collections
    monkeypatch.setattr(gateway_app, "settle_heap", lambda: settled.append(True) or 0)
    monkeypatch.setattr(gateway_app, "raise_young_threshold", lambda: raised.append(True) or (10_000, 10, 10))
    with live_server({"model": "standin"}, settle_heap=True, stats_path=str(tmp_path / "stats")) as live:
        pauses = live.state.gc_pauses
        assert settled == [True] and raised == [True]
        assert pauses is not None and pauses._callback in gc.callbacks
        before = pauses.histogram.count
        gc.collect()
        assert pauses.histogram.count > before
        StatsWriter(str(tmp_path / "now"), live.state).write()
        (path,) = glob.glob(str(tmp_path / "now.*.json"))
        data = json.loads(open(path).read())
        assert sum(data["gc"]["counts"]) >= before + 1 and data["gc"]["max_ms"] >= 0
        assert sum(data["gc_generations"][2]["counts"]) >= 1 and len(data["gc_collected"]) == 3  # a full one ran
    assert pauses._callback not in gc.callbacks  # uninstalled when the app stops


def test_an_app_built_without_the_flag_does_not_freeze(monkeypatch):
    settled = []
    monkeypatch.setattr(gateway_app, "settle_heap", lambda: settled.append(True) or 0)
    monkeypatch.setattr(gateway_app, "raise_young_threshold", lambda: settled.append(True) or (10_000, 10, 10))
    with live_server({"model": "standin"}) as live:
        assert live.state.gc_pauses is not None  # measured either way
    assert settled == []


def test_the_cli_serves_with_a_settled_heap(monkeypatch):
    import voxrt.gateway.server as server  # noqa: PLC0415

    seen = []

    class _Server:
        def run(self):
            pass

    monkeypatch.setattr(server, "make_server", lambda gateway, *a, **k: seen.append(gateway) or _Server())
    assert main(["serve", "--model", "standin", "--port", "0"]) == 0
    assert seen and seen[0].settle_heap


def test_serve_keeps_torch_out_of_the_gateway_process():
    """`voxrt serve` (one process: the gateway, which spawns the engine) imports no torch of its own: it was
    loaded to pick the default batch size: ~130,000 more tracked objects (194,000 against 61,000 on the dev VM)
    and ~1 s of start-up (the engine process picks it now: EngineConfig.max_batch_size None)."""
    from fresh_python import run_fresh  # noqa: PLC0415

    out = run_fresh("import sys\n"
                    "import voxrt.gateway.server as server\n"
                    "class S:\n"
                    "    def run(self): pass\n"
                    "server.make_server = lambda *a, **k: S()\n"
                    "from voxrt.cli import main\n"
                    "assert main(['serve', '--model', 'tiny', '--port', '0']) == 0\n"
                    "print('torch' in sys.modules)\n")
    assert out.strip().splitlines()[-1] == "False"
