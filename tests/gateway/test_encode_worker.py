"""Encoding in worker threads (encode_worker.py, AudioOut's `_raw` -> `_ready`): whoever encodes a frame (a
worker, or the loop when a frame is due first), the wire bytes are those of encoding on the loop alone, in
order; a worker that never runs holds nothing back; errors reach play(); nothing is encoded or sent after
aclose. No timing assertions: outcomes and orders only."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from voxrt.audio import StreamEncoder
from voxrt.gateway.audio_out import AudioOut
from voxrt.gateway.encode_worker import EncodeWorker
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig
from voxrt.protocol.frames import decode_audio_frame


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def config(mode: str = "burst", lead_ms: int = 60) -> SessionConfig:
    return SessionConfig("v", "m", OutputFormat("opus", 48000, 20), Pacing(mode, lead_ms))


def trace() -> list:
    return [0, 0, 0, None, None, None, None, None, None]


def speech(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 24000)) / 24000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


class NeverRuns:
    """A worker that takes streams and never encodes them (a worker starved of CPU, at its limit)."""

    def __init__(self) -> None:
        self.submitted = []

    def submit(self, stream) -> None:
        self.submitted.append(stream)


async def play_chunks(worker, mode: str = "burst", chunks=(0.16, 0.32, 0.64, 1.0), with_send_now: bool = True):
    """One context's chunks through an AudioOut; returns the frames sent, in order."""
    sent: list[bytes] = []

    async def send_bytes(data: bytes) -> None:
        sent.append(data)

    def send_now(frames: list) -> bool:
        sent.extend(frames)
        return True
    cfg = config(mode)
    encoder = StreamEncoder("opus", 24000, 48000, 20)
    out = AudioOut(1, cfg, encoder, PlaybackClock(), GatewayMetrics(), send_bytes, 0.0, encode_worker=worker,
                   send_now=send_now if with_send_now else None)
    for i, seconds in enumerate(chunks):
        frames = encoder.split(speech(seconds, seed=i))
        is_last = i == len(chunks) - 1
        if is_last:
            frames += encoder.split_finish()
        await out.play(frames, is_last, time.monotonic_ns() / 1e6, trace())
    await out.aclose()
    return sent


def test_frames_encoded_by_a_worker_are_the_frames_the_loop_encodes():
    async def main():
        alone = await play_chunks(None)
        worker = EncodeWorker(1)
        try:
            for with_send_now in (True, False):
                assert await play_chunks(worker, with_send_now=with_send_now) == alone
            assert await play_chunks(worker, mode="realtime") == alone  # paced: the worker is mostly ahead
        finally:
            worker.shutdown(wait=True)
        headers = [decode_audio_frame(d)[0] for d in alone]
        assert [h.seq for h in headers] == list(range(len(alone)))
        assert headers[0].flags & 1 and headers[-1].flags & 2
    run(main())


def test_two_workers_on_one_stream_keep_its_order():
    async def main():
        alone = await play_chunks(None)
        worker = EncodeWorker(2)
        try:
            assert await play_chunks(worker) == alone
        finally:
            worker.shutdown(wait=True)
    run(main())


def test_frames_a_worker_has_not_reached_are_encoded_on_the_loop_when_due():
    async def main():
        alone = await play_chunks(None)
        never = NeverRuns()
        assert await play_chunks(never, mode="realtime") == alone
        assert never.submitted  # chunks were handed to the worker; the loop encoded them itself
    run(main())


def test_a_stream_is_submitted_once_while_queued_and_again_after_the_worker_is_done():
    async def main():
        never = NeverRuns()
        encoder = StreamEncoder("opus", 24000, 48000, 20)

        async def send(data: bytes) -> None:
            pass
        out = AudioOut(1, config("realtime", lead_ms=60), encoder, PlaybackClock(), GatewayMetrics(), send, 0.0,
                       encode_worker=never, send_now=lambda frames: True)
        out._raw.extend((f, False, trace()) for f in encoder.split(speech(0.5)))  # queued, as play() does
        out.prepare()  # after a tick: the rest goes to the worker
        out.prepare()  # still queued there: not again
        assert never.submitted == [out] and out._is_encode_queued and not out._ready
        out.encode_queued()  # the worker's turn: everything raw is encoded, the stream no longer queued
        assert not out._raw and len(out._ready) > 20 and not out._is_encode_queued
        out._raw.extend((f, False, trace()) for f in encoder.split(speech(0.2, 1)))
        out.prepare()
        assert never.submitted == [out, out]
        await out.aclose()
        out.encode_queued()  # closed: nothing is encoded
        assert not out._raw and not out._ready
    run(main())


