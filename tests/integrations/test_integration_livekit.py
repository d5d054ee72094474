"""VoxrtTTS (LiveKit Agents) streaming against a live voxrt server (tiny model, CPU)."""

from __future__ import annotations


import pytest

pytest.importorskip("livekit.agents", reason="livekit-agents is not installed")

from livekit.agents import APIError, APIStatusError  # noqa: E402
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, APIConnectOptions  # noqa: E402

from voxrt.client import ContextState  # noqa: E402
from voxrt.integrations.livekit import VoxrtSynthesizeStream, VoxrtTTS  # noqa: E402
from voxrt_live import ONE_PLACE, busy_engine, live_server, run  # noqa: E402 (tests/support, on pytest's pythonpath)

TOKENS = ["Hello", " there,", " this", " is", " voxrt", " speaking."]
LONG_TEXT = " ".join(["This sentence keeps the engine busy for a good while."] * 12)
NO_RETRY = APIConnectOptions(max_retry=0, timeout=10)


@pytest.fixture(scope="module")
def secured():
    with live_server(api_keys=("k",)) as server:
        yield server


def test_the_plugin_overrides_no_private_method_of_livekit_but_its_hooks():
    """A private method of ours named like one of LiveKit's base classes' would replace theirs silently (it
    happened with Pipecat's `AIService._cancel`); `_run` is the stream's documented hook."""
    for cls, hooks in ((VoxrtTTS, set()), (VoxrtSynthesizeStream, {"_run"})):
        own = {name for name in vars(cls) if name.startswith("_") and not name.startswith("__")} - hooks
        for base in cls.__mro__[1:]:
            assert not own & (set(vars(base)) - {"_abc_impl"}), (cls, base)


def test_stream_tokens_to_frames_with_aligned_transcript(live):
    async def main():
        async with VoxrtTTS(url=live.ws, pacing="burst") as voxrt_tts:
            assert voxrt_tts.capabilities.streaming and voxrt_tts.capabilities.aligned_transcript
            async with voxrt_tts.stream() as stream:
                for token in TOKENS:
                    stream.push_text(token)
                stream.end_input()
                return [event async for event in stream]

    events = run(main())
    assert events and events[-1].is_final and not any(e.is_final for e in events[:-1])
    assert {e.frame.sample_rate for e in events} == {24000} and {e.frame.num_channels for e in events} == {1}
    assert sum(e.frame.duration for e in events) > 0.5
    assert len({e.request_id for e in events}) == 1 and len({e.segment_id for e in events}) == 1
    timed = [t for e in events for t in e.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    assert "".join(timed) == "".join(TOKENS)  # the pieces add up to the input, in order
    starts = [t.start_time for t in timed if isinstance(t.start_time, float)]
    assert starts and starts == sorted(starts)


def test_synthesize_whole_text(live):
    async def main():
        async with VoxrtTTS(url=live.ws, pacing="burst", sample_rate=16000) as voxrt_tts:
            return await voxrt_tts.synthesize("One whole sentence at once.").collect()

    frame = run(main())
    assert frame.sample_rate == 16000 and frame.duration > 0.3


def test_closing_a_stream_early_cancels_the_context(live):
    async def main():
        async with VoxrtTTS(url=live.ws, pacing="realtime") as voxrt_tts:
            stream = voxrt_tts.stream()
            stream.push_text(LONG_TEXT)
            stream.end_input()
            await anext(stream)  # speech has started
            session = await voxrt_tts.session(10)
            (context,) = session._contexts.values()
            await stream.aclose()  # what the agent does on an interruption
            return context, await context.done()

    context, done = run(main())
    assert done.reason == "cancelled" and context.state is ContextState.DONE


def test_errors_become_livekit_api_errors(live, secured):
    async def speak(voxrt_tts):
        async with voxrt_tts, voxrt_tts.stream(conn_options=NO_RETRY) as stream:
            stream.push_text("Hello.")
            stream.end_input()
            return [event async for event in stream]

    with pytest.raises(APIError) as caught:
        run(speak(VoxrtTTS(url=live.ws, voice="nobody")))
    assert "unknown_voice" in str(caught.value) and not caught.value.retryable
    with pytest.raises(APIStatusError) as caught:
        run(speak(VoxrtTTS(url=secured.ws, api_key="wrong")))
    assert caught.value.status_code == 401 and not caught.value.retryable
    assert run(speak(VoxrtTTS(url=secured.ws, api_key="k", pacing="burst")))


def test_rejects_a_rate_voxrt_does_not_serve():
    with pytest.raises(ValueError):
        VoxrtTTS(url="ws://127.0.0.1:1/v1/realtime", sample_rate=22050)


def test_a_turn_the_server_refuses_is_retried_whole_by_livekit():
    """Overload (`--max-admission-wait-ms`): another session holds the engine's only place, so the server
    refuses the turn (`server_busy`). The plugin raises it as a retryable 429, LiveKit replays the turn's buffered
    text into a new attempt (a new voxrt context), and once the place is free the whole turn is spoken."""
    retrying = APIConnectOptions(max_retry=8, retry_interval=0.25, timeout=10)
    with live_server(ONE_PLACE) as busy_live:
        async def main():
            async with busy_engine(busy_live) as busy:
                errors = []
                async with VoxrtTTS(url=busy_live.ws, pacing="burst") as voxrt_tts:
                    def on_error(event):  # the first refusal frees the place for a later attempt
                        errors.append(event)
                        voxrt_tts._in_background(busy.cancel())
                    voxrt_tts.on("error", on_error)
                    async with voxrt_tts.stream(conn_options=retrying) as stream:
                        for token in TOKENS:
                            stream.push_text(token)
                        stream.end_input()
                        events = [event async for event in stream]
                return errors, events

        errors, events = run(main())
    assert errors and all(e.recoverable and isinstance(e.error, APIStatusError) and e.error.status_code == 429
                          and "server_busy" in str(e.error) for e in errors)
    assert events and events[-1].is_final and sum(e.frame.duration for e in events) > 0.5
    timed = [t for e in events for t in e.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    assert "".join(timed) == "".join(TOKENS)  # the whole turn, replayed into the attempt that was served
