"""Shared signals for the audio tests: deterministic (seeded) and short, so the whole folder runs in ~1 s.

A plain module with a unique name, not conftest.py: every test folder has a `conftest` module, and
`from conftest import ...` could pick up another folder's."""

from __future__ import annotations

import numpy as np


def sine(frequency_hz: float, duration_s: float, sample_rate: int, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(duration_s * sample_rate)) / sample_rate
    return (amplitude * np.sin(2 * np.pi * frequency_hz * t)).astype(np.float32)


def speechlike(num_samples: int, seed: int = 0) -> np.ndarray:
    """A sum of sines plus a little noise at ~-10 dBFS: broadband enough to exercise the filters."""
    rng = np.random.default_rng(seed)
    t = np.arange(num_samples) / 24000
    x = 0.2 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1234 * t) + 0.05 * np.sin(2 * np.pi * 3100 * t)
    return (x + 0.01 * rng.standard_normal(num_samples)).astype(np.float32)


def odd_chunks(signal: np.ndarray, seed: int = 0, max_chunk: int = 2500) -> list[np.ndarray]:
    """Splits a signal at random points, including chunks of 0 and 1 sample."""
    rng = np.random.default_rng(seed)
    chunks, start = [], 0
    sizes = [0, 1, 7, 333]
    while start < len(signal):
        size = sizes.pop(0) if sizes else int(rng.integers(1, max_chunk))
        chunks.append(signal[start : start + size])
        start += size
    return chunks
