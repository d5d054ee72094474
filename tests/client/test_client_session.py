"""The client against a real server (tiny model, CPU): streaming, concurrency, cancel, buffering, close."""

from __future__ import annotations

import asyncio

import pytest

from voxrt.client import (Alignment, AudioFrame, Cancelled, ConnectionClosedError, ContextDone, ContextState,
                          ErrorEvent, Flushed, OutputFormat, VoxrtError, connect)
from voxrt_live import TEST_VOICE, run  # tests/support, on pytest's pythonpath

PCM = OutputFormat("pcm16", 24000, 20)
FRAME_BYTES = 24000 * 20 // 1000 * 2
TOKENS = ["Hello", " there,", " this", " is", " a", " streamed", " answer.", " It", " has", " two", " sentences."]
LONG_TEXT = " ".join(["This sentence keeps the engine busy for a good while."] * 12)


async def _tokens(texts):
    for text in texts:
        await asyncio.sleep(0)  # an LLM yields between tokens
        yield text


def assert_continuous(frames: list[AudioFrame], context_id: str) -> None:
    assert frames, "no audio"
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.pts_ms for f in frames] == [f.seq * PCM.frame_ms for f in frames]
    assert [f.is_first for f in frames] == [True] + [False] * (len(frames) - 1)
    assert [f.is_last for f in frames] == [False] * (len(frames) - 1) + [True]
    assert {f.context_id for f in frames} == {context_id}
    assert all(len(f.payload) == FRAME_BYTES for f in frames[:-1])
    assert 0 < len(frames[-1].payload) <= FRAME_BYTES and len(frames[-1].payload) % 2 == 0


def test_token_stream_to_done(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="burst") as session:
            assert session.output == PCM and session.voice == TEST_VOICE and session.session_id
            ctx = session.context()
            sender = asyncio.ensure_future(ctx.send_all(_tokens(TOKENS)))
            frames = [frame async for frame in ctx.frames()]
            await sender
            done = await ctx.done()
            return ctx, frames, done

    ctx, frames, done = run(main())
    assert_continuous(frames, ctx.id)
    assert done == ContextDone(ctx.id, "completed", done.audio_ms, done.metrics)
    assert done.audio_ms == pytest.approx(len(frames) * PCM.frame_ms, abs=PCM.frame_ms)
    assert done.ttfa_ms is not None and done.metrics["frames"] == len(frames)
    assert ctx.state is ContextState.DONE and ctx.index is not None and ctx.num_text_chars == len("".join(TOKENS))
    assert ctx.alignments and all(isinstance(a, Alignment) for a in ctx.alignments)
    text = "".join(TOKENS)
    for span in (s for a in ctx.alignments for s in a.segments):
        assert text[span.char_start:span.char_end] == span.text and span.start_ms <= span.end_ms


def test_frames_buffered_before_reading_are_not_lost(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="burst") as session:
            ctx = session.context("early")
            await ctx.send("Every frame arrives before anyone reads.")
            await ctx.end()
            done = await ctx.done()  # all audio has arrived, unread
            frames = [frame async for frame in ctx.frames()]
            return frames, done

    frames, done = run(main())
    assert_continuous(frames, "early")
    assert done.metrics["frames"] == len(frames)


def test_events_carry_frames_flushed_and_done_in_order(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="burst") as session:
            ctx = session.context()
            await ctx.send("No boundary here", flush=True)
            items = []
            async for item in ctx.events():
                items.append(item)
                if isinstance(item, Flushed):
                    await ctx.send(" and then more.")
                    await ctx.end()
            return ctx, items

    ctx, items = run(main())
    kinds = [type(i) for i in items]
    assert kinds.count(Flushed) == 1 == ctx.num_flushed and kinds[-1] is ContextDone
    assert kinds.index(Flushed) > kinds.index(AudioFrame)  # the flushed text's audio came first
    assert_continuous([i for i in items if isinstance(i, AudioFrame)], ctx.id)


def test_two_contexts_at_once_in_one_session(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="burst") as session:
            a, b = session.context("a"), session.context("b")

            async def speak(ctx, texts):
                await ctx.send_all(_tokens(texts))
                return [frame async for frame in ctx.frames()], await ctx.done()

            return a, b, await asyncio.gather(speak(a, TOKENS[:7]), speak(b, ["Second", " voice", " here."]))

    a, b, ((frames_a, done_a), (frames_b, done_b)) = run(main())
    assert_continuous(frames_a, "a")
    assert_continuous(frames_b, "b")
    assert a.index != b.index
    assert done_a.reason == done_b.reason == "completed"


