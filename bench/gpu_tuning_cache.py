"""The tuning cache on a GPU (runtime/tuning_cache.py): the engine started three times on one program, greedy
requests through each, and a table of what the start cost and whether the audio stayed the same:

    cold: an empty cache folder: every codec shape timed, the choices saved
    warm: the same folder: the choices restored, nothing timed again (the restored count, the start-up time)
    off:  VOXRT_TUNING_CACHE=off: timed again, nothing read or written

    python bench/gpu_tuning_cache.py --checkpoint /tmp/q17 --out $OUT/tuning [--lanes green] [--policy deadline]

On the CPU (`--model tiny`, no checkpoint) the engine captures no graphs and times nothing: the rows show 0
restored, which is what the CPU does; the script's plumbing is what that run checks (tests/engine/runtime/
test_tuning_cache_script.py). The audio of `warm` and `off` is compared with `cold`'s (the same greedy requests):
a restored choice picks the same formulation the timing picked, so the kernels and the audio are the same.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

from gpu_lanes_smoke import add_row, release, run, write_rows  # bench/ is on sys.path when this runs as a script
from voxrt.engine.messages import EngineConfig
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.tuning_cache import ENV
from voxrt.models.registry import build_program


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-tts")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--lanes", default="auto")
    ap.add_argument("--policy", default="deadline")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--max-batch-size", type=int, default=32)
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    program = build_program(args.model, args.checkpoint)
    folder = tempfile.mkdtemp(prefix="voxrt-tuning-")
    rows, ref = [], None
    before = os.environ.get(ENV)
    try:
        for label, setting in (("cold", folder), ("warm", folder), ("off", "off")):
            os.environ[ENV] = setting
            t0 = time.monotonic()
            core = EngineCore(EngineConfig(model=args.model, checkpoint=args.checkpoint,
                                           max_batch_size=args.max_batch_size, max_seq_len=512, lanes=args.lanes,
                                           scheduler_type=args.policy), program=program)
            core.warmup()
            setup_s = time.monotonic() - t0
            tuning = core.runner.tuning
            audio, _, _ = run(core, args.frames)
            row = dict(run=label, setup_s=round(setup_s, 2), restored=tuning.num_restored if tuning else 0,
                       file=str(tuning.path) if tuning else None, files=sorted(os.listdir(folder)),
                       requests=len(audio), note=core.program.warmup_note())
            ref = add_row(rows, row, audio, ref)
            release(core)
            del core
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
    write_rows(args.out, "tuning_cache.json", rows)
    print("\nrun   setup_s  restored  same_len  max_diff")
    for r in rows:
        print(f"{r['run']:5} {r['setup_s']:7} {r['restored']:9} {r.get('same_lengths', '-')!s:9} "
              f"{r.get('max_abs_audio_diff', '-')!s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
