"""Smoke check of `--dp-size` on whatever machine runs it: N engine replicas of a model (replica i on cuda:i,
or the CPU), a burst of requests routed by headroom (engine/replicas.py), where each went, what each replica
reported, and the kill -9 of one replica while the others serve. No figure of capacity: it checks that the
layout runs.

    python bench/replicas_smoke.py --replicas 2 --model tiny --requests 8          # on a 2-GPU machine
    python bench/replicas_smoke.py --replicas 2 --device cpu --model tiny-lite    # anywhere

On a machine with fewer GPUs than --replicas it prints the engine's start-up error and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from voxrt.engine.errors import EngineError
from voxrt.engine.messages import EngineConfig
from voxrt.engine.replicas import ReplicaSet
from voxrt.engine.supervisor import SupervisorConfig

TEXT = "A sentence spoken by one of the replicas, to check that each serves its own requests."


async def _speak(engine, frames: int) -> dict:
    t0 = time.monotonic()
    rid = await engine.submit(text=TEXT, final=True, params={"num_frames": frames})
    first, samples = None, 0
    async for chunk in engine.stream(rid):
        first = first or time.monotonic() - t0
        samples += chunk.num_samples
    return {"replica": engine.replica, "ttfa_ms": round(1000 * first), "audio_s": samples / engine.info.sample_rate}


async def main(args) -> int:
    config = EngineConfig(model=args.model, device=args.device, max_batch_size=args.max_batch_size)
    t0 = time.monotonic()
    try:
        replicas = await ReplicaSet.start(config, args.replicas, supervisor=SupervisorConfig(restart_backoff_s=0.5))
    except EngineError as exc:
        print(f"start failed: {exc.code}: {exc.message}")
        return 2
    try:
        print(f"{args.replicas} replicas ready in {time.monotonic() - t0:.1f} s on "
              f"{[c.info.device for c in replicas.replicas]}")
        results = await asyncio.gather(*(_speak(replicas.for_context(), args.frames) for _ in range(args.requests)))
        print("routed:", replicas.num_routed, "results:", json.dumps(results))
        print("loads:", [c.load for c in replicas.replicas])
        if args.replicas > 1:
            survivor = replicas.for_context()
            task = asyncio.ensure_future(_speak(survivor, args.frames))
            await asyncio.sleep(0.2)
            victim = (survivor.replica + 1) % args.replicas
            replicas.kill(victim)
            print(f"killed replica {victim}; replica {survivor.replica} finished:", await task)
            t1 = time.monotonic()
            while not replicas.replicas[victim].is_ready:
                await asyncio.sleep(0.1)
            print(f"replica {victim} restarted in {time.monotonic() - t1:.1f} s "
                  f"(restarts {replicas.replicas[victim].num_restarts})")
        return 0
    finally:
        await replicas.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--frames", type=int, default=50)
    sys.exit(asyncio.run(main(parser.parse_args())))
