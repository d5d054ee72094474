"""The engine loop's reading of commands, `multiprocessing`'s recv against voxrt/engine/wire.py's bulk read, on the
CPU (no GPU): a client process writes 21 AppendText a step (what a trace at max batch 256 read with tokens
streamed: bench/results/2026-12-07-h100-b256-paths/) every 12 ms, while in the reading process a sender thread
sends ~140 KB chunks to a sink process without pause, as the engine's sender thread does under load: each system
call of the reader hands the GIL to the sender. Prints the reader's time per command.

    python bench/engine_wire_bench.py [--steps 150] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
from multiprocessing.connection import wait

from voxrt.engine.messages import AppendText, AudioChunk
from voxrt.engine.wire import FrameReader


def _client(conn, per_step: int, steps: int) -> None:
    for _ in range(steps):
        for i in range(per_step):
            conn.send(AppendText(f"req-{i}", " word"))
        time.sleep(0.012)
    conn.send(None)


def _sink(conn) -> None:
    try:
        while True:
            conn.recv_bytes()
    except (EOFError, OSError):
        pass


def run(mode: str, with_sender: bool, per_step: int, steps: int) -> float:
    ours, theirs = mp.Pipe()
    client = mp.Process(target=_client, args=(theirs, per_step, steps))
    out, out_end = mp.Pipe()
    sink = mp.Process(target=_sink, args=(out_end,), daemon=True)
    client.start()
    sink.start()
    stop = threading.Event()
    chunk = AudioChunk("r", 1, b"\0" * 140_000, 24000, 2, 18, False)

    def send_forever() -> None:
        try:
            while not stop.is_set():
                out.send(chunk)
        except (OSError, TypeError):  # closed under it at the end of the run
            pass

    sender = threading.Thread(target=send_forever, daemon=True)
    if with_sender:
        sender.start()
    reader = FrameReader(ours) if mode == "bulk" else None
    spent_ns, count, done = 0, 0, False
    while not done:
        if not wait([ours], 0.05):
            continue
        start = time.perf_counter_ns()
        if reader is not None:
            messages = reader.read()
        else:  # what the hub did before: recv, then poll for more
            messages = [ours.recv()]
            while messages[-1] is not None and ours.poll(0):
                messages.append(ours.recv())
        spent_ns += time.perf_counter_ns() - start
        done = any(m is None for m in messages)
        count += sum(m is not None for m in messages)
    stop.set()
    client.join()
    if with_sender:
        sender.join(5)
    out.close()
    sink.kill()  # its own copy of the write end keeps it from ever reading the end of the stream
    sink.join(5)
    return spent_ns / count / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--per-step", type=int, default=21)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for with_sender in (False, True):
        for mode in ("recv", "bulk"):
            best = min(run(mode, with_sender, args.per_step, args.steps) for _ in range(args.repeats))
            print(f"{mode:4s} ({'with' if with_sender else 'no':4s} sender thread): {best:6.1f} us a command "
                  f"(least of {args.repeats})", flush=True)


if __name__ == "__main__":
    main()
