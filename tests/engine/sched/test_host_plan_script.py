"""bench/host_plan.py: the planner's host time per phase, and the md5 of its decisions that planner changes are
checked against (equal before and after a change that must not alter what the policy decides)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("host_plan", ROOT / "bench" / "host_plan.py")
host_plan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(host_plan)


def _texts(n: int = 300) -> list[str]:
    with open(ROOT / "bench" / "workloads" / "libritts_test_clean.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


def test_a_run_times_the_phases_and_its_decisions_repeat():
    texts = _texts()
    first = host_plan.run(24, 2.0, texts, batch=32)
    again = host_plan.run(24, 2.0, texts, batch=32)
    assert first["decisions"] == again["decisions"] and len(first["decisions"]) == 32
    assert first["steps"] > 0 and first["requests"] > 0 and first["live_p50"] >= 1
    assert {"plan_step", "admit", "decode", "_codec_candidates", "_plan_codec", "update_lm"} <= set(first["ms_per_step"])
    assert first["ms_per_step"]["plan_step"] > 0


def test_the_heavy_and_crowd_loads_decide_differently_from_the_default():
    texts = _texts()
    default = host_plan.run(40, 1.5, texts, batch=64)
    heavy = host_plan.run(40, 1.5, texts, batch=64, heavy=True, live_cap=128)
    crowd = host_plan.run(40, 1.5, texts, batch=64, crowd=True)
    assert len({default["decisions"], heavy["decisions"], crowd["decisions"]}) == 3  # three cost models
    assert crowd["live_p50"] >= default["live_p50"]  # the crowd's LM is the slowest: more requests wait in it
