"""VoxrtTTSService in a real Pipecat pipeline against a live voxrt server (tiny model, CPU)."""

from __future__ import annotations

import asyncio
import time

import httpx
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

from voxrt.client import AudioFrame, ContextState, connect  # noqa: E402
from voxrt.integrations.pipecat import VoxrtTTSService  # noqa: E402
from voxrt_live import live_server, run  # noqa: E402 (tests/support, on pytest's pythonpath)

LONG_TEXT = " ".join(["This sentence keeps the engine busy for a good while."] * 12)
# Pipecat ends an audio context that gets no audio for stop_frame_timeout_s (3 s by default). The tiny model
# runs on the CPU of a small shared machine here and can pause that long; voxrt's context.done ends it anyway.
QUIET_S = 60.0


def _service(live, **kwargs) -> VoxrtTTSService:
    return VoxrtTTSService(url=live.ws, stop_frame_timeout_s=QUIET_S, **kwargs)



def _metric(live, name: str) -> float:
    for line in httpx.get(f"{live.http}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)

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




def test_cancelling_the_pipeline_aborts_the_voxrt_session(live):
    """A cancelled pipeline (CancelFrame: the call hung up) aborts the service's voxrt session at once: its
    context stops on the server and the server holds no session or context for it afterwards."""
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
        await worker.cancel()
        await running
        return tts, context

    tts, context = run(main())
    assert tts._session is None and context.is_finished
    deadline = time.monotonic() + 30
    while (_metric(live, "voxrt_sessions"), _metric(live, "voxrt_contexts")) != (0, 0):
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
    with live_server({"max_batch_size": 1, "max_live_requests": 1, "max_admission_wait_ms": 0.0}) as live:
        def refusals() -> float:
            scrape = httpx.get(f"{live.http}/metrics", timeout=10).text
            return sum(float(line.split()[-1]) for line in scrape.splitlines()
                       if line.startswith('voxrt_errors_total{code="server_busy"}'))

        async def main():
            async with connect(live.ws, pacing="burst") as session:
                busy = session.context("busy")
                await busy.send(LONG_TEXT)
                await busy.end()
                async for item in busy.events():  # generating: it holds the only place
                    if isinstance(item, AudioFrame):
                        break
                before, after = _Collect(), _Collect()
                worker = PipelineWorker(Pipeline([before, _service(live, pacing="burst"), after]),
                                        cancel_on_idle_timeout=False)
                runner = WorkerRunner()
                await runner.add_workers(worker)
                running = asyncio.ensure_future(runner.run())
                await worker.queue_frames([LLMFullResponseStartFrame(),
                                           *(LLMTextFrame(t) for t in ["Hello", " there,", " this", " turn"])])
                while not await asyncio.to_thread(refusals):  # the server refused the turn
                    await asyncio.sleep(0.05)
                await worker.queue_frames([*(LLMTextFrame(f" more{i}") for i in range(30)),
                                           LLMFullResponseEndFrame(), EndFrame()])
                await running
                await busy.cancel()
                return before.frames[FrameDirection.UPSTREAM], after.frames[FrameDirection.DOWNSTREAM]

        up, down = run(main())
    # Pipecat adds its own "completed with no audio" for the turn; every other error is ours, and there is one
    errors = [str(getattr(f, "error", "")) for f in up if "Error" in type(f).__name__
              and "completed with no audio" not in str(getattr(f, "error", ""))]
    assert len(errors) == 1 and "server_busy" in errors[0] and "server at capacity" in errors[0], errors
    kinds = [type(f) for f in down]
    assert TTSAudioRawFrame not in kinds and TTSStoppedFrame in kinds