def test_an_encoding_error_in_the_worker_reaches_play():
    async def main():
        worker = EncodeWorker(1)
        try:
            encoder = StreamEncoder("opus", 24000, 48000, 20)

            async def send(data: bytes) -> None:
                pass
            out = AudioOut(1, config("realtime", lead_ms=60), encoder, PlaybackClock(), GatewayMetrics(), send, 0.0,
                           encode_worker=worker, send_now=lambda frames: True)
            bad = np.zeros(7, dtype=np.float32)  # not a 20 ms frame (480 samples at the model's 24 kHz): refused
            with pytest.raises(ValueError, match="holds 480 samples"):
                await out.play([bad] * 40, False, 0.0, trace())
            assert not out._raw and not out._ready
            await out.aclose()
        finally:
            worker.shutdown(wait=True)
    run(main())


def test_nothing_is_encoded_or_sent_after_aclose_while_a_worker_encodes():
    async def main():
        worker = EncodeWorker(1)
        try:
            encoder = StreamEncoder("opus", 24000, 48000, 20)
            sent = []

            async def send(data: bytes) -> None:
                sent.append(data)
            out = AudioOut(1, config("realtime", lead_ms=60), encoder, PlaybackClock(), GatewayMetrics(), send, 0.0,
                           encode_worker=worker, send_now=lambda frames: sent.extend(frames) or True)
            frames = encoder.split(speech(4.0))  # ~200 frames: the worker is busy with them
            task = asyncio.get_running_loop().create_task(out.play(frames, False, 0.0, trace()))
            while not sent:
                await asyncio.sleep(0.001)
            await out.aclose()
            num_sent = len(sent)
            with out._encode_lock:  # a frame being encoded is finished, then the stream is left alone
                assert not out._raw and not out._ready
            done = threading.Event()
            worker.submit(type("Marker", (), {"encode_queued": lambda self, max_frames=None: done.set(),
                                              "encode_due_ms": lambda self: float("inf")})())
            assert done.wait(30)  # the worker went past this stream (due last, the marker comes after it)
            assert not out._ready and len(sent) == num_sent
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            worker.shutdown(wait=True)
    run(main())


def test_worker_threads_run_below_the_loop_and_end_at_shutdown():
    worker = EncodeWorker(2)
    seen = {}
    done = threading.Event()

    class Probe:
        def encode_due_ms(self) -> float:
            return 0.0

        def encode_queued(self, max_frames=None) -> bool:
            import os
            seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            done.set()
    worker.submit(Probe())
    assert done.wait(30)
    import os
    assert seen["nice"] == min(19, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + worker.nice_offset)
    worker.shutdown(wait=True)
    assert all(not t.is_alive() for t in worker._threads)
    with pytest.raises(RuntimeError):
        worker.submit(Probe())
    with pytest.raises(ValueError):
        EncodeWorker(0)


def test_the_worker_serves_the_stream_due_soonest_a_run_at_a_time():
    """A stream queued behind another's long chunk is not held up by all of it: the worker encodes
    `run_frames` of the stream due soonest, then looks again (each stream's own frames still in order)."""
    calls = []
    release = threading.Event()

    class Stream:
        def __init__(self, name: str, due_ms: float, num_frames: int) -> None:
            self.name, self.due_ms, self.left = name, due_ms, num_frames

        def encode_due_ms(self) -> float:
            return self.due_ms

        def encode_queued(self, max_frames=None) -> bool:
            release.wait(30)  # the first call holds the worker until every stream is queued
            n = min(self.left, max_frames or self.left)
            calls.append((self.name, n))
            self.left -= n
            self.due_ms += 20 * n  # its next frame is due once these have gone out
            return self.left > 0
    worker = EncodeWorker(1, run_frames=8)
    try:
        worker.submit(Stream("first", 0.0, 1))
        while worker._jobs:  # until the worker took the first one (it waits in it)
            time.sleep(0.001)
        worker.submit(Stream("long", 100.0, 20))
        worker.submit(Stream("late", 130.0, 4))
        release.set()
        deadline = time.monotonic() + 30
        while len(calls) < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert calls == [("first", 1), ("long", 8), ("late", 4), ("long", 8), ("long", 4)]
    finally:
        release.set()
        worker.shutdown(wait=True)
    with pytest.raises(ValueError):
        EncodeWorker(1, run_frames=0)
