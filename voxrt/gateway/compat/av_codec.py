"""Compressed containers and time-stretch through PyAV (FFmpeg's libavcodec / libavformat / libavfilter).

`ContainerEncoder` turns a stream of float32 mono PCM into the bytes of an MP3, AAC (ADTS), FLAC or Ogg Opus
stream as it arrives: the muxer writes into an in-memory sink that is drained after every push, so a caller
can send each piece at once. The sink is not seekable, so muxers that would go back to patch a header at the
end (FLAC's STREAMINFO sample count, MP3's Xing frame) leave "unknown" there, which every decoder accepts.

`TimeStretcher` changes tempo without changing pitch with FFmpeg's `atempo` filter (WSOLA), one instance per
stream (it keeps its overlap between pushes). atempo takes 0.5-100 per instance; slower speeds chain two.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

try:
    import av
except ImportError:  # PyAV is a dependency, but a bare image (the GPU bench machine) may lack it: then only
    av = None  # the containers fail, with a clear error, and the rest of the gateway serves


def _require_av() -> None:
    if av is None:
        raise RuntimeError("compressed audio formats need PyAV (pip install av); it is not installed")

# format -> (muxer, codec, output sample rate or None for the input's, bit rate)
CONTAINER_FORMATS = {
    "mp3": ("mp3", "libmp3lame", None, 128_000),
    "aac": ("adts", "aac", None, 96_000),
    "flac": ("flac", "flac", None, None),
    "opus": ("ogg", "libopus", 48000, 64_000),
}
MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def _mono_frame(pcm: np.ndarray, rate: int, pts: int):
    """float32 mono PCM as an FFmpeg frame stamped `pts` samples into its stream."""
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm, dtype=np.float32).reshape(1, -1),
                                       format="flt", layout="mono")
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = Fraction(1, rate)
    return frame


class _Sink:
    """A write-only, non-seekable file for the muxer; `take()` returns what was written since the last call."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


class ContainerEncoder:
    """float32 PCM in (any length per push), container bytes out. `finish()` flushes the encoder and writes the
    trailer; the encoder cannot be used after it."""

    def __init__(self, fmt: str, in_rate: int, *, out_rate: int | None = None, bit_rate: int | None = None) -> None:
        if fmt not in CONTAINER_FORMATS:
            raise ValueError(f"unknown container format {fmt!r}; known: {sorted(CONTAINER_FORMATS)}")
        _require_av()
        muxer, codec, fixed_rate, default_bit_rate = CONTAINER_FORMATS[fmt]
        rate = out_rate or fixed_rate or in_rate
        if fmt == "mp3" and rate not in MP3_RATES:
            raise ValueError(f"MP3 has no {rate} Hz mode; use one of {MP3_RATES}")
        self.in_rate, self.out_rate = in_rate, rate
        self._sink = _Sink()
        self._container = av.open(self._sink, mode="w", format=muxer)
        self._stream = self._container.add_stream(codec, rate=rate, layout="mono")
        if bit_rate or default_bit_rate:
            self._stream.bit_rate = bit_rate or default_bit_rate
        self._stream.time_base = Fraction(1, rate)
        # the encoder's sample format and frame size; the resampler converts rate and format and re-frames
        codec_ctx = self._stream.codec_context
        self._resampler = av.AudioResampler(format=codec_ctx.format.name, layout="mono", rate=rate,
                                            frame_size=codec_ctx.frame_size or None)
        self._num_samples_in = 0
        self.is_finished = False

    def push(self, pcm: np.ndarray) -> bytes:
        if self.is_finished:
            raise RuntimeError("push after finish")
        if len(pcm):
            frame = _mono_frame(pcm, self.in_rate, self._num_samples_in)
            self._num_samples_in += len(pcm)
            self._encode(self._resampler.resample(frame))
        return self._sink.take()

    def finish(self) -> bytes:
        if not self.is_finished:
            self.is_finished = True
            self._encode(self._resampler.resample(None))  # the resampler's tail, then the encoder's
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        return self._sink.take()

    def _encode(self, frames) -> None:
        for frame in frames:
            frame.pts = None  # let the encoder number them in its own time base (no gaps, no reordering)
            for packet in self._stream.encode(frame):
                self._container.mux(packet)


def atempo_factors(speed: float) -> list[float]:
    """`speed` as a product of factors atempo takes; each as close to 1 as possible (WSOLA quality)."""
    if not 0.25 <= speed <= 4.0:
        raise ValueError(f"speed must be in [0.25, 4.0], got {speed!r}")
    factors = []
    while speed < 0.5:
        factors.append(0.5)
        speed /= 0.5
    factors.append(speed)
    return factors


class TimeStretcher:
    """Tempo change by `speed` (2.0 = twice as fast, half as long), pitch kept; float32 mono in and out."""

    def __init__(self, sample_rate: int, speed: float) -> None:
        _require_av()
        self.sample_rate, self.speed = sample_rate, speed
        self._graph = av.filter.Graph()
        src = self._graph.add_abuffer(format="flt", sample_rate=sample_rate, layout="mono",
                                      time_base=Fraction(1, sample_rate))
        node = src
        for factor in atempo_factors(speed):
            nxt = self._graph.add("atempo", f"{factor:.6f}")
            node.link_to(nxt)
            node = nxt
        fmt = self._graph.add("aformat", "sample_fmts=flt:channel_layouts=mono")
        node.link_to(fmt)
        sink = self._graph.add("abuffersink")
        fmt.link_to(sink)
        self._graph.configure()
        self._pts = 0
        self.is_finished = False

    def push(self, pcm: np.ndarray) -> np.ndarray:
        if self.is_finished:
            raise RuntimeError("push after finish")
        if not len(pcm):
            return np.zeros(0, np.float32)
        frame = _mono_frame(pcm, self.sample_rate, self._pts)
        self._pts += len(pcm)
        self._graph.push(frame)
        return self._pull()

    def finish(self) -> np.ndarray:
        if self.is_finished:
            return np.zeros(0, np.float32)
        self.is_finished = True
        self._graph.push(None)
        return self._pull()

    def _pull(self) -> np.ndarray:
        out = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, av.EOFError):
                break
            out.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(out).astype(np.float32, copy=False) if out else np.zeros(0, np.float32)
