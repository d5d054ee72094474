"""Opus encoding beside the event loop: worker threads that encode a chunk's frames as soon as it arrives.

libopus is most of the gateway's CPU per frame (~120 us of ~300 on the 2-core dev VM) and it releases the GIL
(a ctypes call), so it need not run on the event loop. With `--encode-threads N` each context's `AudioOut`
(audio_out.py) hands a chunk's frames to `EncodeWorker.submit` as soon as the chunk is queued (a chunk whose
first frames are due at once, such as a context's first, once those are sent: they are encoded on the loop,
and a worker woken beside them would only compete with it for the one core and the GIL); a worker
thread encodes them in order, one frame at a time under the stream's encode lock, into the stream's ready
frames, and the loop's pacer only frames and writes encoded packets. A frame that is due before a worker got
to it is encoded by the loop itself under the same lock (the stream's frames are encoded in order whoever
encodes them: Opus is stateful), so a worker that falls behind never holds a frame back; the loop then waits
at most for the one frame a worker is encoding.

Why whole chunks: one stream's frames encoded back to back cost what libopus alone costs (its state stays in
the caches); encoded just before each is sent, the same call cost up to ~200 us a frame here
(bench/results/2026-12-02-gateway-5/). On the loop a chunk's 100 frames in a row (~13 ms) would hold up every
other stream's sends; in a thread, the kernel and the GIL interleave them with the loop's work.

Which stream first: the worker serves the queued stream whose next frame is due soonest (its
`encode_due_ms`), `RUN_FRAMES` frames at a time, and puts it back in line if it has more. First in, first
out, whole streams at a time, a chunk of 25 model frames (100 Opus frames, ~18 ms of libopus here) held every
stream queued behind it, and a stream whose chunk came late (due at once: at 2x real time, the 2nd to 4th
chunks of Qwen3-TTS's 2, 4, 8, 16, 25-frame schedule) had its frames encoded by the loop instead, each a cold
~200 us libopus call in the middle of a tick: 37-40% of all frames at 60 sessions (bench/results/
2026-12-03-gateway-8/). A run of 8 is ~1.5 ms of libopus and still encodes one stream's frames back to back.

The threads yield to the loop: each lowers its own scheduling priority (`NICE_OFFSET` nice levels below the
process's; Linux keeps a nice value per thread), so that when the loop's timer fires on a core the worker
occupies, the loop runs first. Nothing on the loop waits for a worker except in the case above.

CPU: a worker's CPU time is the gateway process's (`time.process_time` counts all its threads), so the
gateway benchmark's CPU per session and sessions per core count it (voxrt/loadgen/gateway_bench.py).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
from typing import Protocol

log = logging.getLogger("voxrt.gateway.encode_worker")

NICE_OFFSET = 10  # a worker's nice value above the process's (the loop's); 0 leaves it level with the loop
RUN_FRAMES = 8  # frames a worker encodes of one stream before it looks again for the stream due soonest


class EncodedStream(Protocol):
    def encode_queued(self, max_frames: int | None = None) -> bool:
        """Encode the frames queued so far (at most `max_frames`), in order, one at a time under the stream's
        lock; called on a worker thread. True: frames are left and the stream stays queued (the worker puts
        it back in line). Must not raise (an encoding error is kept for the loop to raise)."""

    def encode_due_ms(self) -> float:
        """When the stream's next frame to encode is due (monotonic ms): the worker's order."""


class EncodeWorker:
    """`num_threads` daemon threads serving one queue of streams with frames to encode. A stream is queued
    once per `submit` (AudioOut submits only while it is not queued already)."""

    def __init__(self, num_threads: int = 1, *, nice_offset: int = NICE_OFFSET, run_frames: int = RUN_FRAMES) -> None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if run_frames < 1:
            raise ValueError(f"run_frames must be >= 1, got {run_frames}")
        self.nice_offset, self.run_frames = nice_offset, run_frames
        self._jobs: list[tuple[float, int, EncodedStream | None]] = []  # a heap: (due ms, order, stream)
        self._order = itertools.count()
        self._has_jobs = threading.Condition()
        self._threads = [threading.Thread(target=self._run, name=f"voxrt-encode-{i}", daemon=True)
                         for i in range(num_threads)]
        self._is_shut_down = False
        for thread in self._threads:
            thread.start()

    @property
    def num_threads(self) -> int:
        return len(self._threads)

    def submit(self, stream: EncodedStream) -> None:
        if self._is_shut_down:
            raise RuntimeError("the encode worker is shut down")
        self._put(stream.encode_due_ms(), stream)

    def _put(self, due_ms: float, stream: EncodedStream | None) -> None:
        with self._has_jobs:
            heapq.heappush(self._jobs, (due_ms, next(self._order), stream))
            self._has_jobs.notify()

    def _get(self) -> EncodedStream | None:
        with self._has_jobs:
            while not self._jobs:
                self._has_jobs.wait()
            return heapq.heappop(self._jobs)[2]

    def shutdown(self, wait: bool = False) -> None:
        """The threads end after the stream each is encoding (queued streams are dropped: their frames are
        encoded on the loop when due, or not at all once their sessions close)."""
        if self._is_shut_down:
            return
        self._is_shut_down = True
        for _ in self._threads:
            self._put(-float("inf"), None)  # ahead of every stream still queued
        if wait:
            for thread in self._threads:
                thread.join()

    def _run(self) -> None:
        if self.nice_offset:
            try:  # Linux: a thread's own nice value (PRIO_PROCESS with its thread id); raising it needs no rights
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + self.nice_offset))
            except (OSError, AttributeError):
                pass  # elsewhere the worker runs level with the loop
        while True:
            stream = self._get()
            if stream is None:
                return
            try:
                if stream.encode_queued(self.run_frames):  # frames left: back in line, by its next due time
                    self._put(stream.encode_due_ms(), stream)
            except Exception:  # noqa: BLE001 (a stream's own errors are its own; the worker goes on)
                log.exception("encoding a stream's frames failed")
