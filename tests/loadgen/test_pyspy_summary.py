"""bench/pyspy_summary.py: py-spy's collapsed stacks split by thread, function and callee."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("pyspy_summary", ROOT / "bench" / "pyspy_summary.py")
pyspy_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pyspy_summary)

RAW = """\
thread (11): MainThread;_Hub.run (voxrt/engine/process.py:243);_Hub._step (voxrt/engine/process.py:300);EngineCore.step (voxrt/engine/runtime/core.py:401);Scheduler.schedule (voxrt/engine/sched/scheduler.py:160) 60
thread (11): MainThread;_Hub.run (voxrt/engine/process.py:243);_Hub._step (voxrt/engine/process.py:300);EngineCore.step (voxrt/engine/runtime/core.py:404);ModelRunner.launch_lm (voxrt/engine/runtime/runner.py:570) 30
thread (11): MainThread;_Hub.run (voxrt/engine/process.py:243);_Hub._step (voxrt/engine/process.py:301);EngineCore.step (voxrt/engine/runtime/core.py:396) 10
thread (11): MainThread;_Hub.run (voxrt/engine/process.py:250);_Hub._drain (voxrt/engine/process.py:350) 100
thread (12): voxrt-engine-send;Thread.run (threading.py:982);_Outbox._send_forever (voxrt/engine/process.py:180) 40
"""


def test_threads_functions_and_callees(tmp_path):
    path = tmp_path / "run.pyspy.txt"
    path.write_text(RAW)
    stacks = pyspy_summary.parse(path.read_text().splitlines())
    assert stacks[0][0] == "MainThread" and stacks[-1][0] == "voxrt-engine-send"
    assert stacks[0][1][-1] == "Scheduler.schedule (scheduler.py)"  # lines dropped, the file's name kept
    text = pyspy_summary.summarize(stacks, "MainThread", ["EngineCore.step"], top=10)
    lines = text.splitlines()
    assert lines[0] == "samples: 240"
    assert "       200  MainThread" in lines and "        40  voxrt-engine-send" in lines
    # inclusive: _Hub.run in every main-thread sample (two lines of it count once each), EngineCore.step in half
    assert "   100.0%  _Hub.run (process.py)" in lines
    assert "    50.0%  EngineCore.step (core.py)" in lines
    under = lines[lines.index("under EngineCore.step: 100 samples (50.0% of MainThread's)") + 1:]
    assert under[:3] == ["    60.0%  Scheduler.schedule (scheduler.py)", "    30.0%  ModelRunner.launch_lm (runner.py)",
                         "    10.0%  (self)"]


def test_another_thread_and_a_missing_one(tmp_path):
    stacks = pyspy_summary.parse(RAW.splitlines())
    text = pyspy_summary.summarize(stacks, "voxrt-engine-send", [], top=5)
    assert "voxrt-engine-send: functions by self share of its 40 samples" in text
    assert "   100.0%  _Outbox._send_forever (process.py)" in text
    assert "no samples of thread 'nope'" in pyspy_summary.summarize(stacks, "nope", [], top=5)


def test_not_collapsed_stacks_is_a_clear_error():
    with pytest.raises(ValueError, match="line 2: not a collapsed stack"):
        pyspy_summary.parse(["a;b 3", "garbage without a count"])


def test_cli(tmp_path, capsys):
    path = tmp_path / "run.pyspy.txt"
    path.write_text(RAW)
    pyspy_summary.main([str(path), "--under", "_Hub.run", "--top", "3"])
    out = capsys.readouterr().out
    assert "under _Hub.run: 200 samples (100.0% of MainThread's)" in out
    assert "    50.0%  _Hub._step (process.py)" in out and "    50.0%  _Hub._drain (process.py)" in out


def test_share_of_the_run():
    stacks = pyspy_summary.parse(RAW.splitlines())
    text = pyspy_summary.summarize(stacks, "MainThread", [], top=3, expected=400)
    assert text.splitlines()[:3] == ["samples: 240 (a thread busy throughout: 400)",
                                     "       200   50.0% of the run  MainThread",
                                     "        40   10.0% of the run  voxrt-engine-send"]
