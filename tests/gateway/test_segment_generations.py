"""A program that reads its text in the prompt at once (Orpheus, `make-checkpoint --arch orpheus-tiny`) behind the
realtime protocol: each segment of a context is its own engine request, submitted as soon as the segmenter cuts
it (while the segment before still plays), and the client gets one frame sequence per context, the LAST flag on
its very end; cancel stops the queued requests too (gateway/context.py, `_Generations`)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from conftest import collect_context, connect, recv_json, start_session
from raw_ws import assert_returned
from voxrt.engine.messages import CancelRequest, SetPlayback, SubmitRequest
from voxrt.models.registry import make_checkpoint
from voxrt.protocol.frames import decode_audio_frame
from voxrt_live import live_server, run

PCM = {"codec": "pcm16", "sample_rate": 24000, "frame_ms": 20}
SENTENCES = ["Hello there, my friend.", "This is the second sentence.", "And a third one ends it."]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    directory = tmp_path_factory.mktemp("orpheus-tiny")
    make_checkpoint("orpheus-tiny", str(directory), device="cpu")
    with live_server(engine_kwargs={"model": "orpheus", "checkpoint": str(directory), "max_seq_len": 1024}) as server:
        yield server


@pytest.fixture
def sent(live):
    """Every message the gateway sends its engine during the test."""
    engine = live.state.engine
    seen, original = [], engine._send
    engine._send = lambda msg: (seen.append(msg), original(msg))[1]
    yield seen
    engine._send = original


@pytest.fixture
def submits(live):
    """(monotonic time, text) of every engine request the gateway submits during the test."""
    engine = live.state.engine
    original = engine.submit
    seen: list[tuple[float, str]] = []

    async def submit(*args, **kwargs):
        seen.append((time.monotonic(), kwargs.get("text", "")))
        return await original(*args, **kwargs)

    engine.submit = submit
    yield seen
    engine.submit = original


def test_each_segment_is_a_request_and_the_context_one_frame_sequence(live, submits, sent):
    """Realtime pacing: the first sentence alone, then (once its audio has started) the other two and the end;
    their requests go in before the first one's audio has all been sent, each told how much audio is still
    ahead of it (a playback anchor with played_samples < 0: its deadlines follow the stream), and the frames
    are one sequence."""
    assert not live.state.engine.info.consumes_text_incrementally

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, voice="tara", output=PCM, pacing={"mode": "realtime", "lead_ms": 300})
            await ws.send(json.dumps({"type": "text", "context_id": "c", "text": SENTENCES[0] + " "}))
            await ws.send(json.dumps({"type": "flush", "context_id": "c"}))  # the first segment now
            frames, arrivals = [], []
            while not frames:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    frames.append(decode_audio_frame(message))
                    arrivals.append(time.monotonic())
            for sentence in SENTENCES[1:]:
                await ws.send(json.dumps({"type": "text", "context_id": "c", "text": sentence + " "}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
            rest, messages = await collect_context(ws, timeout_s=120)
            return frames + rest, arrivals, messages

    frames, arrivals, messages = run(scenario(), timeout_s=180)
    texts = [text.strip() for _, text in submits]
    # a request per segment, in order, each its segment's text (the segmenter's cuts: the first at a clause)
    assert len(texts) >= 3 and " ".join(texts) == " ".join(SENTENCES), texts
    assert messages[-1]["type"] == "context.done" and messages[-1]["reason"] == "completed", messages[-1]
    headers = [h for h, _ in frames]
    assert [h.seq for h in headers] == list(range(len(headers)))  # one sequence: no restart at a segment
    assert [h.pts_ms for h in headers] == [20 * h.seq for h in headers]  # and no gap in its timestamps
    assert [h.is_first for h in headers] == [True] + [False] * (len(headers) - 1)
    assert [h.is_last for h in headers] == [False] * (len(headers) - 1) + [True]
    aligned = [s for m in messages if m["type"] == "alignment" for s in m["segments"]]
    # the later segments were submitted while the first one still played: before the listener, who started at
    # the first frame, reached the end of the first request's audio (its last segment's end in the alignment)
    first_request_end_s = max(s["end_ms"] for s in aligned if s["char_end"] <= len(texts[0]) + 1) / 1000
    assert all(t < arrivals[0] + first_request_end_s for t, _ in submits[1:]), (submits, first_request_end_s)
    ids = [m.request_id for m in sent if isinstance(m, SubmitRequest)]
    anchors = [m for m in sent if isinstance(m, SetPlayback)]
    for request_id in ids[1:]:  # the first report the engine gets of a later segment: audio still ahead of it
        first = next(m for m in anchors if m.request_id == request_id)
        assert first.played_samples < 0 and not first.is_stalled, first
    assert len(headers) * 20 > 3000  # three sentences of tiny-orpheus speech (a length rule: ~14 chars a second)
    # every segment aligned (a request may carry several cut at once), in order and in time order
    assert " ".join(s["text"] for s in aligned) == " ".join(texts)
    assert all(a["end_ms"] <= b["start_ms"] for a, b in zip(aligned, aligned[1:]))


def test_an_end_after_the_audio_closes_the_sequence_with_a_last_frame(live, submits):
    """The context ends only after its one segment's audio has gone out (burst): the LAST flag then rides on
    one more frame (the frame splitter's held tail)."""
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, voice="tara", output=PCM, pacing={"mode": "burst"})
            await ws.send(json.dumps({"type": "text", "context_id": "e", "text": "Just one line."}))
            await ws.send(json.dumps({"type": "flush", "context_id": "e"}))
            frames = []
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    frames.append(decode_audio_frame(message))
                elif json.loads(message)["type"] == "flushed":
                    break
            await ws.send(json.dumps({"type": "context.end", "context_id": "e"}))
            rest, messages = await collect_context(ws)
            return frames, rest, messages

    frames, rest, messages = run(scenario())
    assert len(submits) == 1 and frames and not any(h.is_last for h, _ in frames)
    assert len(rest) == 1 and rest[0][0].is_last and rest[0][0].seq == len(frames)
    assert 0 < len(rest[0][1]) <= 480 * 2
    assert messages[-1]["reason"] == "completed"


