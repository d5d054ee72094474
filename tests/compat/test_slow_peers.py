"""Slow and stalled peers of the compat adapters against a live server (tiny, CPU; burst pacing for ElevenLabs
and Cartesia, the call's real-time pacing for Twilio), with raw WebSocket clients that read slowly or not at
all: what the server holds for a peer stays under the Outbox's bound (bridge.py), a peer that reads in bursts
gets all its audio, and one that stops reading gets the adapter's `inactivity_timeout` error and close 4008
after the session's inactivity timeout, with its engine requests, pages, slots and session returned at once."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
import websockets

from compat_audio import TINY_CHARS_PER_S
from raw_ws import RawWebSocket, assert_returned, engine_figures, small_server_buffers
from voxrt.gateway.compat import bridge
from voxrt.protocol.config import Limits
from voxrt_live import live_server, run

STALL_S = 3.0  # the server's inactivity timeout, so its stall bound
FRAME_BYTES_48K = 1920  # one 20 ms frame of 48 kHz PCM16: the most one queued item holds in these tests
LONG_TEXT = "Hello there my good friend, how are you today? " * 50  # over a minute of the tiny model's audio


@pytest.fixture(scope="module")
def live():
    with live_server(limits=Limits(inactivity_timeout_s=STALL_S)) as server:
        yield server


@pytest.fixture
def outboxes(monkeypatch):
    """Every Outbox the server builds during the test (the server runs in this process, on its own thread)."""
    made: list[bridge.Outbox] = []
    init = bridge.Outbox.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(bridge.Outbox, "__init__", recording_init)
    return made


class RawPeer(RawWebSocket):
    """A compat peer on a plain socket (tests/support/raw_ws.py)."""


def _with_bound(monkeypatch, max_queued_bytes: int) -> None:
    """Outboxes built from now on hold at most this (instead of bridge.MAX_QUEUED_BYTES)."""
    init = bridge.Outbox.__init__
    monkeypatch.setattr(bridge.Outbox, "__init__",
                        lambda self, *a, **k: init(self, *a, **{**k, "max_queued_bytes": max_queued_bytes}))


def _new_outbox(outboxes: list, before: int, timeout_s: float = 10) -> bridge.Outbox:
    deadline = time.monotonic() + timeout_s
    while len(outboxes) <= before:
        assert time.monotonic() < deadline, "the adapter built no outbox"
        time.sleep(0.01)
    return outboxes[before]


def _small_server_buffers(live, outbox: bridge.Outbox) -> None:
    """Small server buffers for this connection, so that the Outbox, not the kernel, is where audio waits."""
    small_server_buffers(live, outbox.ws)


def _start_eleven(live, outboxes) -> tuple[RawPeer, bridge.Outbox]:
    before = len(outboxes)
    peer = RawPeer(live.port, "/v1/text-to-speech/default/multi-stream-input?output_format=pcm_48000")
    outbox = _new_outbox(outboxes, before)
    _small_server_buffers(live, outbox)
    peer.send({"text": " "})
    return peer, outbox


def _start_cartesia(live, outboxes) -> tuple[RawPeer, bridge.Outbox]:
    before = len(outboxes)
    peer = RawPeer(live.port, "/tts/websocket")
    outbox = _new_outbox(outboxes, before)
    _small_server_buffers(live, outbox)
    return peer, outbox


def _requests(kind: str, text: str) -> list[dict]:
    """The client messages that ask for `text` as one context, in each API's shapes."""
    if kind == "elevenlabs":
        return [{"text": text, "context_id": "a"}, {"context_id": "a", "flush": True}]
    return [{"context_id": "a", "model_id": "sonic-2", "transcript": text, "voice": {"mode": "id", "id": "default"},
             "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 48000}, "continue": False}]


def _say(kind: str, peer: RawPeer, text: str) -> None:
    for message in _requests(kind, text):
        peer.send(message)


STARTS = {"elevenlabs": _start_eleven, "cartesia": _start_cartesia}
ERROR_CODE = {"elevenlabs": lambda m: m.get("code"), "cartesia": lambda m: m.get("error_code")}


@pytest.mark.parametrize("kind", ["elevenlabs", "cartesia"])
def test_a_peer_that_stops_reading_is_bounded_then_closed_4008_and_its_requests_cancelled(live, outboxes, kind):
    assert_returned(live, 30)
    peer, outbox = STARTS[kind](live, outboxes)
    try:
        _say(kind, peer, LONG_TEXT)
        # the peer reads nothing from here on: the server's queue for it fills (up to its bound, when the model
        # is fast enough to fill it within the stall timeout) and no further
        deadline = time.monotonic() + 60
        num_requests_blocked = 0
        while not outbox.is_stalled:
            assert time.monotonic() < deadline, "the stalled peer was never closed"
            assert outbox.num_queued_bytes <= bridge.MAX_QUEUED_BYTES + FRAME_BYTES_48K
            requests = engine_figures(live)[1]["requests"]
            if outbox.num_queued_bytes > 0 and not outbox.is_stalled:
                num_requests_blocked = requests
            time.sleep(0.05)
        stalled_at = time.monotonic()
        assert 0 < outbox.max_num_queued_bytes <= bridge.MAX_QUEUED_BYTES + FRAME_BYTES_48K
        # still generating while the peer was blocked (ElevenLabs' first message, " ", opened a context of its own)
        assert num_requests_blocked >= (2 if kind == "elevenlabs" else 1)
        # the session ends at the stall: its contexts are cancelled, not generated to their end
        assert_returned(live, 3)
        assert time.monotonic() - stalled_at < 3
        # what the connection held, then the adapter's error and close 4008 (within bridge.CLOSE_GRACE_S)
        peer.read_to_the_end()
        assert peer.close_code == 4008
        assert ERROR_CODE[kind](peer.messages[-1]) == "inactivity_timeout"
        audio_s = peer.num_bytes * 3 / 4 / 2 / 48000  # base64 of 48 kHz PCM16, roughly
        assert audio_s < len(LONG_TEXT) / TINY_CHARS_PER_S / 2
    finally:
        peer.sock.close()


def _is_done(kind: str, message: dict) -> bool:
    return bool(message.get("isFinal")) if kind == "elevenlabs" else message.get("type") == "done"


def _audio(kind: str, messages: list[dict]) -> bytes:
    key = "audio" if kind == "elevenlabs" else "data"
    return b"".join(base64.b64decode(m[key]) for m in messages if m.get(key))


async def _fast_reader(live, kind: str, text: str) -> list[dict]:
    """The same request from a client that reads everything at once (websockets): the reference."""
    path = ("/v1/text-to-speech/default/multi-stream-input?output_format=pcm_48000" if kind == "elevenlabs"
            else "/tts/websocket")
    messages: list[dict] = []
    async with websockets.connect(live.ws.replace("/v1/realtime", path), max_size=None) as ws:
        for message in ([{"text": " "}] if kind == "elevenlabs" else []) + _requests(kind, text):
            await ws.send(json.dumps(message))
        while not messages or not _is_done(kind, messages[-1]):
            messages.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
    return messages


@pytest.mark.parametrize("kind", ["elevenlabs", "cartesia"])
def test_a_peer_that_reads_in_bursts_gets_all_its_audio_and_the_server_holds_at_most_the_bound(live, outboxes, kind,
                                                                                                monkeypatch):
    """With a bound of a third of a second of audio (here), so that it bites on any machine, even where the
    model generates slower than the peer reads between its pauses."""
    assert_returned(live, 30)
    text = "Hello there, my good friend. How are you doing today? " * 3  # 5 to 13 s of tiny-lite's audio
    reference = _audio(kind, run(_fast_reader(live, kind, text), 120))
    bound = 32 * 1024
    _with_bound(monkeypatch, bound)
    peer, outbox = STARTS[kind](live, outboxes)
    try:
        _say(kind, peer, text)
        deadline, is_open = time.monotonic() + 120, True
        while is_open and not any(_is_done(kind, m) for m in peer.messages):
            assert time.monotonic() < deadline, f"no end of the audio; the last messages: {peer.texts[-2:]}"
            time.sleep(0.5)  # reads nothing for half a second (well under the 3 s stall bound), then all there is
            t_end = time.monotonic() + 0.3
            while is_open and time.monotonic() < t_end:
                is_open = peer.read(0.05)
        assert not outbox.is_stalled and is_open and peer.close_code is None, (peer.close_code, peer.texts[-1:])
        assert bound < outbox.max_num_queued_bytes <= bound + FRAME_BYTES_48K, \
            "the peer was not slow enough for the bound to matter, or the bound did not hold"
        # every sample, none twice: as much audio as the client that read at once got (lengths are deterministic)
        assert len(_audio(kind, peer.messages)) == len(reference) > 48000 * 2 * 3
    finally:
        peer.sock.close()
    assert_returned(live, 10)


def test_a_twilio_stream_that_stops_reading_ends_the_call_and_its_session(live, outboxes, monkeypatch, request):
    """Real-time pacing: a stalled media stream fills the (here smaller) bound at the call's rate, is closed
    4008, and the agent's control connection hears call.stopped and is closed, its session's requests
    cancelled."""
    assert_returned(live, 30)
    _with_bound(monkeypatch, 8192)
    before = len(outboxes)
    media = RawPeer(live.port, "/v1/twilio/media")
    media.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
    media.send({"event": "start", "sequenceNumber": "1", "streamSid": "MZ9", "start": {
        "streamSid": "MZ9", "callSid": "CA9", "customParameters": {"call_id": "stall-1"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
    outbox = _new_outbox(outboxes, before)
    _small_server_buffers(live, outbox)
    request.addfinalizer(media.sock.close)

    async def agent() -> tuple[list[dict], int | None]:
        url = live.ws.replace("/v1/realtime", "/v1/twilio/calls/stall-1")
        events = []
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await ws.send(json.dumps({"type": "text", "context_id": "t", "text": LONG_TEXT}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "t"}))
            async for raw in ws:
                events.append(json.loads(raw))
            return events, ws.close_code

    events, code = run(agent(), 90)
    assert outbox.is_stalled and outbox.max_num_queued_bytes <= 8192 + 400  # one media message beyond
    assert events[-1]["type"] == "call.stopped" and code == 1000
    assert_returned(live, 3)
    media.read_to_the_end()
    assert media.close_code == 4008
