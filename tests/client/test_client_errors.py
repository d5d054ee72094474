"""Errors reach the caller with the protocol's codes: at connect, per context, and when the server closes."""

from __future__ import annotations

import socket

import httpx
import pytest

from voxrt.client import AuthenticationError, ConnectError, ContextState, OutputFormat, VoxrtError, connect
from voxrt.protocol.config import Limits
from voxrt_live import live_server, run  # tests/support, on pytest's pythonpath

PCM = OutputFormat("pcm16", 24000, 20)
KEY = "k"
MAX_TEXT_CHARS = 200


@pytest.fixture(scope="module")
def live():
    with live_server(limits=Limits(max_text_chars=MAX_TEXT_CHARS, inactivity_timeout_s=1.0)) as server:
        yield server


@pytest.fixture(scope="module")
def secured():
    with live_server(api_keys=(KEY,)) as server:
        yield server


async def _expect(error_type, coro) -> VoxrtError:
    with pytest.raises(error_type) as caught:
        await coro
    return caught.value


def test_unknown_voice_at_connect(live):
    error = run(_expect(VoxrtError, connect(live.ws, voice="nobody")))
    assert error.code == "unknown_voice" and not error.fatal and "nobody" in error.message


def test_text_too_long_fails_that_context_only(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="burst") as session:
            good, bad = session.context("good"), session.context("bad")
            await good.send("Fine.")
            await bad.send("x" * (MAX_TEXT_CHARS + 1))
            in_frames = await _expect(VoxrtError, _drain(bad))
            in_done = await _expect(VoxrtError, bad.done())
            in_send = await _expect(VoxrtError, bad.send("more"))
            await good.end()
            return bad, in_frames, in_done, in_send, await good.done()

    bad, in_frames, in_done, in_send, good_done = run(main())
    assert in_frames.code == "text_too_long" and in_frames.context_id == "bad" and not in_frames.fatal
    assert in_done is in_frames and in_send is in_frames and bad.state is ContextState.FAILED
    assert good_done.reason == "completed"


def test_text_too_long_after_audio_cancels_the_context_on_the_server(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="burst") as session:
            ctx = session.context()
            await ctx.send("A first sentence to speak.", flush=True)
            frames = ctx.frames()
            await anext(frames)  # the context is open and speaking
            await ctx.send("y" * MAX_TEXT_CHARS)
            error = await _expect(VoxrtError, _drain_iterator(frames))
            while session._contexts:  # the client's own cancel is answered: nothing is left on the server
                await session.ping()
            return error

    assert run(main()).code == "text_too_long"


def test_auth_failure_closes_4001(secured):
    error = run(_expect(AuthenticationError, connect(secured.ws, api_key="wrong")))
    assert error.code == "unauthorized" and error.close_code == 4001 and error.fatal
    error = run(_expect(AuthenticationError, connect(secured.ws)))
    assert error.close_code == 4001


def test_api_key_and_token_are_accepted(secured):
    async def main():
        async with connect(secured.ws, api_key=KEY) as by_key:
            assert await by_key.ping() > 0
        token = httpx.post(f"{secured.http}/v1/tokens", headers={"Authorization": f"Bearer {KEY}"},
                           timeout=10).json()["token"]
        async with connect(secured.ws, token=token) as by_token:
            assert await by_token.ping() > 0

    run(main())


def test_connection_refused():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = run(_expect(ConnectError, connect(f"ws://127.0.0.1:{port}/v1/realtime", open_timeout_s=5)))
    assert error.code == "connection_failed" and isinstance(error.__cause__, OSError)


def test_fatal_error_fails_everything_with_the_close_code(live):
    async def main():
        session = await connect(live.ws, output=PCM, keepalive=False)
        ctx = session.context()  # no text: the server sees an idle session and times it out
        error = await _expect(VoxrtError, ctx.done())
        events = [event async for event in session.events()]
        await session.close()
        return session, error, events

    session, error, events = run(main())
    assert error.code == "inactivity_timeout" and error.fatal and error.close_code == 4008
    assert session.is_closed and session.close_code == 4008
    assert [e.code for e in events] == ["inactivity_timeout"]


async def _drain(ctx) -> None:
    async for _ in ctx.frames():
        pass


async def _drain_iterator(frames) -> None:
    async for _ in frames:
        pass

