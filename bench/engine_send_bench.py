"""The engine's sender thread against a busy step loop, on the CPU: how long a chunk takes from `_Outbox.put` to
a reader in another process while the putting thread runs Python (the step loop planning) most of the time.

    python bench/engine_send_bench.py --steps 100 --chunks 8 --busy-ms 10 [--switch-ms 5]

Each step queues --chunks chunks of --chunk-kb KB (a codec launch's delivery) and then keeps the thread busy in
Python for --busy-ms; the sender thread must take the GIL back after every write it makes. A reader process
(forked) reads them in bulk (`FrameReader`) and reports each chunk's time since it was queued. Prints the
p50 / p90 / p99 / max ms. On a 2-core machine the reader competes for the cores: compare trees on one machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time

from voxrt.engine.messages import AudioChunk
from voxrt.engine.process import _Outbox
from voxrt.engine.wire import FrameReader


def _reader(conn, count: int, out) -> None:
    reader, latencies = FrameReader(conn), []
    while len(latencies) < count:
        for msg in reader.read():
            latencies.append((time.monotonic_ns() - msg.done_ns) / 1e6)
    out.send(latencies)


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--chunks", type=int, default=8, help="chunks queued a step")
    ap.add_argument("--chunk-kb", type=int, default=140)
    ap.add_argument("--busy-ms", type=float, default=10.0, help="Python on the putting thread after each step's puts")
    ap.add_argument("--switch-ms", type=float, default=5.0, help="sys.setswitchinterval, in ms (Python's: 5)")
    args = ap.parse_args()
    sys.setswitchinterval(args.switch_ms / 1e3)
    ctx = mp.get_context("fork")
    ours, theirs = ctx.Pipe()
    results, results_end = ctx.Pipe()
    count = args.steps * args.chunks
    reader = ctx.Process(target=_reader, args=(theirs, count, results_end))
    reader.start()
    box = _Outbox()
    pcm = b"\0" * (args.chunk_kb * 1000)
    for step in range(args.steps):
        for i in range(args.chunks):
            box.put(ours, AudioChunk(f"r{i}", step + 1, pcm, 24000, 0, 25, False, done_ns=time.monotonic_ns()))
        _busy(args.busy_ms)
    latencies = sorted(results.recv())
    reader.join()
    box.close()
    pick = lambda q: latencies[min(len(latencies) - 1, int(len(latencies) * q))]  # noqa: E731
    print(f"{len(latencies)} chunks of {args.chunk_kb} KB, {args.chunks} a step, {args.busy_ms:g} ms busy a step, "
          f"switch interval {args.switch_ms:g} ms: put -> read p50 {pick(0.5):.2f} p90 {pick(0.9):.2f} "
          f"p99 {pick(0.99):.2f} max {latencies[-1]:.2f} ms")


if __name__ == "__main__":
    main()
