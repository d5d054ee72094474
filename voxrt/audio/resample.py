"""Streaming sample-rate conversion: a model's rate (often 24 kHz) to the wire's (8/16/24/48 kHz).

Stateful across chunks through libsoxr's streaming API (`soxr.ResampleStream`), so chunk boundaries leave
no clicks, and streaming followed by `flush()` gives the same samples as one-shot `soxr.resample` over the
whole signal (tests/audio/test_resample.py checks this).

Quality "HQ" (libsoxr's 20-bit preset, linear phase, passband to ~91% of the lower Nyquist). Why not
another preset, measured on 24 kHz input fed in 20 ms chunks:
- "LQ" buffers half as much (~11 ms mean at 16/48 kHz) but rolls off from ~68% of Nyquist: at 8 kHz out
  that is ~2.7 kHz, audibly below the 3.4 kHz telephone band.
- "MQ" (16-bit) holds back exactly as much as "HQ", so it saves nothing on latency.
- "QQ" (cubic interpolation) has no buffering but aliases.
"HQ" holds back ~20 ms on average (at most ~38 ms) at 16/48 kHz out and ~42 ms (at most ~75 ms) at 8 kHz
out: libsoxr filters in blocks and releases output a block at a time. Nothing is lost: `flush()` returns
the held tail at the end of an utterance. Where the model rate equals the wire rate (Opus at 24 kHz for a
24 kHz model) there is no resampler and no delay at all.
"""

from __future__ import annotations

import numpy as np
import soxr

from voxrt.audio.formats import is_integer
from voxrt.audio.pcm import as_mono_float32, pcm16_decode

SOXR_QUALITY = "HQ"

_EMPTY = np.zeros(0, dtype=np.float32)


class StreamResampler:
    """`process()` chunks as they come, `flush()` once at the end of the stream for the held tail.

    After `flush()` the resampler is reset and ready for a new, unrelated stream. Equal rates are a
    passthrough: `process()` returns its input array itself (no copy) and `flush()` returns nothing.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        if not (is_integer(in_rate) and is_integer(out_rate) and in_rate > 0 and out_rate > 0):
            raise ValueError(f"rates must be positive integers in Hz (got in_rate={in_rate!r}, out_rate={out_rate!r})")
        self.in_rate = int(in_rate)
        self.out_rate = int(out_rate)
        self.is_identity = in_rate == out_rate
        self._stream = None if self.is_identity else self._new_stream()

    def _new_stream(self) -> soxr.ResampleStream:
        return soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="float32", quality=SOXR_QUALITY)

    def process(self, pcm: np.ndarray) -> np.ndarray:
        """float32 mono at in_rate -> float32 mono at out_rate (possibly empty while libsoxr fills a block)."""
        array = as_mono_float32(pcm)
        if self._stream is None:
            return array
        # libsoxr reads the buffer directly: it must be C-contiguous (a strided view is not)
        return self._stream.resample_chunk(np.ascontiguousarray(array))

    def flush(self) -> np.ndarray:
        """The samples still inside the filter, then a reset. Total output over a stream is
        num_input_samples * out_rate / in_rate rounded half up (libsoxr's rule: 6172.5 -> 6173)."""
        if self._stream is None:
            return _EMPTY.copy()
        tail = self._stream.resample_chunk(_EMPTY, last=True)
        # `last=True` may be given only once per stream (python-soxr's contract): reset so the object
        # stays usable for the next utterance (tests check a reset stream repeats a fresh one exactly)
        self._stream.clear()
        return tail

    def process_pcm16(self, data: bytes, *, last: bool) -> np.ndarray:
        """s16le bytes at in_rate -> float32 at out_rate, with the held tail too when `last` (the stream's
        end). For adapters whose wire wants a rate the native session does not serve (22.05 / 44.1 kHz)."""
        pcm = self.process(pcm16_decode(data))
        return np.concatenate([pcm, self.flush()]) if last else pcm

    @property
    def delay_samples(self) -> float:
        """Output samples currently held inside the resampler (0 for the passthrough)."""
        return 0.0 if self._stream is None else float(self._stream.delay())
