"""Cuts a stream of arbitrarily sized PCM chunks into fixed-size frames, carrying the remainder.

Model codecs emit chunks whose sizes have nothing to do with the wire's frame size (a 12.5 Hz codec
frame at 24 kHz is 1920 samples; a 20 ms Opus frame at 48 kHz is 960, after a resampler that releases
output in blocks of its own). Codecs need exact frames, so this sits between the two.
"""

from __future__ import annotations

import numpy as np

from voxrt.audio.formats import is_integer
from voxrt.audio.pcm import as_mono_float32


_DTYPES = (np.dtype(np.float32), np.dtype(np.int16))


class Framer:
    """`push()` returns every frame completed so far; `finish()` returns the unpadded remainder once.

    Samples are float32 (any input is converted, as everywhere in voxrt.audio), or int16 with
    `dtype=np.int16` (16-bit PCM already converted, as `StreamEncoder` gives Opus: then the input must be
    int16; a float array is a caller's mistake, not something to convert silently)."""

    def __init__(self, samples_per_frame: int, dtype=np.float32) -> None:
        if not (is_integer(samples_per_frame) and samples_per_frame > 0):
            raise ValueError(f"samples_per_frame must be a positive integer (got {samples_per_frame!r})")
        self.dtype = np.dtype(dtype)
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be float32 or int16 (got {self.dtype})")
        self._is_int16 = self.dtype == _DTYPES[1]
        self.samples_per_frame = int(samples_per_frame)
        self._pending = np.zeros(0, dtype=self.dtype)  # always shorter than one frame

    @property
    def num_pending_samples(self) -> int:
        return int(self._pending.shape[0])

    def push(self, pcm: np.ndarray) -> list[np.ndarray]:
        """Appends `pcm` and returns the full frames now available (possibly none), oldest first.

        The frames are views of one fresh array, never of the caller's buffer, so the caller may reuse it.
        """
        samples = _as_mono_int16(pcm) if self._is_int16 else as_mono_float32(pcm)
        if samples.shape[0] == 0:
            return []
        joined = np.concatenate([self._pending, samples])  # a copy, even when nothing was pending
        num_frames = joined.shape[0] // self.samples_per_frame
        end = num_frames * self.samples_per_frame
        # copy the short remainder so it does not keep the whole joined array alive
        self._pending = joined[end:].copy()
        return [joined[start : start + self.samples_per_frame] for start in range(0, end, self.samples_per_frame)]

    def finish(self) -> np.ndarray | None:
        """The last partial frame (shorter than a frame, never padded) or None; the framer is then empty
        and may be reused."""
        if self._pending.shape[0] == 0:
            return None
        tail, self._pending = self._pending, np.zeros(0, dtype=self.dtype)
        return tail


def _as_mono_int16(pcm: object) -> np.ndarray:
    array = np.asarray(pcm)
    if array.dtype != _DTYPES[1]:
        raise ValueError(f"this framer takes int16 samples (got {array.dtype})")
    if array.ndim != 1:
        raise ValueError(f"expected mono PCM as a 1-D array of samples (got shape {array.shape})")
    return array
