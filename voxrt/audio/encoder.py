"""One stream's path from model PCM to wire frames: resample -> frame -> encode.

The gateway pushes float32 chunks at the model's rate as the engine delivers them and sends each
returned bytes object as one frame of exactly `frame_ms` at the wire rate; `finish()` at the end of the
utterance drains the resampler and the framer. `num_samples_out` counts real (unpadded) output samples,
so `num_samples_out * 1000 / out_rate` is the audio sent so far in ms, the playback clock's input.

Opus at the model's rate (`opus_rate="auto"`, the default): an Opus packet has no sample rate of its own
(RFC 6716 §2: the decoder picks its output rate, and a 20 ms packet decodes to 960 samples at 48 kHz whatever
the encoder was fed), and libopus takes 8, 12, 16, 24 or 48 kHz input. So when the model's rate is one of
those, below the wire rate and dividing it (Qwen3-TTS's 24 kHz under a 48 kHz Opus wire), libopus is fed
the model's samples as they are: no resampler (libsoxr's ~3.5 us a frame and its ~20 ms of held audio),
and libopus codes the band the model has (up to 12 kHz at 24 kHz) instead of an empty one above it, ~9%
less libopus a frame on the gateway benchmark's signal (bench/results/2026-12-05-gateway-13/). The bitrate
stays libopus's default for the wire rate (`opus.default_bitrate`), which left alone would halve with the
input rate: the decoded audio is as close to the model's as through the resampler (tests/audio/
test_opus_rate.py). The counts stay at the wire rate (`num_samples_out`, `num_padding_samples`,
`lookahead_samples`: the Ogg pre-skip is the same 312 samples at 48 kHz). `opus_rate="wire"` resamples to
the wire rate first, as before; so does any other model rate (22.05 or 44.1 kHz).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from voxrt.audio.formats import (
    check_codec,
    check_frame_ms,
    check_input_rate,
    check_sample_rate,
    frame_samples,
)
from voxrt.audio.framer import Framer
from voxrt.audio.g711 import alaw_encode, mulaw_encode
from voxrt.audio.opus import OPUS_INPUT_RATES, OpusEncoder, default_bitrate
from voxrt.audio.pcm import float_to_int16, pcm16_encode
from voxrt.audio.resample import StreamResampler

OPUS_RATES: tuple[str, ...] = ("auto", "wire")  # what libopus is fed: the model's rate where it can be, or the wire's


def opus_codec_rate(in_rate: int, out_rate: int, opus_rate: str = "auto") -> int:
    """The rate libopus codes a stream at (the module docstring): the model's rate when `opus_rate` is "auto"
    and that rate is an Opus input rate below the wire rate and dividing it, else the wire rate."""
    if opus_rate not in OPUS_RATES:
        raise ValueError(f"opus_rate must be one of {list(OPUS_RATES)} (got {opus_rate!r})")
    if opus_rate == "auto" and in_rate in OPUS_INPUT_RATES and in_rate < out_rate and out_rate % in_rate == 0:
        return in_rate
    return out_rate


class StreamEncoder:
    """Encodes one mono stream into `codec` frames of `frame_ms` at `out_rate`.

    The last frame: Opus needs whole frames (RFC 6716 §2.1.4 frame sizes), so it is padded with silence
    (`num_padding_samples` says how much, for Ogg end trimming, RFC 7845 §4.4); PCM, mu-law and A-law
    frames are sent shorter instead, since a short raw frame is still valid and padding would only add
    silence the listener must sit through.
    """

    def __init__(self, codec: str, in_rate: int, out_rate: int, frame_ms: int, *, opus_signal: str = "auto",
                 opus_rate: str = "auto") -> None:
        self.codec = check_codec(codec)
        self.in_rate = check_input_rate(in_rate)
        self.out_rate = check_sample_rate(out_rate, "output sample rate")
        self._frame_ms = check_frame_ms(frame_ms)
        self._samples_per_frame = frame_samples(self.out_rate, self._frame_ms)
        # the rate frames are cut and coded at: the wire's, or for Opus the model's (the module docstring)
        codec_rate = opus_codec_rate(self.in_rate, self.out_rate, opus_rate) if self.codec == "opus" else self.out_rate
        self.codec_rate = codec_rate
        self._out_per_codec_sample = self.out_rate // codec_rate  # exact: codec_rate divides out_rate
        self._resampler = StreamResampler(self.in_rate, codec_rate)
        self._opus: OpusEncoder | None = None
        if self.codec == "opus":
            bitrate = None if codec_rate == self.out_rate else default_bitrate(self.out_rate, self._frame_ms)
            self._opus = OpusEncoder(codec_rate, self._frame_ms, bitrate=bitrate, signal=opus_signal)
        # Opus frames from `split` are 16-bit PCM already (converted once a chunk, `_convert`), which libopus
        # takes as they are; the PCM codecs convert per frame in their own encoders
        self._framer = Framer(frame_samples(codec_rate, self._frame_ms),
                              np.int16 if self._opus is not None else np.float32)
        self._encode_frame: Callable[[np.ndarray], bytes] = {
            "opus": None if self._opus is None else self._opus.encode_int16,
            "pcm16": pcm16_encode,
            "mulaw": mulaw_encode,
            "alaw": alaw_encode,
        }[self.codec]
        self._num_samples_out = 0
        self._num_frames_out = 0
        self._num_padding_samples = 0
        self._is_finished = False

    @property
    def frame_ms(self) -> int:
        return self._frame_ms

    @property
    def samples_per_frame(self) -> int:
        """Output samples in one full frame (at out_rate)."""
        return self._samples_per_frame

    @property
    def num_samples_out(self) -> int:
        """Output samples (at out_rate) encoded so far, Opus padding excluded."""
        return self._num_samples_out * self._out_per_codec_sample

    @property
    def num_frames_out(self) -> int:
        return self._num_frames_out

    @property
    def num_padding_samples(self) -> int:
        """Silence appended to the last Opus frame by `finish()`, at out_rate (0 before it, and always 0 for PCM)."""
        return self._num_padding_samples * self._out_per_codec_sample

    @property
    def lookahead_samples(self) -> int:
        """The codec's delay at out_rate (Opus: the encoder lookahead, which Ogg calls pre-skip once
        converted to 48 kHz; 0 for the PCM codecs)."""
        return 0 if self._opus is None else self._opus.lookahead_samples * self._out_per_codec_sample

    @property
    def held_ms(self) -> float:
        """Audio pushed in but not yet out as frames: inside the resampler's filter, and the partial frame. It
        comes out only with the next push (or `finish`)."""
        held = self._resampler.delay_samples + self._framer.num_pending_samples
        return held * 1000 / self.codec_rate

    @property
    def is_finished(self) -> bool:
        return self._is_finished

    def push(self, pcm: np.ndarray) -> list[bytes]:
        """float32 mono at in_rate -> the frames completed so far (often none for a small chunk)."""
        return [self.encode(frame) for frame in self.split(pcm)]

    def finish(self) -> list[bytes]:
        """The remaining frames: the resampler's tail and the last partial frame. [] when nothing remains.
        The encoder is then finished: a new stream needs a new StreamEncoder (the Opus state, the
        resampler's filter and the counters all belong to one stream)."""
        return [self.encode(frame) for frame in self.split_finish()]

    # The same two steps apart, for a caller that encodes each frame only when it is about to send it (the
    # gateway: a 25-frame chunk is 100 Opus frames, ~33 ms of libopus at once if encoded on arrival).
    # `split` / `split_finish` resample and cut (and count the samples); `encode` codes one frame, in order.

    def split(self, pcm: np.ndarray) -> list[np.ndarray]:
        """float32 mono at in_rate -> the frames completed so far, not yet encoded, at `codec_rate` (Opus: int16
        PCM, `pcm.float_to_int16` of the resampled audio; the PCM codecs: float32 at the wire rate)."""
        self._check_open("push")
        return self._count(self._framer.push(self._convert(self._resampler.process(pcm))))

    def split_finish(self) -> list[np.ndarray]:
        """`finish()` without encoding: the remaining frames, the last one padded with silence for Opus."""
        self._check_open("finish")
        self._is_finished = True
        frames = self._count(self._framer.push(self._convert(self._resampler.flush())))
        tail = self._framer.finish()
        if tail is not None:
            if self._opus is not None:
                codec_frame = self._framer.samples_per_frame
                self._num_padding_samples = codec_frame - tail.shape[0]
                padded = np.zeros(codec_frame, dtype=np.int16)
                padded[: tail.shape[0]] = tail
                frames.append(padded)
                self._num_samples_out += tail.shape[0]
                self._num_frames_out += 1
            else:
                frames.extend(self._count([tail]))
        return frames

    def encode(self, frame: np.ndarray) -> bytes:
        """One frame from `split` / `split_finish` -> its wire bytes. Opus is stateful: encode in order. (For Opus,
        int16 frames go to libopus as they are; anything else takes `OpusEncoder.encode`'s checks.)"""
        return self._encode_frame(frame)

    def _convert(self, samples: np.ndarray) -> np.ndarray:
        """Opus: the chunk as 16-bit PCM (`float_to_int16`: clipped to [-1, 1], NaN made silence, rounded),
        once for all its frames. The resampler's fresh output is the scratch array; without a resampler its
        output is the caller's array, left untouched. The PCM codecs convert in their own encoders."""
        if self._opus is None:
            return samples
        return float_to_int16(samples, in_place=not self._resampler.is_identity)

    def _count(self, frames: list[np.ndarray]) -> list[np.ndarray]:
        self._num_samples_out += sum(frame.shape[0] for frame in frames)
        self._num_frames_out += len(frames)
        return frames

    def _check_open(self, action: str) -> None:
        if self._is_finished:
            raise RuntimeError(f"cannot {action}: the StreamEncoder is finished (expected open); create a new one")
