"""Shared fixtures: the tiny model on the CPU, driven in-process."""

from __future__ import annotations

import numpy as np
import pytest

from voxrt.engine.messages import AudioChunk, EngineConfig, RequestFailed, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore

GREEDY = SamplingParams(greedy=True)


def make_core(**overrides) -> EngineCore:
    """tiny-lite: tiny's structure with 4 codebooks (models/tiny/program.py), ~2.5x less CPU per frame."""
    cfg = dict(model="tiny-lite", device="cpu", max_batch_size=8, max_seq_len=512)
    cfg.update(overrides)
    return EngineCore(EngineConfig(**cfg))


@pytest.fixture(scope="module")
def core() -> EngineCore:
    return make_core()


def drain(core: EngineCore, max_steps: int = 10_000) -> tuple[dict[str, list[AudioChunk]], dict[str, RequestFailed]]:
    """Steps until the engine is idle; returns the chunks and failures per request."""
    chunks: dict[str, list[AudioChunk]] = {}
    failures: dict[str, RequestFailed] = {}
    for _ in range(max_steps):
        if not core.has_work():
            return chunks, failures
        for event in core.step():
            if isinstance(event, AudioChunk):
                chunks.setdefault(event.request_id, []).append(event)
            elif isinstance(event, RequestFailed):
                failures[event.request_id] = event
    raise AssertionError("engine did not go idle")


def pcm(chunks: list[AudioChunk]) -> np.ndarray:
    return np.concatenate([np.frombuffer(c.pcm, dtype="<f4") for c in chunks])


def submit(core: EngineCore, rid: str, text: str, final: bool = True, params: SamplingParams = GREEDY, voice="default"):
    return core.submit(SubmitRequest(rid, voice, params, text, final))


def assert_pools_empty(core: EngineCore) -> None:
    sched = core.scheduler
    sched.check_integrity()
    assert sched.pages.num_free == sched.pages.num_pages
    assert sched.slots.num_free == sched.slots.num_slots
    assert not sched.requests
