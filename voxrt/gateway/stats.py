"""Measurement files of one gateway process (`voxrt serve --stats-file PREFIX --trace-file PREFIX`).

- Stats: every `STATS_EVERY_S` the process replaces `<prefix>.<pid>.json` with its cumulative figures: the
  frame send-lateness histograms (all frames, and split into paced and arrival-bound frames, audio_out.py)
  and the event-loop-lag histogram (voxrt/timing.py), frames sent and the writes that carried them (one
  transport write, one system call, each), pacer wake-ups, open sessions, its garbage collections (all,
  per generation, and the unreachable objects each generation freed: voxrt/gcpause.py) and its
  CPU seconds (all its threads, and its event loop's thread alone). A benchmark reads the files of every gateway process before and after a window and subtracts
  (voxrt/loadgen/gateway_bench.py), which also works with several processes behind one port, where a
  /metrics scrape reaches one of them at random.
- Trace: one JSON line per finished context with each chunk's timestamps along the path (engine done,
  received by this process, handled on its loop, first and last frame sent, and when the listener needs
  the chunk by this process's playback clock), for `bench/product_path.py windows` to set beside the load generator's
  arrival times.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from voxrt.gateway.pacer import _PACERS

STATS_EVERY_S = 1.0


class StatsWriter:
    def __init__(self, prefix: str, state) -> None:
        self.path = f"{prefix}.{os.getpid()}.json"
        self.state = state
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="voxrt-stats")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.write()

    async def _run(self) -> None:
        while True:
            self.write()
            await asyncio.sleep(STATS_EVERY_S)

    def write(self) -> None:
        m = self.state.metrics
        try:
            pacer = _PACERS.get(asyncio.get_running_loop())
        except RuntimeError:  # not on the loop (no pacer figures then)
            pacer = None
        gc_pauses = getattr(self.state, "gc_pauses", None)
        # cpu_s: every thread of the process (the loop, --encode-threads workers, the engine client's reader);
        # loop_cpu_s: the event loop's thread alone (write() runs on it)
        data = {"pid": os.getpid(), "monotonic_s": time.monotonic(), "cpu_s": time.process_time(),
                "loop_cpu_s": time.thread_time(),
                "pacer_wakeups": pacer.num_wakeups if pacer is not None else 0,
                "sessions": self.state.num_sessions, "frames_sent": m.num_frames_sent,
                "frame_writes": m.num_frame_writes,
                "send_lateness": m.send_lateness.to_dict(), "send_lateness_paced": m.send_lateness_paced.to_dict(),
                "send_lateness_ready": m.send_lateness_ready.to_dict(), "loop_lag": m.loop_lag.lag.to_dict(),
                # the process's garbage collections while serving (each holds the event loop): voxrt/gcpause.py
                "gc": gc_pauses.histogram.to_dict() if gc_pauses is not None else None,
                "gc_generations": ([h.to_dict() for h in gc_pauses.by_generation] if gc_pauses is not None
                                   else None),
                "gc_collected": list(gc_pauses.collected) if gc_pauses is not None else None}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


class TraceWriter:
    def __init__(self, prefix: str) -> None:
        self.path = f"{prefix}.{os.getpid()}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()
