"""The `cartesia` SDK (its websocket_base_url targets this server) against the Cartesia-compatible
WebSocket: pushed transcripts, raw encodings decoded to the expected duration, word timestamps, cancel."""

from __future__ import annotations

import base64

import cartesia
import numpy as np
import pytest

from compat_audio import TINY_CHARS_PER_S

TEXT_PARTS = ["Hello there, ", "my good ", "friend."]
TEXT = "".join(TEXT_PARTS)


@pytest.fixture(scope="module")
def client(live):
    return cartesia.Cartesia(api_key="unused", base_url=live.http,
                             websocket_base_url=live.ws.replace("/v1/realtime", ""))


def _speak(client, output_format, add_timestamps=False):
    chunks, events = [], []
    with client.tts.websocket_connect() as connection:
        ctx = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"},
                                 output_format=output_format, add_timestamps=add_timestamps)
        for part in TEXT_PARTS:
            ctx.push(part)
        ctx.no_more_inputs()
        for event in ctx.receive():
            events.append(event)
            if event.type == "chunk":
                chunks.append(base64.b64decode(event.data))
    return b"".join(chunks), events


@pytest.mark.parametrize("encoding,rate,width", [("pcm_f32le", 44100, 4), ("pcm_s16le", 24000, 2),
                                                 ("pcm_mulaw", 8000, 1)])
def test_sdk_context_push_decodes_to_the_duration(client, encoding, rate, width):
    audio, events = _speak(client, {"container": "raw", "encoding": encoding, "sample_rate": rate})
    assert events[-1].type == "done"
    seconds = len(audio) / width / rate
    assert abs(seconds - len(TEXT) / TINY_CHARS_PER_S) < 0.5, seconds
    if encoding == "pcm_f32le":
        pcm = np.frombuffer(audio, dtype="<f4")
        assert np.isfinite(pcm).all() and np.abs(pcm).max() <= 1.0


def test_word_timestamps(client):
    _, events = _speak(client, {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
                       add_timestamps=True)
    stamps = [e.word_timestamps for e in events if e.type == "timestamps"]
    words = [w for s in stamps for w in s.words]
    assert words and "Hello" in " ".join(words)
    for s in stamps:
        assert len(s.words) == len(s.start) == len(s.end) and all(a <= b for a, b in zip(s.start, s.end))


def test_cancel_stops_a_context_and_the_connection_goes_on(client):
    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
    with client.tts.websocket_connect() as connection:
        long_ctx = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=fmt)
        long_ctx.push("A long answer that is going to be interrupted before the end. " * 8)
        for event in long_ctx.receive():
            if event.type == "chunk":
                break
        long_ctx.cancel()
        short = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=fmt)
        short.push("Next.")
        short.no_more_inputs()
        kinds = [e.type for e in short.receive()]
    assert kinds[-1] == "done" and "chunk" in kinds


def test_bad_requests_get_errors_and_the_connection_goes_on(live):
    import asyncio  # noqa: PLC0415
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    fmt = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}

    async def scenario():
        async with websockets.connect(live.ws.replace("/v1/realtime", "/tts/websocket")) as ws:
            # an error ends its context (done: true) and later messages for it are ignored: one id per case
            for bad in ("{nope", json.dumps({"transcript": "no context"}),
                        json.dumps({"context_id": "a1", "transcript": "x", "voice": {"id": "default"},
                                    "output_format": {"container": "raw", "encoding": "pcm_s8", "sample_rate": 16000}}),
                        json.dumps({"context_id": "a2", "transcript": "x", "voice": {"id": "nobody"},
                                    "output_format": fmt}),
                        json.dumps({"context_id": "a3", "transcript": "x", "output_format": fmt}),  # no voice
                        json.dumps({"context_id": "a4", "transcript": "x", "output_format": fmt,
                                    "voice": {"mode": "embedding", "embedding": [0.1] * 192}}),
                        json.dumps({"context_id": "a5", "transcript": "x", "voice": {"id": "default"},
                                    "output_format": fmt, "max_buffer_delay_ms": 6000})):
                await ws.send(bad)
                reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert reply["type"] == "error", (bad, reply)
                if '"a3"' in bad or '"a4"' in bad:  # never a silent default voice
                    assert "voice" in reply["message"] and "{mode: 'id', id: VOICE_ID}" in reply["message"], reply
            await ws.send(json.dumps({"context_id": "b", "transcript": "Fine.", "voice": {"id": "default"},
                                      "model_id": "sonic-2", "output_format": fmt}))
            kinds = []
            while not kinds or kinds[-1] != "done":
                kinds.append(json.loads(await asyncio.wait_for(ws.recv(), 60))["type"])
            return kinds

    assert "chunk" in run(scenario())