def test_cancel_stops_the_context(live):
    async def main():
        async with connect(live.ws, output=PCM, pacing="realtime") as session:
            ctx = session.context()
            await ctx.send(LONG_TEXT)
            await ctx.end()
            frames = []
            async for frame in ctx.frames():
                frames.append(frame)
                if len(frames) == 3:
                    cancelled = await ctx.cancel()
            done = await ctx.done()
            await session.ping()  # everything the server sent before the pong has arrived
            late = [item async for item in ctx.events()]
            again = await ctx.cancel()
            other = session.context()  # the session goes on
            await other.send("Still here.")
            await other.end()
            return ctx, frames, cancelled, done, late, again, await other.done()

    ctx, frames, cancelled, done, late, again, other_done = run(main())
    assert len(frames) == 3 and [f.seq for f in frames] == [0, 1, 2]
    assert isinstance(cancelled, Cancelled) and cancelled.context_id == ctx.id and cancelled.played_ms >= 0
    assert LONG_TEXT.startswith(cancelled.spoken_text)
    assert done.reason == "cancelled" and ctx.state is ContextState.DONE
    assert late == []
    assert again == Cancelled(ctx.id, 0, "")
    assert other_done.reason == "completed"


def test_context_without_text_is_done_at_once(live):
    async def main():
        async with connect(live.ws, output=PCM) as session:
            empty = session.context()
            await empty.end()
            never = session.context()
            return await empty.done(), await never.cancel(), await never.done()

    empty_done, cancelled, never_done = run(main())
    assert (empty_done.reason, empty_done.audio_ms) == ("completed", 0)
    assert cancelled.played_ms == 0 and never_done.reason == "cancelled"


def test_ping_and_session_events(live):
    async def main():
        async with connect(live.ws, output=PCM) as session:
            rtt_ms = await session.ping()
            await session._send({"type": "no.such.type"})  # a message only a broken client would send
            events = session.events()
            event = await anext(events)
            await events.aclose()
            return rtt_ms, event

    rtt_ms, event = run(main())
    assert 0 < rtt_ms < 5000
    assert isinstance(event, ErrorEvent) and event.code == "unknown_type" and not event.is_fatal


def test_clean_close_finishes_open_contexts(live):
    async def main():
        # close_timeout_s: how long the client waits for the server to finish speaking (a CPU engine here)
        async with connect(live.ws, output=PCM, pacing="burst", close_timeout_s=100) as session:
            ctx = session.context()
            await ctx.send("Left open when the session ends.")  # session.end finishes it
        return session, ctx, await ctx.done(), [frame async for frame in ctx.frames()]  # read after the close

    session, ctx, done, frames = run(main())
    assert session.is_closed and session.close_code == 1000
    assert done.reason == "completed"
    assert_continuous(frames, ctx.id)


def test_leaving_with_an_exception_cancels_and_fails_waiters(live):
    class Boom(Exception):
        pass

    async def main():
        ctx = None
        with pytest.raises(Boom):
            async with connect(live.ws, output=PCM, pacing="realtime") as session:
                ctx = session.context()
                await ctx.send(LONG_TEXT)
                raise Boom
        with pytest.raises(ConnectionClosedError) as caught:
            await ctx.done()
        with pytest.raises(VoxrtError):
            session.context()
        return session, caught.value

    session, error = run(main())
    assert session.is_closed and error.code == "connection_closed" and error.close_code == 1000


def test_context_ids_are_not_reused(live):
    async def main():
        async with connect(live.ws, output=PCM) as session:
            session.context("x")
            with pytest.raises(ValueError):
                session.context("x")
            with pytest.raises(ValueError):
                session.context("*")

    run(main())


def test_text_larger_than_one_message_is_split(live):
    """17000 four-byte characters fit a context (20000 chars) but not one message (65536 bytes, fatal 1009)."""
    async def main():
        async with connect(live.ws, output=PCM, pacing="realtime") as session:
            ctx = session.context()
            text = "\U0001F600" * 17000
            assert len(text.encode()) > session.limits.max_message_bytes
            await ctx.send(text)
            await session.ping()  # the server read all of it without closing
            cancelled = await ctx.cancel()
            return ctx, cancelled, session.is_closed

    ctx, cancelled, is_closed = run(main())
    assert ctx.num_text_chars == 17000 and cancelled.context_id == ctx.id and not is_closed


def test_a_context_done_that_answers_the_abort_does_not_finish_the_context(live):
    # The race behind the test above, made deterministic: the server's `context.done` (reason cancelled, its
    # answer to the abort's cancel-all) reaches the reader before the close; the context still fails with it.
    async def main():
        async with connect(live.ws, output=PCM, pacing="realtime") as session:
            ctx = session.context()
            await ctx.send(LONG_TEXT)
            session._is_aborting = True  # what abort() sets before its cancel goes out
            session._on_event(ContextDone(ctx.id, "cancelled", 0))
            assert not ctx.is_finished
            await session.abort()
        with pytest.raises(ConnectionClosedError):
            await ctx.done()

    run(main())
