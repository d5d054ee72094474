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