# ---- raw WebSocket scenarios: buffering, flush ids, errors that end a context, binary frames, idle ------------

FMT16 = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
SENTENCES = "Hello, my name is Sonic. I am glad to meet you today."  # the native session holds the last one


def _req(context_id: str, transcript: str, cont: bool = True, **extra) -> dict:
    return {"context_id": context_id, "model_id": "sonic-2", "transcript": transcript,
            "voice": {"mode": "id", "id": "default"}, "output_format": FMT16, "continue": cont, **extra}


def _tts_url(live) -> str:
    return live.ws.replace("/v1/realtime", "/tts/websocket")


def _seconds(messages: list[dict], context_id: str | None = None) -> float:
    return sum(len(base64.b64decode(m["data"])) for m in messages
               if m["type"] == "chunk" and (context_id is None or m["context_id"] == context_id)) / 2 / 16000


async def _recv(ws, timeout_s: float = 60) -> dict:
    import asyncio  # noqa: PLC0415
    import json  # noqa: PLC0415

    return json.loads(await asyncio.wait_for(ws.recv(), timeout_s))


async def _until(ws, messages: list, done) -> list[dict]:
    """Reads into `messages` until `done(messages)`; a generous bound per message, no timing asserted."""
    while not done(messages):
        messages.append(await _recv(ws))
    return messages


def _done_for(context_id: str):
    return lambda ms: any(m["type"] == "done" and m.get("context_id") == context_id for m in ms)


@pytest.mark.parametrize("delay_ms", [None, 0])
def test_held_text_is_spoken_after_max_buffer_delay_without_more_input(live, delay_ms):
    """With `continue: true` the native session holds the end of the text (its last word: no whitespace follows
    it yet) for more input; once max_buffer_delay_ms (default 3000; 0: at once) passes without any, the held
    word is spoken without the context's end: its audio and timestamps come, and the internal flush sends no
    flush_done. (The tiny model's audio for text not final is shorter than at the end, so the words tell.)"""
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    extra = {"add_timestamps": True} | ({} if delay_ms is None else {"max_buffer_delay_ms": delay_ms})

    def words(messages):
        return [w for m in messages if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]

    async def scenario():
        async with websockets.connect(_tts_url(live)) as ws:
            await ws.send(json.dumps(_req("c", SENTENCES, **extra)))
            before_end = await _until(ws, [], lambda ms: "today." in words(ms))
            await ws.send(json.dumps(_req("c", "", cont=False)))
            return before_end, await _until(ws, [], _done_for("c"))

    before_end, after_end = run(scenario())
    assert " ".join(words(before_end)) == SENTENCES
    assert "today." not in words(after_end)
    everything = before_end + after_end
    assert not [m for m in everything if m["type"] in ("flush_done", "error")]
    assert {m["flush_id"] for m in everything if m["type"] in ("chunk", "timestamps")} == {1}


def test_flush_ids_count_per_context_and_tag_every_chunk(live):
    """flush_id: per context from 1; every chunk carries its segment's id; internal flushes (buffer delay 0
    after each push) are not counted and send no flush_done, even interleaved with the client's."""
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    async def scenario():
        async with websockets.connect(_tts_url(live)) as ws:
            for message in (_req("a", "Stay hungry, ", max_buffer_delay_ms=0), _req("b", "Second context words. "),
                            _req("a", "", flush=True), _req("b", "", flush=True),
                            _req("a", "stay foolish.", max_buffer_delay_ms=0), _req("b", "More of them."),
                            _req("a", "", cont=False), _req("b", "", cont=False)):
                await ws.send(json.dumps(message))
            return await _until(ws, [], lambda ms: _done_for("a")(ms) and _done_for("b")(ms))

    messages = run(scenario())
    for context_id in ("a", "b"):
        mine = [m for m in messages if m.get("context_id") == context_id]
        assert [m["flush_id"] for m in mine if m["type"] == "flush_done"] == [1], mine
        cut = next(i for i, m in enumerate(mine) if m["type"] == "flush_done")
        before = {m["flush_id"] for m in mine[:cut] if m["type"] == "chunk"}
        after = {m["flush_id"] for m in mine[cut:] if m["type"] == "chunk"}
        assert before == {1} and after == {2}, (context_id, before, after)
    assert not [m for m in messages if m["type"] == "error"]


