"""Word forwarding over a real WebSocket with `tiny` (a program that reads text incrementally).

With segmentation `auto` the gateway forwards text as words complete, so audio starts while the first
sentence is still arriving, and alignment and barge-in point back at exactly what the client sent.
"""

from __future__ import annotations

import asyncio
import json
import re

from conftest import collect_context, connect, recv_json, run, start_session
from voxrt.text import Segmenter, speakable

TEXT = ("Once upon a time there lived a king who ruled a quiet land far away beyond the blue mountains and "
        "the wide grey seas that nobody had crossed in a hundred years. **Nobody** knew why 🙂.")
BURST = {"pacing": {"mode": "burst"}}


def llm_tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+\s*$|\s*\S+", text)


def expected_words(text: str) -> list[tuple[str, int, int]]:
    out, offsets = speakable(text)
    return [(text[offsets[m.start()]:offsets[m.end() - 1] + 1], offsets[m.start()], offsets[m.end() - 1] + 1)
            for m in re.finditer(r"\S+", out) if any(ch.isalnum() for ch in m.group())]


async def send_tokens(ws, context_id: str, tokens: list[str]) -> None:
    for token in tokens:
        await ws.send(json.dumps({"type": "text", "context_id": context_id, "text": token}))


def test_first_audio_arrives_while_the_first_sentence_is_still_being_sent(live):
    assert live.state.engine.info.consumes_text_incrementally
    tokens = llm_tokens(TEXT)
    first, rest = tokens[:6], tokens[6:]  # "Once upon a time there lived": no clause mark, far from 80 chars

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await send_tokens(ws, "w", first)
            assert (await recv_json(ws))["type"] == "context.started"
            # no more text, no flush, no context.end: the words so far are spoken on their own
            while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
                pass
            await send_tokens(ws, "w", rest)
            await ws.send(json.dumps({"type": "context.end", "context_id": "w"}))
            return await collect_context(ws)

    frames, messages = run(scenario())
    assert frames and messages[-1]["type"] == "context.done" and messages[-1]["reason"] == "completed"
    alignments = [m for m in messages if m["type"] == "alignment"]
    assert all(m["words"] for m in alignments)  # clients may read words only
    words = [(w["word"], w["char_start"], w["char_end"]) for m in alignments for w in m["words"]]
    assert words == expected_words(TEXT)  # every word once, in order, pointing back at the sent text
    segmenter = Segmenter("auto")
    assert [(s["text"], s["char_start"], s["char_end"]) for m in alignments for s in m["segments"]] == \
        [(s.text, s.char_start, s.char_end) for s in segmenter.push(TEXT) + segmenter.flush()]
    times = [(w["start_ms"], w["end_ms"]) for m in alignments for w in m["words"]]
    assert all(a <= b for a, b in times) and all(a[1] <= b[0] + 1 for a, b in zip(times, times[1:]))
    assert times[-1][1] <= messages[-1]["audio_ms"] + 1


def test_barge_in_reports_the_words_heard(live):
    text = TEXT * 3

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, output={"codec": "pcm16", "sample_rate": 24000, "frame_ms": 20},
                                pacing={"mode": "realtime", "lead_ms": 300})
            await send_tokens(ws, "b", llm_tokens(text))
            words, num_frames = [], 0
            while num_frames < 40 or not words:  # 800 ms of audio sent, and some words aligned
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    num_frames += 1
                elif (data := json.loads(message))["type"] == "alignment":
                    words += data["words"]
            await ws.send(json.dumps({"type": "playback", "context_id": "b", "played_ms": 400}))
            await ws.send(json.dumps({"type": "cancel", "context_id": "b"}))
            while (data := await recv_json(ws))["type"] != "cancelled":
                if data["type"] == "alignment":
                    words += data["words"]
            return words, data

    words, cancelled = run(scenario())
    heard, played_ms = cancelled["spoken_text"], cancelled["played_ms"]
    assert played_ms >= 400 and text.startswith(heard)
    assert heard == "" or len(heard) in {end for _, _, end in expected_words(text)}  # whole words
    for w in words:  # the words aligned before `played_ms` were heard, the later ones not (ms rounding)
        if w["end_ms"] < played_ms - 1:
            assert len(heard) >= w["char_end"]
        elif w["end_ms"] > played_ms + 1:
            assert len(heard) < w["char_end"]


def test_explicit_sentence_segmentation_still_speaks_segments(live):
    """`sentence` keeps the segment path on a program that could take words: alignment by sentence, its
    words splitting the sentence's time."""
    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, segmentation="sentence", **BURST)
            await send_tokens(ws, "s", llm_tokens(TEXT))
            await ws.send(json.dumps({"type": "context.end", "context_id": "s"}))
            await recv_json(ws)
            return await collect_context(ws)

    _, messages = run(scenario())
    assert messages[-1]["reason"] == "completed"
    alignments = [m for m in messages if m["type"] == "alignment"]
    segmenter = Segmenter("sentence")
    expected = [(s.text, s.char_start, s.char_end) for s in segmenter.push(TEXT) + segmenter.flush()]
    assert [(s["text"], s["char_start"], s["char_end"]) for m in alignments for s in m["segments"]] == expected
    assert len(expected) == 2 and all(m["segments"] for m in alignments)
    words = [w for m in alignments for w in m["words"]]
    assert [w["word"] for w in words] == TEXT.split()[:-1]  # "🙂." is no word; "**Nobody**" is one


def test_the_opening_text_goes_with_the_request(live):
    """The engine gets a context's opening words in the message that starts its request (no empty submit with
    an append after it), and each later token as an append. A program that reads the prompt at once (Orpheus,
    scripts/test.sh's third pass) gets the segment's whole text in its request, and no append."""
    from voxrt.engine.messages import AppendText, SubmitRequest

    engine = live.state.engine
    seen, original = [], engine._send
    engine._send = lambda msg: (seen.append(msg), original(msg))[1]
    tokens = ["Once upon a", " time", " there."]  # an opening message of three words, then LLM tokens

    async def scenario():
        async with connect(live) as ws:
            await start_session(ws, **BURST)
            await send_tokens(ws, "o", tokens)
            await ws.send(json.dumps({"type": "context.end", "context_id": "o"}))
            return await collect_context(ws)

    try:
        frames, messages = run(scenario())
    finally:
        engine._send = original
    assert frames and messages[-1]["type"] == "context.done" and messages[-1]["reason"] == "completed"
    submits = [m for m in seen if isinstance(m, SubmitRequest)]
    if not engine.info.consumes_text_incrementally:  # scripts/test.sh's Orpheus pass: a request per segment
        assert [m.text for m in submits] == ["Once upon a time there. "] and submits[0].is_text_final
        assert not [m for m in seen if isinstance(m, AppendText)]
        return
    # the opening message's text (it completed words; the engine's text feed waits for the end of "a" itself)
    assert len(submits) == 1 and submits[0].text == "Once upon a" and not submits[0].is_text_final
    appends = [m for m in seen if isinstance(m, AppendText) and m.request_id == submits[0].request_id]
    assert submits[0].text + "".join(m.text for m in appends) == "Once upon a time there."
    assert appends[-1].is_final
