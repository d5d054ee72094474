"""Lanes on the GPU, first contact: the same greedy requests through the time-shared loop, CUDA-stream lanes
and green-context lanes (and with the deadline policy), checking tokens and audio against the loop and
timing each. Prints a table last.

    python bench/gpu_lanes_smoke.py --checkpoint /tmp/q17 [--model qwen3-tts] [--policy deadline]
        [--rows all|adaptive]

`--rows adaptive`: the loop, then green lanes with two SM modes (`--sm-modes 32,64 --sm-mode adaptive`) whose
chooser is replaced by one that switches the split every step: the same audio as the loop proves the
per-mode graphs and the switch keep every request's state in order.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np
import torch

from voxrt.engine.messages import AudioChunk, EngineConfig, RequestFailed, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.sched.sm_modes import EveryStepSmMode
from voxrt.models.registry import build_program

TEXTS = ["The quick brown fox jumps over the lazy dog.", "A second request, a little longer than the first.",
         "Short one.", "Numbers like three point five and ten thirty are read aloud."] * 4


def run(core: EngineCore, frames: int) -> tuple[dict, float, float]:
    t0 = time.monotonic()
    for i, text in enumerate(TEXTS):
        core.submit(SubmitRequest(f"r{i}", core.info.default_voice, SamplingParams(greedy=True, num_frames=frames),
                                  text, True))
    out: dict[str, list] = {}
    first = {}
    while core.has_work():
        for e in core.step():
            if isinstance(e, AudioChunk):
                out.setdefault(e.request_id, []).append(np.frombuffer(e.pcm, dtype="<f4"))
                first.setdefault(e.request_id, time.monotonic() - t0)
            elif isinstance(e, RequestFailed):
                raise RuntimeError(f"{e.request_id} failed: {e.code} {e.message}")
    wall = time.monotonic() - t0
    audio = {rid: np.concatenate(parts) for rid, parts in out.items()}
    return audio, wall, float(np.median(list(first.values())))


def compare_audio(audio: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict:
    """Whether every request's audio is as long as `ref`'s, and the largest sample difference where it is."""
    return {"same_lengths": all(len(audio[k]) == len(ref[k]) for k in ref),
            "max_abs_audio_diff": float(max((np.abs(audio[k] - ref[k]).max() for k in ref
                                             if len(audio[k]) == len(ref[k])), default=0.0))}


def add_row(rows: list[dict], row: dict, audio: dict[str, np.ndarray], ref: dict | None) -> dict:
    """Keep and print a run's row, its audio compared with the first run's (`compare_audio`); the reference."""
    if ref is None:
        ref = audio
    else:
        row.update(compare_audio(audio, ref))
    rows.append(row)
    print(json.dumps(row), flush=True)
    return ref


def write_rows(out_dir: str, name: str, rows: list[dict]) -> None:
    """Every run's row as JSON in out_dir/name, before the table is printed."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(rows, f, indent=2)


def release(core: EngineCore) -> None:
    """Close an engine and hand its GPU memory back before the next one starts."""
    core.close()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-tts")
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--policy", default="deadline")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--out", default=".")
    ap.add_argument("--rows", default="all", choices=["all", "adaptive"])
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    program = build_program(args.model, args.checkpoint)
    rows, ref = [], None
    rows_wanted = [("off", "base", None), ("green", "base", None), ("green", args.policy, None),
                   ("streams", "base", None)]
    if args.rows == "adaptive":
        rows_wanted = [("off", "base", None), ("green", args.policy, (32, 64))]
    for lanes, policy, sm_modes in rows_wanted:
        t0 = time.monotonic()
        label = "adaptive" if sm_modes else lanes
        try:
            extra = dict(codec_sms=sm_modes, sm_mode="adaptive") if sm_modes else {}
            core = EngineCore(EngineConfig(model=args.model, checkpoint=args.checkpoint, max_batch_size=16,
                                           max_seq_len=512, lanes=lanes, scheduler_type=policy, **extra),
                              program=program)
            core.warmup()
            if sm_modes and core.sm_chooser is not None:
                core.sm_chooser = EveryStepSmMode()
        except Exception as exc:  # noqa: BLE001 (report and go on to the next mode)
            rows.append(dict(lanes=label, policy=policy, error=f"{type(exc).__name__}: {exc}"))
            print(rows[-1], flush=True)
            continue
        setup_s = time.monotonic() - t0
        run(core, 8)  # warm
        audio, wall, ttfa = run(core, args.frames)
        row = dict(lanes=label, policy=policy, mode=core.lanes.mode, describe=core.lanes.describe(),
                   sm_mode_switches=core.stats().sm_mode_switches,
                   setup_s=round(setup_s, 1), wall_s=round(wall, 3), median_first_chunk_s=round(ttfa, 4),
                   requests=len(audio), costs=str(core.scheduler.costs))
        ref = add_row(rows, row, audio, ref)
        release(core)
        del core
    write_rows(args.out, "lanes_smoke.json", rows)
    print("\nlanes    policy    mode     wall_s  first_chunk_s  same_len  max_diff")
    for r in rows:
        print(f"{r['lanes']:8} {r['policy']:9} {r.get('mode', 'ERROR'):8} {r.get('wall_s', '-')!s:7} "
              f"{r.get('median_first_chunk_s', '-')!s:14} {r.get('same_lengths', '-')!s:9} "
              f"{r.get('max_abs_audio_diff', '-')!s}  {r.get('error', '')}")


if __name__ == "__main__":
    main()