def test_sdk_flushing_example_gives_one_file_per_flush_id(client):
    """docs.cartesia.ai's flushing example: the audio is filed by `flush_id`, one file per transcript."""
    files: dict[int, bytes] = {}
    with client.tts.websocket_connect() as connection:
        ctx = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=FMT16)
        ctx.push("Stay hungry, ")
        ctx.push("", flush=True)
        ctx.push("stay foolish.")
        ctx.no_more_inputs()
        flush_done = []
        for event in ctx.receive():
            if event.type == "chunk":
                files[event.flush_id or 0] = files.get(event.flush_id or 0, b"") + base64.b64decode(event.data)
            elif event.type == "flush_done":
                flush_done.append(event.flush_id)
    assert sorted(files) == [1, 2] and all(files.values()), {k: len(v) for k, v in files.items()}
    assert flush_done == [1]


def test_no_more_inputs_without_a_push_is_done(client):
    with client.tts.websocket_connect() as connection:
        ctx = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=FMT16)
        ctx.no_more_inputs()
        assert [e.type for e in ctx.receive()] == ["done"]
        after = connection.context(model_id="sonic-2", voice={"mode": "id", "id": "default"}, output_format=FMT16)
        after.push("Next.")
        after.no_more_inputs()
        assert [e.type for e in after.receive()][-1] == "done"


def test_an_error_ends_its_context_and_nothing_follows_it(live):
    """A request that changes an open context's voice fails that context: after its error (done: true) no audio
    and no `done` of it follow (the context is stopped), a later request on it gets an error of its own (not
    silence), and other contexts go on."""
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    async def scenario():
        async with websockets.connect(_tts_url(live)) as ws:
            await ws.send(json.dumps(_req("c", "Hello there, my good friend. " * 3)))
            await ws.send(json.dumps(_req("c", "More words here.", voice={"mode": "id", "id": "alto"})))
            await ws.send(json.dumps(_req("c", "", cont=False)))
            await ws.send(json.dumps(_req("d", "Another context.", cont=False)))
            return await _until(ws, [], _done_for("d"))

    messages = run(scenario())
    mine = [m for m in messages if m.get("context_id") == "c"]
    first = next(i for i, m in enumerate(mine) if m["type"] == "error")
    assert "one voice" in mine[first]["message"]
    after = mine[first + 1:]
    assert [m["type"] for m in after] == ["error"], [m["type"] for m in mine]  # the request after it: answered
    assert "has ended" in after[0]["message"] and after[0]["done"] is True


def test_past_the_context_limit_one_error_429_per_refused_context(live):
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    max_contexts = live.state.config.limits.max_contexts
    ids = [f"k{i}" for i in range(max_contexts + 2)]
    refused = ids[max_contexts:]

    async def scenario():
        async with websockets.connect(_tts_url(live)) as ws:
            for context_id in ids:  # long texts: none is done before the last is opened
                await ws.send(json.dumps(_req(context_id, f"Context {context_id} is speaking now. " * 6, cont=False)))
            messages = await _until(ws, [], lambda ms: all(any(m.get("context_id") == c and m["type"] == "error"
                                                               for m in ms) for c in refused))
            for context_id in ids[:max_contexts]:
                await ws.send(json.dumps({"context_id": context_id, "cancel": True}))
            await ws.send(json.dumps(_req("last", "The end.", cont=False)))
            return await _until(ws, messages, _done_for("last"))

    messages = run(scenario())
    for context_id in refused:
        mine = [m for m in messages if m.get("context_id") == context_id]
        assert len(mine) == 1 and mine[0]["error_code"] == "context_limit" and mine[0]["status_code"] == 429, mine


def test_a_binary_frame_gets_an_error_and_the_connection_goes_on(live):
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    async def scenario():
        async with websockets.connect(_tts_url(live)) as ws:
            await ws.send(json.dumps(_req("bin", "Hello.", cont=False)).encode())
            reply = await _recv(ws)
            await ws.send(json.dumps(_req("txt", "Hello.", cont=False)))
            return reply, await _until(ws, [], _done_for("txt"))

    reply, messages = run(scenario())
    assert reply["type"] == "error" and reply["done"] is True and "binary" in reply["message"], reply
    assert "chunk" in [m["type"] for m in messages]


# ---- buffer-delay timers, without a server -----------------------------------------------------------------


