"""The engine process's sender thread (`process._Outbox`): the step loop's sends in order, off its thread."""

from __future__ import annotations

import time
from multiprocessing import Pipe

from voxrt.engine.messages import AudioChunk, RequestCancelled
from voxrt.engine.process import _Outbox


def _chunk(i: int, last: bool = False) -> AudioChunk:
    return AudioChunk("r", i, b"\0" * 130_000, 24000, 2 * i, 2, last)


def test_messages_go_out_in_order_and_put_does_not_wait_for_the_reader():
    """32 chunks of ~130 KB (a background launch's delivery at the default --max-codec-batch) and a cancel
    acknowledgement: `put` returns while nothing reads the pipe (a send would block: its buffer holds far less),
    then the reader gets them all in the loop's order, the acknowledgement after the chunks."""
    ours, theirs = Pipe()
    box = _Outbox()
    start = time.monotonic()
    for i in range(32):
        box.put(ours, _chunk(i, last=i == 31))
    box.put(ours, RequestCancelled("r"))
    assert time.monotonic() - start < 1.0  # queued, not sent: a blocked send would wait for the reader forever
    got = [theirs.recv() for _ in range(33)]
    assert [m.chunk_index for m in got[:32]] == list(range(32)) and got[31].is_last
    assert got[32] == RequestCancelled("r")
    assert box.broken() == []
    box.close()


def test_a_broken_connection_is_reported_once_and_the_others_go_on():
    ours, theirs = Pipe()
    other, other_end = Pipe()
    theirs.close()
    box = _Outbox()
    for _ in range(3):
        box.put(ours, RequestCancelled("a"))
    box.put(other, RequestCancelled("b"))
    assert other_end.recv() == RequestCancelled("b")  # sent after the failures: the thread went on
    assert box.broken() == [ours]  # once, though three sends were asked
    assert box.broken() == []
    box.close()


def test_close_sends_what_is_queued_first():
    ours, theirs = Pipe()
    box = _Outbox()
    box.put(ours, RequestCancelled("x"))
    box.close()
    assert theirs.poll(1.0) and theirs.recv() == RequestCancelled("x")
    assert not box._thread.is_alive()


def test_first_chunks_and_request_less_messages_go_ahead_of_queued_later_chunks():
    """A codec launch's later chunks are queued while the reader is away; a first chunk of another request, a load
    report and a heartbeat answer queued after them are sent right after the batch the sender was writing (the
    later chunks up to `BATCH_BYTES`). Each request's own messages keep their order (its first chunk is the
    first thing it is sent; after it everything shares one queue)."""
    from voxrt.engine.messages import EngineLoad, HeartbeatAck, RequestFailed

    ours, theirs = Pipe()
    box = _Outbox()
    later = [AudioChunk(f"r{i}", 1, b"\0" * 200_000, 24000, 2, 4, False) for i in range(12)]  # 2.4 MB: > the pipe
    for msg in later:
        box.put(ours, msg)
    deadline = time.monotonic() + 10
    while len(box._rest) == len(later) and time.monotonic() < deadline:  # the sender has taken a batch (and
        time.sleep(0.01)                                                  # blocks on the full pipe: nobody reads)
    in_batch = len(later) - len(box._rest)
    assert in_batch == -(-_Outbox.BATCH_BYTES // 200_000)  # 1 MB of 200 KB chunks: 6 (the last one crosses it)
    first = AudioChunk("new", 0, b"\0" * 3840, 24000, 0, 1, False)
    load = EngineLoad(num_waiting=0, num_running=1, num_requests=1, decode_batch=1, max_batch_size=8,
                      max_live_requests=16, min_slack_ms=None, num_pages_free=1, num_pages_total=2, num_slots_free=1,
                      chunks_late=0, made_ns=0)
    for msg in (RequestFailed("r0", "request_failed", "x"), first, load, HeartbeatAck(5),
                AudioChunk("new", 1, b"\0" * 3840, 24000, 1, 2, True)):
        box.put(ours, msg)
    got = [theirs.recv() for _ in range(len(later) + 5)]
    names = [(type(m).__name__, getattr(m, "request_id", None), getattr(m, "chunk_index", None)) for m in got]
    assert names.index(("AudioChunk", "new", 0)) == in_batch  # right after the batch being written
    assert names[in_batch + 1:in_batch + 3] == [("EngineLoad", None, None), ("HeartbeatAck", None, None)]
    rest = [n for n in names if n[0] in ("AudioChunk", "RequestFailed") and n != ("AudioChunk", "new", 0)]
    assert rest == [("AudioChunk", f"r{i}", 1) for i in range(12)] + [("RequestFailed", "r0", None),
                                                                       ("AudioChunk", "new", 1)]
    box.close()


def test_a_batch_goes_out_in_one_write_per_connection_and_in_order(monkeypatch):
    """What the loop queued while the sender was writing leaves in one `writev` per connection (one hand-back of
    the GIL, not one a message), each connection's messages in the loop's order."""
    from voxrt.engine import process, wire

    writes = []
    real_writev = wire.os.writev

    def counting_writev(fd, buffers):
        writes.append((fd, len(buffers)))
        return real_writev(fd, buffers)

    a, a_end = Pipe()
    b, b_end = Pipe()
    box = _Outbox()
    with box._ready:  # the sender waits for this lock: everything below is queued before it takes any
        monkeypatch.setattr(wire.os, "writev", counting_writev)
        for i in range(5):
            box._rest.append((a, RequestCancelled(f"a{i}")))
            box._rest.append((b, RequestCancelled(f"b{i}")))
        box._ready.notify()
    assert [a_end.recv() for _ in range(5)] == [RequestCancelled(f"a{i}") for i in range(5)]
    assert [b_end.recv() for _ in range(5)] == [RequestCancelled(f"b{i}") for i in range(5)]
    assert sorted(writes) == sorted([(a.fileno(), 10), (b.fileno(), 10)])  # a length and a pickle a message
    assert process.send_payloads is wire.send_payloads
    box.close()


def test_a_message_that_cannot_be_pickled_is_dropped_and_the_batch_goes_on(caplog):
    import threading

    ours, theirs = Pipe()
    box = _Outbox()
    with box._ready:
        box._rest.append((ours, RequestCancelled("before")))
        box._rest.append((ours, threading.Lock()))  # no pickle for a lock
        box._rest.append((ours, RequestCancelled("after")))
        box._ready.notify()
    assert theirs.recv() == RequestCancelled("before") and theirs.recv() == RequestCancelled("after")
    assert box.broken() == []
    box.close()
    assert "could not send lock" in caplog.text