def test_cancel_stops_the_queued_segments_too(live, submits):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, voice="leo", output=PCM, pacing={"mode": "realtime", "lead_ms": 100})
            for sentence in SENTENCES * 2:  # as an agent sends them: the segmenter cuts as the text comes
                await ws.send(json.dumps({"type": "text", "context_id": "x", "text": sentence + " "}))
            while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
                pass
            await ws.send(json.dumps({"type": "cancel", "context_id": "x"}))
            while (data := await recv_json(ws))["type"] != "cancelled":
                pass
            return data

    cancelled = run(scenario())
    assert cancelled["context_id"] == "x" and len(submits) > 1  # more segments were queued than the one playing
    assert_returned(live, 10)  # every request (the queued ones too), page, slot and session is back


def test_requests_get_the_models_sampling_defaults(live, sent):
    """A session sets no sampling: the engine requests carry Orpheus's (its reference's realtime example:
    temperature 0.4, top-p 0.9, repetition penalty 1.1), not the generic defaults."""
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, voice="tara", output=PCM, pacing={"mode": "burst"})
            await ws.send(json.dumps({"type": "text", "context_id": "d", "text": "Defaults."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "d"}))
            return await collect_context(ws)

    run(scenario())
    params = [m.params for m in sent if isinstance(m, SubmitRequest)]
    assert params and all((p.temperature, p.top_p, p.top_k, p.repetition_penalty) == (0.4, 0.9, 0, 1.1) for p in params)
    assert live.state.engine.info.sampling_defaults["repetition_penalty"] == 1.1


def test_a_failed_segment_ends_the_context_and_stops_the_segments_queued_behind_it(live, submits, sent):
    """The first segment is longer than its request's KV positions allow (1024 here: its prompt and 7 a frame),
    so the length cap cuts it: the context ends with `length_limit`, and the next segment's request, queued
    behind it and still generating (it was sent once the first one's audio had started, and is as long), is
    cancelled rather than left generating for nobody."""
    long_sentence = "word " * 40 + "and more words to say before the end of it."  # ~240 characters, one sentence

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, voice="tara", output=PCM, pacing={"mode": "burst"})
            await ws.send(json.dumps({"type": "text", "context_id": "f", "text": long_sentence + " "}))
            await ws.send(json.dumps({"type": "flush", "context_id": "f"}))
            while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
                pass
            await ws.send(json.dumps({"type": "text", "context_id": "f", "text": "Then " + long_sentence + " "}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "f"}))
            return await collect_context(ws, timeout_s=120)

    _, messages = run(scenario(), timeout_s=180)
    errors = [m for m in messages if m["type"] == "error"]
    assert errors and errors[0]["code"] == "length_limit" and errors[0]["context_id"] == "f", messages[-3:]
    assert messages[-1]["type"] == "context.done" and messages[-1]["reason"] == "error"
    ids = [m.request_id for m in sent if isinstance(m, SubmitRequest)]
    cancelled = {m.request_id for m in sent if isinstance(m, CancelRequest)}
    assert len(ids) == 2
    if os.environ.get("VOXRT_TEST_SCHEDULER", "base") == "base":
        # base decodes both in lockstep and decodes chunks as they come: the second, a few frames behind, is
        # still generating when the first's last chunk arrives, and is stopped. (The deadline policy decodes the
        # first's late chunks near their deadlines, seconds on, by when the second has ended by itself: no
        # cancel is owed then, and the check below is what holds.)
        assert ids[1] in cancelled
    assert_returned(live, 10)  # every request, page and slot is back
