"""/v1/realtime over a real WebSocket against a real uvicorn server and engine process."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from conftest import collect_context, connect, metric, recv_json, run, start_session
from voxrt.audio import OpusDecoder
from voxrt_live import TEST_MODEL, TEST_VOICE
from voxrt.protocol.frames import decode_audio_frame

TOKENS = ["Sure", ",", " Dr", ".", " Smith", "'s", " balance", " is", " $", "3", ".", "50", ".", " Anything",
          " else", "?"]
BURST = {"pacing": {"mode": "burst"}}


def check_frames(frames, index: int, frame_ms: int) -> None:
    assert frames, "no audio frames"
    for seq, (header, _) in enumerate(frames):
        assert header.index == index
        assert header.seq == seq  # no gaps
        assert header.pts_ms == seq * frame_ms
        assert header.is_first == (seq == 0)
        assert header.is_last == (seq == len(frames) - 1)


def test_token_stream_to_opus_frames(live):
    async def scenario():
        async with connect(live, subprotocols=["voxrt.v1"]) as ws:
            assert ws.subprotocol == "voxrt.v1"
            started = await start_session(ws, voice=TEST_VOICE, output={"codec": "opus", "sample_rate": 48000,
                                                                       "frame_ms": 20}, **BURST)
            assert started["output"] == {"codec": "opus", "sample_rate": 48000, "frame_ms": 20}
            assert started["model"] == TEST_MODEL and started["limits"]["max_text_chars"] > 0
            for token in TOKENS:
                await ws.send(json.dumps({"type": "text", "context_id": "t1", "text": token}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "t1"}))
            context_started = await recv_json(ws)
            assert context_started == {"type": "context.started", "context_id": "t1", "index": context_started["index"]}
            frames, messages = await collect_context(ws)
            return context_started["index"], frames, messages

    index, frames, messages = run(scenario())
    check_frames(frames, index, 20)
    decoder = OpusDecoder(48000)
    audio = np.concatenate([decoder.decode(payload, 960) for _, payload in frames])
    assert len(audio) == 960 * len(frames)
    done = messages[-1]
    assert done["type"] == "context.done" and done["reason"] == "completed"
    assert isinstance(done["metrics"]["ttfa_ms"], int) and done["metrics"]["ttfa_ms"] >= 0
    assert abs(done["audio_ms"] - 20 * len(frames)) <= 20
    assert done["audio_ms"] > 1000  # ~15 characters per second of audio
    alignments = [m for m in messages if m["type"] == "alignment"]
    assert alignments and all(m["estimated"] is True for m in alignments)
    segments = [s for m in alignments for s in m["segments"]]
    text = "".join(TOKENS)
    assert all(text[s["char_start"]:s["char_end"]].strip() for s in segments)
    assert max(s["end_ms"] for s in segments) <= done["audio_ms"] + 1


@pytest.mark.parametrize(("codec", "rate", "frame_ms", "bytes_per_sample"),
                         [("pcm16", 16000, 20, 2), ("mulaw", 8000, 20, 1), ("alaw", 8000, 40, 1), ("pcm16", 24000, 10, 2)])
def test_pcm_codecs_and_rates(live, codec, rate, frame_ms, bytes_per_sample):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": codec, "sample_rate": rate, "frame_ms": frame_ms}, **BURST)
            await ws.send(json.dumps({"type": "text", "context_id": "c", "text": "Telephony test, short."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "c"}))
            await recv_json(ws)
            return await collect_context(ws)

    frames, messages = run(scenario())
    check_frames(frames, frames[0][0].index, frame_ms)
    full = rate * frame_ms // 1000 * bytes_per_sample
    assert all(len(p) == full for _, p in frames[:-1]) and 0 < len(frames[-1][1]) <= full
    total_ms = sum(len(p) for _, p in frames) / bytes_per_sample / rate * 1000
    assert abs(messages[-1]["audio_ms"] - total_ms) <= 1


def test_realtime_pacing_stays_within_lead(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": "pcm16", "sample_rate": 24000, "frame_ms": 20},
                                pacing={"mode": "realtime", "lead_ms": 200})
            await ws.send(json.dumps({"type": "text", "context_id": "p", "text": "Paced audio arrives no faster "
                                      "than it is played, plus the lead."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "p"}))
            loop = asyncio.get_running_loop()
            arrivals = []
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    header, _ = decode_audio_frame(message)
                    arrivals.append((loop.time() * 1000, header.pts_ms))
                elif json.loads(message)["type"] == "context.done":
                    return arrivals

    arrivals = run(scenario())
    t0 = arrivals[0][0]
    # playback starts with the first frame; a frame is never sent more than lead (+ scheduling slack) early
    assert all(pts - (t - t0) <= 200 + 20 + 60 for t, pts in arrivals)
    assert arrivals[-1][1] > 1000 and arrivals[-1][0] - t0 >= arrivals[-1][1] - 300


def test_cancel_mid_stream_is_a_hard_stop_and_frees_pages(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": "opus", "sample_rate": 48000, "frame_ms": 20},
                                pacing={"mode": "realtime", "lead_ms": 100})
            await ws.send(json.dumps({"type": "text", "context_id": "long", "text": "This is a long answer. " * 20}))
            started = await recv_json(ws)
            index = started["index"]
            num_frames = 0
            while num_frames < 10:
                if isinstance(await asyncio.wait_for(ws.recv(), 30), bytes):
                    num_frames += 1
            await ws.send(json.dumps({"type": "playback", "context_id": "long", "played_ms": 60}))
            await ws.send(json.dumps({"type": "cancel", "context_id": "long"}))
            after_cancel = []
            got_cancelled = None
            while True:
                message = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(message, bytes):
                    assert got_cancelled is None, "audio frame after cancelled"
                    continue
                data = json.loads(message)
                if data["type"] == "cancelled":
                    got_cancelled = data
                elif data["type"] == "context.done":
                    after_cancel.append(data)
                    break
            await ws.send(json.dumps({"type": "cancel", "context_id": "long"}))  # cancel twice: still answered
            again = await recv_json(ws)
            return index, got_cancelled, after_cancel[0], again

    index, cancelled, done, again = run(scenario())
    assert cancelled["context_id"] == "long" and cancelled["played_ms"] >= 0
    assert isinstance(cancelled["spoken_text"], str)
    assert done["reason"] == "cancelled"
    assert again["type"] == "cancelled"
    for _ in range(50):  # other tests' requests may still be finishing
        if metric(live, "voxrt_engine_kv_pages_free") == metric(live, "voxrt_engine_kv_pages_total"):
            break
        time.sleep(0.1)
    assert metric(live, "voxrt_engine_kv_pages_free") == metric(live, "voxrt_engine_kv_pages_total")
    assert metric(live, "voxrt_engine_requests") == 0 and metric(live, "voxrt_engine_pool_ok") == 1


def test_two_contexts_in_one_session(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "First turn."}))
            await ws.send(json.dumps({"type": "text", "context_id": "b", "text": "Second turn, spoken too."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "a"}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "b"}))
            frames, done, indexes = {}, {}, {}
            while len(done) < 2:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    header, payload = decode_audio_frame(message)
                    frames.setdefault(header.index, []).append((header, payload))
                    continue
                data = json.loads(message)
                if data["type"] == "context.started":
                    indexes[data["context_id"]] = data["index"]
                elif data["type"] == "context.done":
                    done[data["context_id"]] = data
            return frames, done, indexes

    frames, done, indexes = run(scenario())
    assert len(set(indexes.values())) == 2
    for cid, index in indexes.items():
        check_frames(frames[index], index, 20)
        assert done[cid]["reason"] == "completed"


def test_twenty_sessions_at_once(live):
    async def one(i: int):
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await ws.send(json.dumps({"type": "text", "context_id": f"c{i}", "text": f"Session {i} says hello."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": f"c{i}"}))
            await recv_json(ws)
            frames, messages = await collect_context(ws, timeout_s=120)
            check_frames(frames, frames[0][0].index, 20)
            return messages[-1]["reason"]

    async def scenario():
        return await asyncio.gather(*(one(i) for i in range(20)))

    assert run(scenario(), timeout_s=240) == ["completed"] * 20


def test_flush_is_answered_after_the_audio_of_its_text(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await ws.send(json.dumps({"type": "text", "context_id": "f", "text": "Partial thought without an end"}))
            await ws.send(json.dumps({"type": "flush", "context_id": "f"}))
            await recv_json(ws)  # context.started
            frames = 0
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    frames += 1
                elif json.loads(message)["type"] == "flushed":
                    break
            await ws.send(json.dumps({"type": "context.end", "context_id": "f"}))
            rest, messages = await collect_context(ws)
            return frames, rest, messages

    frames, rest, messages = run(scenario())
    assert frames > 20  # the flushed text's audio came before `flushed`
    assert rest and rest[-1][0].is_last and messages[-1]["reason"] == "completed"


def test_session_end_closes_after_the_last_context(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await ws.send(json.dumps({"type": "text", "context_id": "x", "text": "Goodbye."}))
            await ws.send(json.dumps({"type": "session.end"}))
            kinds = []
            try:
                while True:
                    message = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(message, str):
                        kinds.append(json.loads(message)["type"])
            except Exception:  # noqa: BLE001 (closed)
                pass
            return kinds, ws.close_code

    kinds, code = run(scenario())
    assert "context.done" in kinds and code == 1000


def test_alignment_segments_and_words_are_in_time_order(live):
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await ws.send(json.dumps({"type": "text", "context_id": "al", "text": "Hello there, this is voxrt "
                                      "speaking. A second sentence follows. And a third one ends it."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "al"}))
            await recv_json(ws)
            return await collect_context(ws)

    _, messages = run(scenario())
    segments = [s for m in messages if m["type"] == "alignment" for s in m["segments"]]
    words = [w for m in messages if m["type"] == "alignment" for w in m.get("words", [])]
    assert len(segments) >= 2 and words
    for items in (segments, words):
        for a, b in zip(items, items[1:]):
            assert a["start_ms"] <= a["end_ms"] <= b["start_ms"] + 1, (a, b)  # ms rounding


def test_the_engine_runs_the_policy_and_lanes_this_pass_asked_for(live):
    """scripts/test.sh runs these suites twice: base (lanes off on the CPU), then deadline on inline lanes."""
    import os  # noqa: PLC0415

    info = live.state.engine.info
    assert info.scheduler_type == os.environ.get("VOXRT_TEST_SCHEDULER", "base")
    expected = "in order on the host" if os.environ.get("VOXRT_TEST_LANES") == "inline" else "lanes off"
    assert expected in info.lanes
