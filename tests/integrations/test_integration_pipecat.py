"""VoxrtTTSService in a real Pipecat pipeline against a live voxrt server (tiny model, CPU)."""

from __future__ import annotations

import asyncio
import time

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
from voxrt_live import ONE_PLACE, busy_engine, live_server, metric, run  # noqa: E402 (tests/support, on pytest's pythonpath)

LONG_TEXT = " ".join(["This sentence keeps the engine busy for a good while."] * 12)
# Pipecat ends an audio context that gets no audio for stop_frame_timeout_s (3 s by default). The tiny model
# runs on the CPU of a small shared machine here and can pause that long; voxrt's context.done ends it anyway.
QUIET_S = 60.0


def _service(live, **kwargs) -> VoxrtTTSService:
    return VoxrtTTSService(url=live.ws, stop_frame_timeout_s=QUIET_S, **kwargs)



async def _start(*processors):
    """A pipeline of `processors`, running: (its worker, the runner's task)."""
    worker = PipelineWorker(Pipeline(list(processors)), cancel_on_idle_timeout=False)
    runner = WorkerRunner()
    await runner.add_workers(worker)
    return worker, asyncio.ensure_future(runner.run())

def _llm_turn(tokens: list[str]) -> list:
    return [LLMFullResponseStartFrame(), *(LLMTextFrame(t) for t in tokens), LLMFullResponseEndFrame()]



def test_the_service_overrides_no_private_method_of_pipecat():
    """Pipecat's base classes have private methods of common names (`AIService._cancel(frame)`, called on a
    CancelFrame; `TTSService._end_audio_context`): one of ours with the same name silently replaced theirs (a
    cancelled pipeline then never closed its voxrt session). Our helpers are `_voxrt_*`."""
    own = {name for name in vars(VoxrtTTSService) if name.startswith("_") and not name.startswith("__")}
    for base in VoxrtTTSService.__mro__[1:]:
        assert not own & (set(vars(base)) - {"_abc_impl"}), base

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


async def _speaking(live):
    """A pipeline speaking a long turn in real time, its first audio out: (the service, its worker, the runner's
    task, the turn's voxrt context)."""
    tts = _service(live, pacing="realtime")
    probe = _FirstAudio()
    worker, running = await _start(tts, probe)
    await worker.queue_frames(_llm_turn([LONG_TEXT]))
    await probe.event.wait()
    (context,) = tts._contexts.values()
    return tts, worker, running, context


def test_interruption_cancels_the_voxrt_context(live):
    async def main():
        _, worker, running, context = await _speaking(live)
        await worker.queue_frame(InterruptionFrame())
        done = await context.done()
        await worker.queue_frame(EndFrame())
        await running
        return context, done

    context, done = run(main())
    assert done.reason == "cancelled" and context.state is ContextState.DONE


def test_cancelling_the_pipeline_aborts_the_voxrt_session(live):
    """A cancelled pipeline (CancelFrame: the call hung up) aborts the service's voxrt session at once: its
    context stops on the server and the server holds no session or context for it afterwards."""
    async def main():
        tts, worker, running, context = await _speaking(live)
        await worker.cancel()
        await running
        return tts, context

    tts, context = run(main())
    assert tts._session is None and context.is_finished
    deadline = time.monotonic() + 30
    while (metric(live, "voxrt_sessions"), metric(live, "voxrt_contexts")) != (0, 0):
        assert time.monotonic() < deadline, "the server still holds the cancelled pipeline's session"
        time.sleep(0.05)

class _Collect(FrameProcessor):
    """Keeps every frame that passes, in each direction."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: dict[FrameDirection, list] = {FrameDirection.DOWNSTREAM: [], FrameDirection.UPSTREAM: []}

    async def process_frame(self, frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        self.frames[direction].append(frame)
        await self.push_frame(frame, direction)


def test_a_turn_the_server_refuses_is_reported_once_and_its_later_tokens_are_dropped():
    """Overload (`--max-admission-wait-ms`): another session holds the engine's only place, so the server
    refuses the Pipecat turn (`server_busy`) while the LLM is still streaming it. The turn ends with one voxrt
    error upstream and TTSStoppedFrame; the tokens that come after the refusal are dropped, not an error each
    (the client refuses to reopen a context id, which Pipecat keeps using for the turn)."""
    with live_server(ONE_PLACE) as live:
        async def main():
            async with busy_engine(live):
                before, after = _Collect(), _Collect()
                worker, running = await _start(before, _service(live, pacing="burst"), after)
                await worker.queue_frames([LLMFullResponseStartFrame(),
                                           *(LLMTextFrame(t) for t in ["Hello", " there,", " this", " turn"])])
                while not await asyncio.to_thread(metric, live, 'voxrt_errors_total{code="server_busy"}', 0.0):
                    await asyncio.sleep(0.05)  # until the server refused the turn
                await worker.queue_frames([*(LLMTextFrame(f" more{i}") for i in range(30)),
                                           LLMFullResponseEndFrame(), EndFrame()])
                await running
                return before.frames[FrameDirection.UPSTREAM], after.frames[FrameDirection.DOWNSTREAM]

        up, down = run(main())
    # Pipecat adds its own "completed with no audio" for the turn; every other error is ours, and there is one
    errors = [str(getattr(f, "error", "")) for f in up if "Error" in type(f).__name__
              and "completed with no audio" not in str(getattr(f, "error", ""))]
    assert len(errors) == 1 and "server_busy" in errors[0] and "server at capacity" in errors[0], errors
    kinds = [type(f) for f in down]
    assert TTSAudioRawFrame not in kinds and TTSStoppedFrame in kinds