def _adapter():
    from types import SimpleNamespace  # noqa: PLC0415

    from voxrt.gateway.compat import cartesia as cartesia_ws  # noqa: PLC0415
    from voxrt.gateway.compat.aliases import Aliases  # noqa: PLC0415
    from voxrt.protocol.config import Limits  # noqa: PLC0415

    class FakeWS:
        def __init__(self) -> None:
            self.out: list[str] = []

        async def send_text(self, text: str) -> None:
            self.out.append(text)

        async def close(self, code: int = 1000, reason: str = "") -> None:
            pass

    state = SimpleNamespace(config=SimpleNamespace(limits=Limits(), aliases=Aliases()),
                            engine=SimpleNamespace(info=SimpleNamespace(name="tiny", voices=("default", "alto"),
                                                                        default_voice="default")))
    return cartesia_ws.CartesiaAdapter(FakeWS(), state)


def _native(adapter) -> list[dict]:
    """The native messages the adapter sent so far (taken off the link)."""
    import json  # noqa: PLC0415

    out = []
    while not adapter.link._inbox.empty():
        out.append(json.loads(adapter.link._inbox.get_nowait()["text"]))
    return out


def test_buffer_delay_timers_end_with_their_context_and_the_socket():
    """A push with `continue: true` arms the context's timer; its end, a cancel, an error or the socket's
    close cancels it (no flush after that); when it fires, an internal flush goes to the native session."""
    import asyncio  # noqa: PLC0415

    async def go():
        adapter = _adapter()
        delay = {"max_buffer_delay_ms": 5000}
        for context_id in ("ended", "cancelled", "failed", "open"):
            adapter.handle(_req(context_id, "Some words", **delay))
        timers = {cid: adapter.contexts[cid].timer for cid in adapter.contexts}
        assert all(t is not None for t in timers.values())
        adapter.handle(_req("ended", "", cont=False))
        adapter.handle({"context_id": "cancelled", "cancel": True})
        adapter.handle(_req("failed", "x", voice={"mode": "id", "id": "alto"}))
        assert [cid for cid, t in timers.items() if t.cancelled()] == ["ended", "cancelled", "failed"]
        await adapter._on_close(1000, "")
        assert timers["open"].cancelled()
        _native(adapter)
        adapter._buffer_elapsed("open", adapter.contexts["open"])  # a callback that raced the close: no-op
        assert _native(adapter) == []

        fired = _adapter()
        fired.handle(_req("c", "Some words", max_buffer_delay_ms=1))
        sent = _native(fired)
        for _ in range(500):  # until the timer fires (no bound on how soon)
            if sent and sent[-1]["type"] == "flush":
                break
            await asyncio.sleep(0.01)
            sent += _native(fired)
        assert [m["type"] for m in sent] == ["session.start", "text", "flush"]
        assert list(fired.contexts["c"].pending_flushes) == [False]  # internal: answered by no flush_done
        fired.shutdown()
        await fired.outbox.stop()
        await adapter.outbox.stop()

    asyncio.run(go())


# ---- idle timeouts: Cartesia's 5 minutes, not the server's ---------------------------------------------------


@pytest.fixture(scope="module")
def short_live():
    """A server whose own idle limits are short (1 s before session.start, 2 s after)."""
    from voxrt.protocol.config import Limits  # noqa: PLC0415
    from voxrt_live import live_server  # noqa: PLC0415

    with live_server(limits=Limits(inactivity_timeout_s=2.0, start_timeout_s=1.0)) as server:
        yield server


def test_cartesia_sockets_keep_cartesias_idle_timeout(short_live):
    """A native socket that sends nothing is closed after the server's start timeout; a Cartesia socket opened
    with it is not (Cartesia: connect before the first generation, idle sockets close after 5 minutes), nor
    after a request and twice the server's inactivity timeout of silence."""
    import asyncio  # noqa: PLC0415
    import json  # noqa: PLC0415

    import websockets  # noqa: PLC0415

    from voxrt_live import run  # noqa: PLC0415

    from voxrt.gateway.compat.cartesia import session_limits  # noqa: PLC0415

    limits = session_limits(short_live.state.config.limits)
    assert limits.inactivity_timeout_s == limits.start_timeout_s == 300
    assert limits.max_contexts == short_live.state.config.limits.max_contexts  # the rest is the server's

    async def scenario():
        async with websockets.connect(_tts_url(short_live)) as ws, websockets.connect(short_live.ws) as native:
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await asyncio.wait_for(native.recv(), 30)
            assert native.close_code == 4008
            await asyncio.sleep(1.0)
            await ws.send(json.dumps(_req("first", "Hello.", cont=False)))
            await _until(ws, [], _done_for("first"))
            await asyncio.sleep(2 * short_live.state.config.limits.inactivity_timeout_s + 1.5)
            await ws.send(json.dumps(_req("second", "Hello.", cont=False)))
            return await _until(ws, [], _done_for("second"))

    assert "chunk" in [m["type"] for m in run(scenario())]
