"""VoxrtTTSService in a real Pipecat pipeline against a live voxrt server (tiny model, CPU)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pipecat", reason="pipecat-ai is not installed")

from pipecat.frames.frames import (EndFrame, InterruptionFrame, LLMFullResponseEndFrame,  # noqa: E402
                                   LLMFullResponseStartFrame, LLMTextFrame, TTSAudioRawFrame, TTSSpeakFrame,
                                   TTSStartedFrame, TTSStoppedFrame, TTSTextFrame)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.tests.utils import run_test  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from voxrt.client import ContextState  # noqa: E402
from voxrt.integrations.pipecat import VoxrtTTSService  # noqa: E402
from voxrt_live import run  # noqa: E402 (tests/support, on pytest's pythonpath)

LONG_TEXT = " ".join(["This sentence keeps the engine busy for a good while."] * 12)
# Pipecat ends an audio context that gets no audio for stop_frame_timeout_s (3 s by default). The tiny model
# runs on the CPU of a small shared machine here and can pause that long; voxrt's context.done ends it anyway.
QUIET_S = 60.0


def _service(live, **kwargs) -> VoxrtTTSService:
    return VoxrtTTSService(url=live.ws, stop_frame_timeout_s=QUIET_S, **kwargs)


def _llm_turn(tokens: list[str]) -> list:
    return [LLMFullResponseStartFrame(), *(LLMTextFrame(t) for t in tokens), LLMFullResponseEndFrame()]


def test_llm_tokens_become_audio_and_timed_words(live):
    tts = _service(live, pacing="burst")
    tokens = ["Hello", " there,", " this", " is", " voxrt", " speaking."]
    down, up = run(run_test(tts, frames_to_send=_llm_turn(tokens)))
    kinds = [type(f) for f in down]
    assert kinds.count(TTSStartedFrame) == 1 and kinds.count(TTSStoppedFrame) == 1
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio and all(f.sample_rate == 24000 and f.num_channels == 1 for f in audio)
    assert kinds.index(TTSStartedFrame) < kinds.index(TTSAudioRawFrame) < kinds.index(TTSStoppedFrame)
    assert len({f.context_id for f in audio}) == 1
    assert sum(len(f.audio) for f in audio) >= 24000 * 2 // 2  # at least half a second of speech
    words = "".join(f.text if f.includes_inter_frame_spaces else f.text + " " for f in down
                    if isinstance(f, TTSTextFrame))
    assert words.split() == "".join(tokens).split()  # the spoken text comes back, word by word
    assert kinds[-1] is LLMFullResponseEndFrame
    assert not [f for f in up if "Error" in type(f).__name__]


def test_speak_frame_at_a_rate_voxrt_does_not_serve_is_resampled(live):
    tts = _service(live, pacing="burst")
    down, _ = run(run_test(tts, frames_to_send=[TTSSpeakFrame("Resampled speech.")],
                           pipeline_params=PipelineParams(audio_out_sample_rate=22050)))
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio and {f.sample_rate for f in audio} == {22050}


def test_unknown_voice_is_reported_upstream(live):
    tts = _service(live, voice="nobody")
    _, up = run(run_test(tts, frames_to_send=[]))
    assert any("unknown_voice" in str(getattr(f, "error", "")) for f in up)


class _FirstAudio(FrameProcessor):
    """Sets `event` at the first TTS audio frame that passes."""

    def __init__(self) -> None:
        super().__init__()
        self.event = asyncio.Event()

    async def process_frame(self, frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.event.set()
        await self.push_frame(frame, direction)


def test_interruption_cancels_the_voxrt_context(live):
    async def main():
        tts = _service(live, pacing="realtime")
        probe = _FirstAudio()
        worker = PipelineWorker(Pipeline([tts, probe]), cancel_on_idle_timeout=False)
        runner = WorkerRunner()
        await runner.add_workers(worker)
        running = asyncio.ensure_future(runner.run())
        await worker.queue_frames(_llm_turn([LONG_TEXT]))
        await probe.event.wait()
        (context,) = tts._contexts.values()
        await worker.queue_frame(InterruptionFrame())
        done = await context.done()
        await worker.queue_frame(EndFrame())
        await running
        return context, done

    context, done = run(main())
    assert done.reason == "cancelled" and context.state is ContextState.DONE
