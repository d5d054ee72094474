"""voxrt/engine/wire.py: the engine connection's framing, read in bulk and written in one call, interchangeable
with `multiprocessing.connection`'s own send / recv at either end."""

from __future__ import annotations

import os
import struct
import threading
from multiprocessing import Pipe
from multiprocessing.reduction import ForkingPickler

import pytest

from voxrt.engine.messages import AppendText, AudioChunk, HeartbeatAck
from voxrt.engine.wire import FrameReader, frame_header, send_frame, send_payloads


def test_one_read_returns_every_message_the_connection_has_in_order():
    ours, theirs = Pipe()
    sent = [AppendText("r", f" word{i}") for i in range(50)] + [HeartbeatAck(3)]
    for msg in sent:
        theirs.send(msg)  # multiprocessing's own framing
    reader = FrameReader(ours)
    got = []
    while len(got) < len(sent):
        got += reader.read()
    assert got == sent and reader.num_buffered_bytes == 0


def test_a_message_longer_than_a_read_waits_for_its_rest():
    ours, theirs = Pipe()
    chunk = AudioChunk("r", 3, os.urandom(3 << 20), 24000, 40, 25, False)  # 3 MB: more than READ_BYTES (1 MB)
    threading.Thread(target=theirs.send, args=(chunk,)).start()  # the pipe holds less: the write waits for us
    reader = FrameReader(ours)
    got, reads = [], 0
    while not got:
        got = reader.read()
        reads += 1
    assert got == [chunk] and reads >= 3 and reader.num_buffered_bytes == 0


def test_send_frame_is_read_by_recv_and_by_the_reader():
    ours, theirs = Pipe()
    big = AudioChunk("r", 0, b"\1" * 300_000, 24000, 0, 2, True)
    threading.Thread(target=lambda: [send_frame(ours, m) for m in (HeartbeatAck(1), big, HeartbeatAck(2))]).start()
    assert theirs.recv() == HeartbeatAck(1)
    assert theirs.recv() == big  # multiprocessing's recv reads what one writev wrote
    assert FrameReader(theirs).read() == [HeartbeatAck(2)]


def test_the_long_length_form_is_read():
    """Messages over 2 GiB carry -1 and an 8-byte length (multiprocessing's form since 3.8); the reader takes
    that form whatever the size, here a small message written by hand."""
    ours, theirs = Pipe()
    payload = ForkingPickler.dumps(HeartbeatAck(9))
    os.write(theirs.fileno(), struct.pack("!i", -1) + struct.pack("!Q", len(payload)) + payload)
    assert FrameReader(ours).read() == [HeartbeatAck(9)]
    assert frame_header(5) == struct.pack("!i", 5)
    assert frame_header(1 << 31) == struct.pack("!i", -1) + struct.pack("!Q", 1 << 31)


def test_the_end_of_the_stream_a_closed_connection_and_garbage_raise():
    ours, theirs = Pipe()
    theirs.close()
    with pytest.raises(EOFError):
        FrameReader(ours).read()
    ours.close()
    with pytest.raises(OSError):
        FrameReader(ours).read()  # checked before reading: the descriptor's number may be another file's now
    with pytest.raises(OSError):
        send_frame(ours, HeartbeatAck(1))
    ours, theirs = Pipe()
    os.write(theirs.fileno(), struct.pack("!i", -7))
    with pytest.raises(ValueError, match="bad message length"):
        FrameReader(ours).read()
    ours, theirs = Pipe()
    os.write(theirs.fileno(), struct.pack("!i", 3) + b"xyz")
    with pytest.raises(Exception):  # not a pickle: the caller drops the connection
        FrameReader(ours).read()


def test_a_batch_of_more_messages_than_one_writev_takes_arrives_whole_and_in_order():
    """`send_payloads` with more buffers than IOV_MAX (two a message) and more bytes than the pipe holds: the
    writes continue where the last one stopped, whatever it took."""
    from voxrt.engine import wire

    ours, theirs = Pipe()
    sent = [HeartbeatAck(i) for i in range(wire._IOV_MAX)] + [AudioChunk("r", 1, os.urandom(400_000), 24000, 0, 4, False)]
    payloads = [ForkingPickler.dumps(m) for m in sent]
    writer = threading.Thread(target=send_payloads, args=(ours, payloads))
    writer.start()
    reader, got = FrameReader(theirs), []
    while len(got) < len(sent):
        got += reader.read()
    writer.join()
    assert got == sent and reader.num_buffered_bytes == 0
    ours.close()
    with pytest.raises(OSError):
        send_payloads(ours, payloads[:1])
