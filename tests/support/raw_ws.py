"""A WebSocket client on a plain socket, for slow and stalled peer tests (tests/compat/test_slow_peers.py,
tests/gateway/test_native_slow_peer.py): it reads only when the test says so (no library reading behind its
back), with a small receive buffer, and answers pings (uvicorn closes a peer that does not with 1011). Also the
server-side helpers those tests share, for a `voxrt_live.live_server` running in this process."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time

from voxrt.gateway.wire import RAW_SEND_KEY


class RawWebSocket:
    def __init__(self, port: int, path: str, subprotocol: str | None = None) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        extra = f"Sec-WebSocket-Protocol: {subprotocol}\r\n" if subprotocol else ""
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                          f"{extra}\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n", 1)[0], head
        self._buffer = bytearray()
        self.texts: list[str] = []
        self.close_code: int | None = None
        self.num_bytes = 0  # every byte received
        self.num_binary_frames = 0
        self.num_binary_bytes = 0  # binary messages' payloads

    @property
    def messages(self) -> list[dict]:
        return [json.loads(text) for text in self.texts]

    def send(self, message: dict) -> None:
        self._send_frame(0x81, json.dumps(message).encode())

    def _send_frame(self, first_byte: int, data: bytes) -> None:
        mask, size = os.urandom(4), len(data)
        head = bytes([first_byte]) + (bytes([0x80 | size]) if size < 126 else
                                      bytes([0x80 | 126]) + struct.pack("!H", size) if size < 65536 else
                                      bytes([0x80 | 127]) + struct.pack("!Q", size))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def read(self, timeout_s: float, max_bytes: int = 1 << 16) -> bool:
        """Reads what arrives within `timeout_s`, at most `max_bytes`; False once the server closed the
        connection."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(max_bytes)
        except (socket.timeout, BlockingIOError):
            return True
        except ConnectionError:
            return False
        if not data:
            return False
        self.num_bytes += len(data)
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
                self.texts.append(payload.decode())
            elif opcode == 2:
                self.num_binary_frames += 1
                self.num_binary_bytes += len(payload)
            elif opcode == 9:
                self._send_frame(0x8A, payload)
            elif opcode == 8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005

    def read_to_the_end(self, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.close_code is None and self.read(0.5):
            pass


def small_server_buffers(live, ws) -> None:
    """The server side of connection `ws` with small socket and transport buffers (what a long network path's
    buffers are next to loopback's megabytes), so that audio waits in the server, not in the kernel."""
    transport = ws.scope[RAW_SEND_KEY].__self__.transport

    def shrink() -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        transport.set_write_buffer_limits(high=16384)

    live.state.loop.call_soon_threadsafe(shrink)
    time.sleep(0.05)


def engine_figures(live):
    """(engine stats with the pool check, what a finished session must have returned: all zero)."""
    stats = asyncio.run_coroutine_threadsafe(live.state.engine.stats(check_pools=True), live.state.loop).result(10)
    return stats, {"requests": stats.num_requests, "streams": live.state.engine.num_streams,
                   "pages_used": stats.num_pages_total - stats.num_pages_free,
                   "slots_used": stats.num_slots_total - stats.num_slots_free,
                   "sessions": live.state.num_sessions, "admitted": live.state.admission.num_active}


def assert_returned(live, timeout_s: float) -> None:
    """Every engine request, page, slot, session and admission is back within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats, figures = engine_figures(live)
        if stats.pool_ok and not any(figures.values()):
            return
        assert time.monotonic() < deadline, f"not returned {timeout_s} s after the stall: {figures}"
        time.sleep(0.1)
