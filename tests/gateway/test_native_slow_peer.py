"""Stalled and slow native clients on a live tiny-lite server (gateway/stall.py, realtime.py): raw-socket clients
on /v1/realtime that read only when the test says so, against a server whose socket and transport buffers for
that connection are shrunk (a long network path's buffers next to loopback's megabytes). A client that stops
reading gets the fatal `inactivity_timeout` error and close 4008 after the session's inactivity timeout, with
its engine requests, pages, slots, session and admission slot returned at once; one that reads slowly but
steadily gets all its audio and is never cut."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time

import pytest

from voxrt.gateway import stall
from voxrt.gateway.wire import RAW_SEND_KEY
from voxrt.protocol.config import Limits
from voxrt_live import live_server

STALL_S = 3.0  # the server's inactivity timeout, so its stall bound
LONG_TEXT = "Hello there my good friend, how are you today? " * 50  # over a minute of the tiny model's audio
PCM_BURST = {"output": {"codec": "pcm16", "sample_rate": 48000, "frame_ms": 20}, "pacing": {"mode": "burst"}}


@pytest.fixture(scope="module")
def live():
    with live_server(limits=Limits(inactivity_timeout_s=STALL_S)) as server:
        yield server


class RawClient:
    """A native client on a plain socket with a small receive buffer: it reads only in `read`."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                          f"Sec-WebSocket-Protocol: voxrt.v1\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n", 1)[0], head
        self._buffer = bytearray()
        self.messages: list[dict] = []
        self.num_audio_bytes = 0
        self.close_code: int | None = None

    def send(self, message: dict) -> None:
        self._send_frame(0x81, json.dumps(message).encode())

    def _send_frame(self, first_byte: int, data: bytes) -> None:
        mask, size = os.urandom(4), len(data)
        head = bytes([first_byte]) + (bytes([0x80 | size]) if size < 126 else
                                bytes([0x80 | 126]) + struct.pack("!H", size) if size < 65536 else
                                bytes([0x80 | 127]) + struct.pack("!Q", size))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def read(self, timeout_s: float) -> bool:
        """Reads what arrives within `timeout_s`; False once the server closed the connection."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(1 << 16)
        except (socket.timeout, BlockingIOError):
            return True
        except ConnectionError:
            return False
        if not data:
            return False
        self._buffer += data
        self._parse()
        return True

    def _parse(self) -> None:
        buf = self._buffer
        while len(buf) >= 2:
            opcode, size, start = buf[0] & 0x0F, buf[1] & 0x7F, 2
            if size == 126:
                if len(buf) < 4:
                    return
                size, start = struct.unpack_from("!H", buf, 2)[0], 4
            elif size == 127:
                if len(buf) < 10:
                    return
                size, start = struct.unpack_from("!Q", buf, 2)[0], 10
            if len(buf) < start + size:
                return
            payload = bytes(buf[start:start + size])
            del buf[:start + size]
            if opcode == 1:
                self.messages.append(json.loads(payload))
            elif opcode == 2:
                self.num_audio_bytes += len(payload) - 12  # the frame header (protocol.md)
            elif opcode == 9:  # uvicorn's keepalive ping: a client that does not answer is closed 1011
                self._send_frame(0x8A, payload)
            elif opcode == 8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005

    def read_to_the_end(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.close_code is None and self.read(0.5):
            pass


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


def _small_server_buffers(live, session) -> None:
    transport = session.ws.scope[RAW_SEND_KEY].__self__.transport

    def shrink() -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        transport.set_write_buffer_limits(high=16384)

    live.state.loop.call_soon_threadsafe(shrink)
    time.sleep(0.05)


def _open(live, **start) -> tuple[RawClient, object]:
    before = _sessions(live)
    client = RawClient(live.port)
    session = _new_session(live, before)
    _small_server_buffers(live, session)
    client.send({"type": "session.start", **start})
    return client, session


def _engine(live):
    import asyncio  # noqa: PLC0415
    stats = asyncio.run_coroutine_threadsafe(live.state.engine.stats(check_pools=True), live.state.loop).result(10)
    return stats, {"requests": stats.num_requests, "streams": live.state.engine.num_streams,
                   "pages_used": stats.num_pages_total - stats.num_pages_free,
                   "slots_used": stats.num_slots_total - stats.num_slots_free,
                   "sessions": live.state.num_sessions, "admitted": live.state.admission.num_active}


def _assert_returned(live, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        stats, figures = _engine(live)
        if stats.pool_ok and not any(figures.values()):
            return
        assert time.monotonic() < deadline, f"not returned {timeout_s} s after the stall: {figures}"
        time.sleep(0.1)


def _errors(live, code: str) -> float:
    return live.state.metrics.errors.labels(code)._value.get()


@pytest.mark.parametrize("pacing", ["burst", "realtime"])
def test_a_client_that_stops_reading_is_closed_4008_and_its_session_ends_at_once(live, pacing):
    _assert_returned(live, 30)
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
        _assert_returned(live, 3)
        assert time.monotonic() - stalled_at < min(3, stall.CLOSE_GRACE_S)
        assert session.close_code == 4008
        assert _errors(live, "inactivity_timeout") == errors_before + 1
        # what the connection held, then the fatal error and close 4008
        client.read_to_the_end()
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
    """Pauses of a second (a third of the stall bound) between reads, against a model that generates faster
    than that: sends wait on the paused transport again and again, and none of them as long as the bound. (The
    client pings each round: one that sends nothing is idle once the server has sent it everything, slow
    reader or not.)"""
    _assert_returned(live, 30)
    text = "Hello there, my good friend. How are you doing today? " * 2  # 3 to 9 s of tiny-lite's audio
    client, session = _open(live, **PCM_BURST)
    try:
        client.send({"type": "text", "context_id": "a", "text": text})
        client.send({"type": "context.end", "context_id": "a"})
        deadline, is_open, num_rounds_paused = time.monotonic() + 180, True, 0
        while is_open and not any(m["type"] == "context.done" for m in client.messages):
            assert time.monotonic() < deadline, f"no end of the audio; the last messages: {client.messages[-2:]}"
            time.sleep(1.0)
            num_rounds_paused += not session._protocol.writable.is_set()  # the server's send waits on the client
            # a ping each round: a client that sends nothing is idle (4008) once the server sent all it had
            client.send({"type": "ping"})
            t_end = time.monotonic() + 0.3
            while is_open and time.monotonic() < t_end:
                is_open = client.read(0.05)
        assert is_open and client.close_code is None and not session.is_stalled, \
            (client.close_code, session.close_code, session.is_stalled, client.messages[-1:])
        assert num_rounds_paused >= 2, "the client was not slow enough for the server's sends to wait"
        done = next(m for m in client.messages if m["type"] == "context.done")
        assert done.get("reason", "completed") == "completed", done
        assert client.num_audio_bytes / 2 / 48000 > 2
        assert not any(m["type"] == "error" for m in client.messages), client.messages
        client.send({"type": "session.end"})
        client.read_to_the_end()
        assert client.close_code == 1000
    finally:
        client.sock.close()
    _assert_returned(live, 10)


def test_the_compat_names_are_the_gateway_stall_rule():
    from voxrt.gateway.compat import bridge  # noqa: PLC0415
    assert bridge.close_stalled is stall.close_stalled
    assert (bridge.CLOSE_GRACE_S, bridge.CLOSE_STALLED) == (stall.CLOSE_GRACE_S, stall.CLOSE_STALLED) == (5.0, 4008)
