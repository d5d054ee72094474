"""libopus per frame when 30 streams' encoders take turns, in runs of 1, 2, 5, 10 or all frames per stream,
with and without an 8 MB array summed between turns (the rest of a gateway's work evicting the caches); only
the encode calls are timed. python encode_runs.py (the project venv)."""
import time

import numpy as np
import soxr

from voxrt.audio.opus import OpusEncoder
from voxrt.engine.standin import SAMPLE_RATE, SAMPLES_PER_FRAME, speechlike_signal

base = speechlike_signal()
streams = []
for k in range(30):
    pcm = np.resize(np.roll(base, -k * 7 * SAMPLES_PER_FRAME), 87 * SAMPLES_PER_FRAME)
    wire = soxr.resample(pcm, SAMPLE_RATE, 48000, quality="HQ").astype(np.float32).clip(-1, 1)
    streams.append([wire[i:i + 960].copy() for i in range(0, len(wire) - 959, 960)])
junk = np.random.rand(1_000_000)


def run(run_frames: int, thrash: bool) -> float:
    encoders = [OpusEncoder(48000, 20, signal="music") for _ in streams]
    total_s, count = 0.0, 0
    for start in range(0, len(streams[0]), run_frames):
        for encoder, frames in zip(encoders, streams):
            if thrash:
                junk.sum()
            t = time.perf_counter()
            for frame in frames[start:start + run_frames]:
                encoder.encode_clean(frame)
                count += 1
            total_s += time.perf_counter() - t
    return total_s / count * 1e6


for _ in range(2):
    for n in (1, 2, 5, 10, 1000):
        print(f"run of {n:4d}: {run(n, False):6.1f} us/frame; caches evicted between turns: {run(n, True):6.1f}")
