"""Stalled and slow native clients on a live tiny-lite server (gateway/stall.py, realtime.py): raw-socket clients
on /v1/realtime that read only when the test says so, against a server whose socket and transport buffers for
that connection are shrunk (a long network path's buffers next to loopback's megabytes). A client that stops
reading gets the fatal `inactivity_timeout` error and close 4008 after the session's inactivity timeout, with
its engine requests, pages, slots, session and admission slot returned at once; one that reads slowly but
steadily gets all its audio and is never cut."""

from __future__ import annotations

import time

import pytest

from raw_ws import RawWebSocket, assert_returned, small_server_buffers
from voxrt.gateway import stall
from voxrt.protocol.config import Limits
from voxrt_live import live_server

STALL_S = 3.0  # the server's inactivity timeout, so its stall bound
LONG_TEXT = "Hello there my good friend, how are you today? " * 50  # over a minute of the tiny model's audio
PCM_BURST = {"output": {"codec": "pcm16", "sample_rate": 48000, "frame_ms": 20}, "pacing": {"mode": "burst"}}


@pytest.fixture(scope="module")
def live():
    with live_server(limits=Limits(inactivity_timeout_s=STALL_S)) as server:
        yield server


class RawClient(RawWebSocket):
    """A native client on a plain socket (tests/support/raw_ws.py)."""

    def __init__(self, port: int) -> None:
        super().__init__(port, "/v1/realtime", subprotocol="voxrt.v1")

    @property
    def num_audio_bytes(self) -> int:
        return self.num_binary_bytes - 12 * self.num_binary_frames  # less each frame's header (protocol.md)


def _new_session(live, before: set, timeout_s: float = 30):
    """The server's RealtimeSession of the connection just opened (the server runs in this process)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            new = set(live.state.sessions) - before
        except RuntimeError:  # changed size while copied (the server's thread)
            new = set()
        if new:
            assert len(new) == 1, new
            return new.pop()
        assert time.monotonic() < deadline, "the server opened no session"
        time.sleep(0.01)


def _sessions(live) -> set:
    while True:
        try:
            return set(live.state.sessions)
        except RuntimeError:
            pass


def _open(live, **start) -> tuple[RawClient, object]:
    before = _sessions(live)
    client = RawClient(live.port)
    session = _new_session(live, before)
    small_server_buffers(live, session.ws)
    client.send({"type": "session.start", **start})
    return client, session


def _errors(live, code: str) -> float:
    return live.state.metrics.errors.labels(code)._value.get()


@pytest.mark.parametrize("pacing", ["burst", "realtime"])
def test_a_client_that_stops_reading_is_closed_4008_and_its_session_ends_at_once(live, pacing):
    assert_returned(live, 30)
    errors_before = _errors(live, "inactivity_timeout")
    start = {**PCM_BURST, "pacing": {"mode": pacing}}
    client, session = _open(live, **start)
    try:
        client.send({"type": "text", "context_id": "a", "text": LONG_TEXT})
        client.send({"type": "context.end", "context_id": "a"})
        # the client reads nothing from here on (its session.started waits in the socket's buffers)
        deadline = time.monotonic() + 90
        while not session.is_stalled:
            assert time.monotonic() < deadline, "the stalled client was never closed"
            assert session.close_code is None or session.is_stalled, session.close_code
            time.sleep(0.05)
        stalled_at = time.monotonic()
        # the session ends at the stall: its context is cancelled, not generated to its end; the admission
        # slot and the session are returned (well before the connection is dropped, stall.CLOSE_GRACE_S later)
        assert_returned(live, 3)
        assert time.monotonic() - stalled_at < min(3, stall.CLOSE_GRACE_S)
        assert session.close_code == 4008
        assert _errors(live, "inactivity_timeout") == errors_before + 1
        # what the connection held, then the fatal error and close 4008
        client.read_to_the_end(30)
        assert client.close_code == 4008
        assert client.messages[0]["type"] == "session.started"
        last = client.messages[-1]
        assert last["type"] == "error" and last["code"] == "inactivity_timeout" and last["fatal"] is True, last
        assert not any(m["type"] == "context.done" for m in client.messages)
        audio_s = client.num_audio_bytes / 2 / 48000
        assert audio_s < 20, audio_s  # a fraction of the text's audio: generation stopped at the stall
    finally:
        client.sock.close()


def test_a_client_that_reads_slowly_but_steadily_gets_all_its_audio(live):
    """Rounds of a 0.6 s pause and then at most READ_PER_ROUND bytes (under a second of the audio, the pause a
    fifth of the stall bound), against a model that generates faster than that: the server's sends wait on
    the paused transport round after round, none of them as long as the bound. What the client takes in a
    round is bounded in bytes, not only in time, so that the server's backlog outlasts several rounds however
    fast the model ran (a round that read for a fixed time took all of it at once on loopback). (The client
    pings each round: one that sends nothing is idle once the server has sent it everything, slow reader or
    not.)"""
    assert_returned(live, 30)
    text = "Hello there, my good friend. How are you doing today? " * 2  # 3 to 9 s of tiny-lite's audio
    read_per_round = 64 * 1024  # 0.68 s of 48 kHz pcm16; 3 s of audio is 288 KB: over 4 rounds of backlog
    client, session = _open(live, **PCM_BURST)
    try:
        client.send({"type": "text", "context_id": "a", "text": text})
        client.send({"type": "context.end", "context_id": "a"})
        deadline, is_open, num_rounds_paused = time.monotonic() + 180, True, 0
        while is_open and not any(m["type"] == "context.done" for m in client.messages):
            assert time.monotonic() < deadline, f"no end of the audio; the last messages: {client.messages[-2:]}"
            time.sleep(0.6)
            num_rounds_paused += not session._protocol.writable.is_set()  # the server's send waits on the client
            # a ping each round: a client that sends nothing is idle (4008) once the server sent all it had
            client.send({"type": "ping"})
            t_end, round_end = time.monotonic() + 0.3, client.num_bytes + read_per_round
            while is_open and time.monotonic() < t_end and client.num_bytes < round_end:
                is_open = client.read(0.05, max_bytes=round_end - client.num_bytes)
        assert is_open and client.close_code is None and not session.is_stalled, \
            (client.close_code, session.close_code, session.is_stalled, client.messages[-1:])
        assert num_rounds_paused >= 2, "the client was not slow enough for the server's sends to wait"
        done = next(m for m in client.messages if m["type"] == "context.done")
        assert done.get("reason", "completed") == "completed", done
        assert client.num_audio_bytes / 2 / 48000 > 2
        assert not any(m["type"] == "error" for m in client.messages), client.messages
        client.send({"type": "session.end"})
        client.read_to_the_end(30)
        assert client.close_code == 1000
    finally:
        client.sock.close()
    assert_returned(live, 10)


def test_the_compat_names_are_the_gateway_stall_rule():
    from voxrt.gateway.compat import bridge  # noqa: PLC0415
    assert bridge.close_stalled is stall.close_stalled
    assert (bridge.CLOSE_GRACE_S, bridge.CLOSE_STALLED) == (stall.CLOSE_GRACE_S, stall.CLOSE_STALLED) == (5.0, 4008)
