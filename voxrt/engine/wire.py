"""The engine connection's bytes, read and written with fewer system calls than `multiprocessing.connection`.

The engine and its clients talk over `multiprocessing` connections (a pipe to the parent, Unix sockets to other
gateways): each message a 4-byte big-endian length (or -1 and an 8-byte length, for messages over 2 GiB), then
its pickle. `Connection.recv` reads one message with two `read`s after a `poll`, and `Connection.send` writes a
large one with two `write`s. Every one of those calls releases the GIL and must take it back, and in the engine
process another thread always wants it: the step loop reads commands while the sender thread pickles audio, and
the sender writes while the loop plans. Each hand-back can wait up to the interpreter's switch interval (5 ms) when
the other thread runs Python. A trace at max batch 256 on an H100 read 26 commands a step in 1.3 ms (p50) and took
4-25 ms (p50-p99) to bring a chunk from the engine core to a gateway
(bench/results/2026-12-07-h100-b256-paths/).

`FrameReader` reads whatever a connection has in one `read` (up to `READ_BYTES`) and unpickles every complete
message in it; `send_frame` writes a message's length and pickle in one `writev`, and `send_payloads` a batch
of messages in one (the engine's sender thread writes what the loop queued meanwhile at once). Both speak exactly
`multiprocessing.connection`'s framing, so either end may still use `Connection.send` / `recv`: a
connection's reads must all go through one `FrameReader` once it has one (it may hold the start of the next
message). The authentication handshake of `Listener.accept` / `Client` happens before, on the `Connection`.
"""

from __future__ import annotations

import os
import struct
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

READ_BYTES = 1 << 20  # the most one read takes: commands are < 1 KB, chunks ~140 KB
_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers one writev takes


def frame_header(size: int) -> bytes:
    """`multiprocessing.connection`'s length prefix of a `size`-byte message."""
    return _LENGTH.pack(size) if size <= 0x7FFFFFFF else _LENGTH.pack(-1) + _LONG_LENGTH.pack(size)


def send_frame(conn: Connection, msg) -> None:
    """`conn.send(msg)` in one `writev` (more only when the descriptor takes part of it). Raises what
    `Connection.send` raises for a closed connection (OSError) or a broken one."""
    send_payloads(conn, [ForkingPickler.dumps(msg)])


def send_payloads(conn: Connection, payloads: list[bytes]) -> None:
    """Pickled messages (`ForkingPickler.dumps`), each framed, in as few `writev`s as the descriptor takes:
    one system call, so one hand-back of the GIL, for a batch of messages instead of one a message."""
    if conn.closed:
        raise OSError("handle is closed")
    fd = conn.fileno()
    parts: list[memoryview] = []
    for payload in payloads:
        parts += (memoryview(frame_header(len(payload))), memoryview(payload))
    first = 0
    while first < len(parts):
        written = os.writev(fd, parts[first:first + _IOV_MAX])
        while first < len(parts) and written >= len(parts[first]):
            written -= len(parts[first])
            first += 1
        if written:
            parts[first] = parts[first][written:]


class FrameReader:
    """The messages of one connection, read in bulk. `read()` blocks until the connection has bytes (callers
    that must not block call it once `multiprocessing.connection.wait` says the connection is ready), then
    returns every message those bytes complete, in order (none when they end inside a message: the rest comes
    with a later read). EOFError at the end of the stream, OSError when the connection is closed or broken; a
    message that does not unpickle raises what `pickle.loads` raises, and the reader is then unusable (the
    connection's framing can no longer be trusted: drop it)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._buf = bytearray()

    def read(self) -> list:
        if self.conn.closed:  # checked before each read: a closed descriptor's number may belong to a new file
            raise OSError("handle is closed")
        data = os.read(self.conn.fileno(), READ_BYTES)
        if not data:
            raise EOFError
        buf = self._buf
        buf += data
        messages, pos, end = [], 0, len(buf)
        with memoryview(buf) as view:
            while end - pos >= 4:
                (size,) = _LENGTH.unpack_from(buf, pos)
                start = pos + 4
                if size == -1:
                    if end - start < 8:
                        break
                    (size,) = _LONG_LENGTH.unpack_from(buf, start)
                    start += 8
                elif size < 0:
                    raise ValueError(f"bad message length {size} on an engine connection")
                if end - start < size:
                    break
                messages.append(ForkingPickler.loads(view[start:start + size]))
                pos = start + size
        if pos:
            del buf[:pos]
        return messages

    @property
    def num_buffered_bytes(self) -> int:
        """Bytes read but not yet a whole message (tests, diagnostics)."""
        return len(self._buf)
