"""A short `voxrt loadgen` run against the tiny model on the CPU: over the WebSocket of a live server, and
engine-direct. Checks the files (JSON lines, summary, PNGs), not the figures (a loaded CI machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voxrt.cli import main
from voxrt.client import OutputFormat, connect
from voxrt_live import live_server, run  # tests/support, on pytest's pythonpath

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """Four short rows of the LibriTTS workload, so that the CPU run stays short."""
    rows = [json.loads(line) for line in (ROOT / "bench/workloads/libritts_test_clean.jsonl").open()]
    short = [r for r in rows if 20 <= len(r["text"]) <= 40][:4]
    path = tmp_path_factory.mktemp("w") / "short.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in short))
    return path


def check_outputs(out: Path, max_requests: int) -> dict:
    lines = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert 1 <= len(lines) <= max_requests
    for line in lines:
        assert {"ttfa_ms", "stalls", "stall_ms", "audio_s", "status"} <= line.keys()
    assert any(line["status"] == "ok" and line["audio_s"] > 0 and line["ttfa_ms"] > 0 for line in lines), lines
    summary = json.loads((out / "summary.json").read_text())
    (point,) = summary["points"]
    assert point["rate"] == 2.0 and point["requests"] == len(lines)
    assert 0.0 <= point["attainment"] <= 1.0
    assert point["ttfa_p99_ms"] is not None and point["mean_audio_s"] > 0
    for name in ("attainment.png", "p99_ttfa.png", "goodput.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    return summary


def check_pinned(out: Path) -> None:
    lines = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    for line in lines:
        if line["status"] == "ok":  # pinned: the audio is exactly the pinned frames at 12.5 frames/s
            assert line["audio_s"] == pytest.approx(line["num_frames"] / 12.5, abs=0.05)
            assert line["pinned_audio_s"] == pytest.approx(line["num_frames"] / 12.5)
    assert json.loads((out / "summary.json").read_text())["pinned_length_mismatches"] == 0


@pytest.fixture(scope="module")
def pinned_live():
    with live_server(allow_pinned_lengths=True) as live:
        yield live


def test_websocket_short_run(workload, pinned_live, tmp_path, capsys):
    rc = main(["loadgen", "--url", pinned_live.ws, "--workload", str(workload), "--rate", "2", "--duration", "3",
               "--max-requests", "3", "--tokens-per-s", "40", "--out", str(tmp_path)])
    assert rc == 0
    summary = check_outputs(tmp_path, 3)
    assert summary["mode"].startswith("websocket")
    assert summary["pinned_length_rule"].startswith("frames = ")
    (point,) = summary["points"]
    assert 0 <= point["loadgen_loop_lag_max_at_s"] <= 60  # s after the point's measurement began
    check_pinned(tmp_path)
    assert capsys.readouterr().out.rstrip().splitlines()[-1].split()[0] == "2"  # the table prints last


def test_websocket_run_spread_over_processes(workload, pinned_live, tmp_path):
    """--procs 2: the same arrivals split over two processes, merged into one point."""
    rc = main(["loadgen", "--url", pinned_live.ws, "--workload", str(workload), "--rate", "2", "--duration", "3",
               "--max-requests", "4", "--procs", "2", "--warmup", "0", "--out", str(tmp_path)])
    assert rc == 0
    summary = check_outputs(tmp_path, 4)
    (point,) = summary["points"]
    assert point["loadgen_procs"] == 2 and point["loadgen_cpu_cores"] > 0
    assert point["loadgen_loop_lag_p99_ms"] is not None
    # when the worst process's worst lag ended, in s after the arrivals began (the processes' wait for that start,
    # START_MARGIN_S, comes before it: a lag there reads negative)
    assert -5 <= point["loadgen_loop_lag_max_at_s"] <= 60
    arrivals = [json.loads(line)["arrival_s"] for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert arrivals == sorted(arrivals)
    check_pinned(tmp_path)


def test_procs_need_a_target_every_process_can_reach(workload, tmp_path):
    with pytest.raises(SystemExit):
        main(["loadgen", "--engine-direct", "--workload", str(workload), "--procs", "2", "--out", str(tmp_path)])


def test_pinned_length_over_the_websocket(pinned_live):
    """A server started with --allow-pinned-lengths gives exactly `num_frames` x 80 ms, whatever the text."""
    async def scenario():
        async with connect(pinned_live.ws, output=OutputFormat("pcm16", 24000, 20)) as session:
            results = []
            for bad in (0, -1, 2.5, True):
                with pytest.raises(ValueError):
                    session.context(num_frames=bad)
            for num_frames in (3, 30):
                ctx = session.context(num_frames=num_frames)
                await ctx.send("A long sentence that would take several seconds of audio to speak out loud.")
                await ctx.end()
                audio = await ctx.audio()
                results.append((len(audio) / 2 / 24000, (await ctx.done()).audio_ms))
            return results

    (short_s, short_ms), (long_s, long_ms) = run(scenario())
    assert short_s == pytest.approx(3 * 0.08, abs=0.021) and short_ms == pytest.approx(240, abs=21)
    assert long_s == pytest.approx(30 * 0.08, abs=0.021) and long_ms == pytest.approx(2400, abs=21)


def test_server_without_the_flag_ignores_pinned_lengths(workload, live, tmp_path, capsys):
    """The default server ignores `num_frames` (unknown-field rule); the load generator notices and says so."""
    rc = main(["loadgen", "--url", live.ws, "--workload", str(workload), "--rate", "2", "--duration", "2",
               "--max-requests", "2", "--out", str(tmp_path)])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pinned_length_mismatches"] >= 1
    assert "--allow-pinned-lengths" in capsys.readouterr().err


def test_engine_direct_short_run(workload, tmp_path):
    rc = main(["loadgen", "--engine-direct", "--model", "tiny", "--device", "cpu", "--max-seq-len", "1024",
               "--workload", str(workload), "--rate", "2", "--duration", "3", "--max-requests", "3",
               "--out", str(tmp_path)])
    assert rc == 0
    summary = check_outputs(tmp_path, 3)
    assert summary["mode"].startswith("engine-direct")
    assert summary["pinned_length_rule"].startswith("frames = ")
    check_pinned(tmp_path)


def test_loadgen_needs_one_target(workload, tmp_path):
    with pytest.raises(SystemExit):
        main(["loadgen", "--workload", str(workload), "--out", str(tmp_path)])


def test_engine_direct_sweep_reads_capacity_on_the_grid(workload, tmp_path):
    rc = main(["loadgen", "--engine-direct", "--model", "tiny", "--device", "cpu", "--max-seq-len", "1024",
               "--workload", str(workload), "--sweep", "2,1", "--stop-below", "0.5", "--duration", "2",
               "--max-requests", "2", "--warmup", "0", "--out", str(tmp_path)])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["capacity_method"].startswith("grid") and summary["complete"] is True
    rates = [p["rate"] for p in summary["points"]]
    assert rates[0] == 1.0 and set(rates) | set(summary["skipped_rates"]) == {1.0, 2.0}
    for name in ("90%", "99%"):  # whatever the CPU managed, the reading follows the rule on the points
        expected = None
        for p in summary["points"]:
            if p["attainment"] < float(name[:-1]) / 100:
                break
            expected = p["rate"]
        assert summary["capacity_rps"][name] == expected


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_stop_below_must_be_an_attainment(workload, tmp_path, value, capsys):
    with pytest.raises(SystemExit):
        main(["loadgen", "--engine-direct", "--workload", str(workload), "--sweep", "1,2", "--stop-below", value,
              "--out", str(tmp_path)])
    assert "--stop-below" in capsys.readouterr().err


def test_a_websocket_target_imports_its_client_when_made_not_at_its_first_request():
    """The point's first request must not pay the client's import (~90 ms of a load generator process's loop at
    the arrivals' start, counted in the first requests' TTFA)."""
    from fresh_python import run_fresh  # noqa: PLC0415

    run_fresh("import sys\n"
              "from voxrt.loadgen.runner import WebSocketTarget\n"
              "assert 'voxrt.client' not in sys.modules, 'imported before the target'\n"
              "WebSocketTarget('ws://127.0.0.1:9/v1/realtime')\n"
              "assert 'voxrt.client' in sys.modules and 'websockets' in sys.modules\n")
