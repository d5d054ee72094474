"""Opus (RFC 6716) through libopus, one mono frame per call, via the `opuslib` ctypes binding.

Frames go to libopus as 16-bit PCM (`opus_encode`), converted by `pcm.float_to_int16` (clipped to [-1, 1],
NaN made silence, rounded to nearest at full scale 32767: the rules of every other codec here), the way the
gateway benchmark's floor feeds libopus alone. `StreamEncoder` converts each chunk once, as it is cut into
frames, and hands `encode_int16` the 16-bit frames. libopus's float entry (`opus_encode_float`, still there as
`encode_clean`) did ~4.4 us a frame more work than the 16-bit entry on the benchmark's signal (it codes for 24
bits of depth, 16 for the other): bench/results/2026-12-05-gateway-11/enc_micro.txt, and round 12's grids
(bench/results/2026-12-05-gateway-12/). The rounding is below anything the codec keeps (Opus at ~50 kb/s is
far from 16-bit transparent). The call goes to libopus through opuslib's ctypes prototype with one reused
input and output buffer per encoder, skipping opuslib's per-call cast and copies; opuslib still creates the
encoder and sets its options.

Settings: application "audio" by default (libopus picks SILK, CELT or hybrid per frame and favours
fidelity; "voip" favours intelligibility at low bitrates, "restricted_lowdelay" is CELT only with a
2.5 ms instead of 6.5 ms lookahead). Bitrate, VBR and complexity stay at libopus's defaults unless given
(libopus 1.3/1.4 mono: ~11 kb/s at 8 kHz up to ~51 kb/s at 48 kHz, complexity 9; ~0.1 ms of CPU per 20 ms
frame measured here, so one core encodes a few hundred realtime streams).
"""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from voxrt.audio.formats import check_frame_ms, check_sample_rate, frame_samples, is_integer
from voxrt.audio.pcm import as_mono_float32, float_to_int16, int16_to_float

try:
    import opuslib
    import opuslib.api.encoder as _opus_encoder_api
except Exception as error:  # opuslib raises a bare Exception at import when libopus is not found
    raise ImportError(
        "voxrt.audio needs the Opus shared library (libopus.so.0), which opuslib could not load: "
        "install the system package libopus0 (Debian/Ubuntu: apt-get install libopus0)"
        f" [{type(error).__name__}: {error}]"
    ) from error

APPLICATIONS: tuple[str, ...] = ("audio", "voip", "restricted_lowdelay")
# OPUS_SET_SIGNAL (opus_defines.h): a hint for libopus's mode decision. "auto" leaves it to its speech/music
# detector, which for speech at 48 kHz usually picks the SILK-based hybrid mode: measured here on the
# gateway benchmark's speech-like signal, ~330 us per 20 ms frame against ~87 us in CELT ("music"), at the
# same ~45 kb/s (bench/results/2026-12-01-gateway-bench/README.md).
SIGNALS: dict[str, int] = {"auto": -1000, "voice": 3001, "music": 3002}

# The rates libopus takes as input (opus_encoder_create); a packet decodes at any of them (RFC 6716 §2).
OPUS_INPUT_RATES: tuple[int, ...] = (8000, 12000, 16000, 24000, 48000)

# RFC 6716 §3.2.1: one packet codes at most 120 ms; 1275 bytes per frame at most. 4000 is libopus's
# recommended output buffer (opus_demo) and bounds any packet of up to 60 ms.
_MAX_PACKET_BYTES = 4000

_ONE, _MINUS_ONE = np.float32(1.0), np.float32(-1.0)
_FLOAT32 = np.dtype(np.float32)
_INT16 = np.dtype(np.int16)

# A decoded packet is at most 120 ms (RFC 6716 §3.2.1); at 48 kHz that is 5760 samples.
_MAX_DECODE_MS = 120


@functools.lru_cache(maxsize=None)
def default_bitrate(sample_rate: int, frame_ms: int) -> int:
    """The bitrate libopus picks on its own (OPUS_AUTO) for mono `frame_ms` frames at `sample_rate`: 51 kb/s at
    48 kHz and 20 ms with libopus 1.3-1.5. Read from libopus itself once per pair (its rule, which also depends
    on how it splits longer frames, is its own): an encoder codes one silent frame and reports its bitrate."""
    encoder = OpusEncoder(sample_rate, frame_ms)
    encoder.encode_int16(np.zeros(encoder.frame_samples, dtype=np.int16))
    return encoder.bitrate


class OpusEncoder:
    """Encodes mono frames of exactly `frame_samples` samples (float32, or int16 PCM) into one Opus packet each."""

    def __init__(
        self,
        sample_rate: int,
        frame_ms: int,
        application: str = "audio",
        bitrate: int | None = None,
        *,
        complexity: int | None = None,
        signal: str = "auto",
    ) -> None:
        if not (is_integer(sample_rate) and sample_rate in OPUS_INPUT_RATES):
            raise ValueError(f"Opus sample rate must be one of {list(OPUS_INPUT_RATES)} Hz (got {sample_rate!r})")
        self.sample_rate = int(sample_rate)
        self.frame_ms = check_frame_ms(frame_ms)
        if application not in APPLICATIONS:
            raise ValueError(f"Opus application must be one of {list(APPLICATIONS)} (got {application!r})")
        # RFC 6716 §2.1.1: 6 kb/s .. 510 kb/s
        if bitrate is not None and not (is_integer(bitrate) and 6000 <= bitrate <= 510_000):
            raise ValueError(f"Opus bitrate must be None (libopus default) or 6000..510000 b/s (got {bitrate!r})")
        if complexity is not None and not (is_integer(complexity) and 0 <= complexity <= 10):
            raise ValueError(f"Opus complexity must be None (libopus default) or 0..10 (got {complexity!r})")
        if signal not in SIGNALS:
            raise ValueError(f"Opus signal must be one of {list(SIGNALS)} (got {signal!r})")
        self.application = application
        self.signal = signal
        self.frame_samples = frame_samples(self.sample_rate, self.frame_ms)
        self._encoder = opuslib.Encoder(self.sample_rate, 1, application)
        if bitrate is not None:
            self._encoder.bitrate = int(bitrate)
        if complexity is not None:
            self._encoder.complexity = int(complexity)
        if signal != "auto":
            self._encoder.signal = SIGNALS[signal]
        # reused on every call: the input (16-bit, and float32 for `encode_clean`) and the packet (ctypes
        # releases the GIL during the call)
        self._input16 = np.zeros(self.frame_samples, dtype=np.int16)
        self._input16_ptr = self._input16.ctypes.data_as(ctypes.POINTER(ctypes.c_int16))
        self._input = np.zeros(self.frame_samples, dtype=np.float32)
        self._input_ptr = self._input.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._packet = ctypes.create_string_buffer(_MAX_PACKET_BYTES)

    @property
    def bitrate(self) -> int:
        return self._encoder.bitrate

    @property
    def lookahead_samples(self) -> int:
        """The encoder's delay at its own rate: decoded audio lags the input by this much. Times
        48000/sample_rate, it is the Ogg Opus pre-skip (RFC 7845 §4.2): 312 at 48 kHz for "audio"."""
        return self._encoder.lookahead

    def encode(self, frame: np.ndarray) -> bytes:
        """One frame of mono samples -> one Opus packet: float32 (or anything `as_mono_float32` takes), converted
        to 16-bit PCM by `pcm.float_to_int16`, or int16 PCM as it is."""
        if isinstance(frame, np.ndarray) and frame.dtype == _INT16:
            samples = frame
            if samples.ndim != 1:
                raise ValueError(f"expected mono PCM as a 1-D array of samples (got shape {samples.shape})")
        else:
            samples = as_mono_float32(frame)
        self._check_length(samples)
        np.copyto(self._input16, samples if samples.dtype == _INT16 else float_to_int16(samples))
        return self._encode_input16()

    def encode_int16(self, frame: np.ndarray) -> bytes:
        """`encode` for an int16 frame of exactly `frame_samples` (`StreamEncoder.split`'s Opus frames, converted
        once a chunk): one copy into the reused input and the call; anything else takes `encode`'s checks and
        conversion (and its errors)."""
        if type(frame) is not np.ndarray or frame.dtype != _INT16 or frame.shape != self._input16.shape:
            return self.encode(frame)
        np.copyto(self._input16, frame)
        return self._encode_input16()

    def encode_clean(self, frame: np.ndarray) -> bytes:
        """libopus's float entry (`opus_encode_float`), for a float32 frame already clipped to [-1, 1] without NaN
        (`clean_float`): one copy into the reused input, no per-frame clipping. The gateway's path before
        round 12 (bench/results/2026-12-05-gateway-12/); `encode` and `StreamEncoder` use the 16-bit entry."""
        if type(frame) is not np.ndarray or frame.shape != self._input.shape or frame.dtype != _FLOAT32:
            frame = self._checked(frame)  # the checks (and their errors) only off the common path
        np.copyto(self._input, frame)
        num_bytes = _opus_encoder_api.libopus_encode_float(self._encoder.encoder_state, self._input_ptr,
                                                            self.frame_samples, self._packet, _MAX_PACKET_BYTES)
        if num_bytes < 0:
            raise opuslib.OpusError(num_bytes)
        return ctypes.string_at(self._packet, num_bytes)

    def _checked(self, frame: np.ndarray) -> np.ndarray:
        samples = as_mono_float32(frame)
        self._check_length(samples)
        return samples

    def _check_length(self, samples: np.ndarray) -> None:
        if samples.shape[0] != self.frame_samples:
            raise ValueError(
                f"an Opus frame at {self.sample_rate} Hz and {self.frame_ms} ms holds {self.frame_samples} "
                f"samples (got {samples.shape[0]}); pad the last frame with silence"
            )

    def _encode_input16(self) -> bytes:
        num_bytes = _opus_encoder_api.libopus_encode(self._encoder.encoder_state, self._input16_ptr,
                                                     self.frame_samples, self._packet, _MAX_PACKET_BYTES)
        if num_bytes < 0:
            raise opuslib.OpusError(num_bytes)
        return ctypes.string_at(self._packet, num_bytes)


def clean_float(samples: np.ndarray, *, in_place: bool) -> np.ndarray:
    """float32 samples clipped to [-1, 1] with NaN made silence: the rules of `pcm.float_to_int16` (+-inf clip
    to full scale), once over a whole chunk instead of per frame. A dot product of clipped samples is NaN only
    if one is NaN, and costs less than isnan or sum."""
    out = np.clip(samples, _MINUS_ONE, _ONE, out=samples if in_place else None)
    if out.shape[0] and math.isnan(out.dot(out)):
        np.nan_to_num(out, copy=False, nan=0.0)
    return out


class OpusDecoder:
    """Decodes Opus packets (any mode, any frame size up to 120 ms) to mono float32."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = check_sample_rate(sample_rate, "Opus sample rate")
        self._decoder = opuslib.Decoder(self.sample_rate, 1)
        self._max_samples = self.sample_rate * _MAX_DECODE_MS // 1000

    def decode(self, packet: bytes, frame_samples: int) -> np.ndarray:
        """One packet -> its samples. `frame_samples` is the room given to libopus: at least the packet's
        duration (else libopus fails with OPUS_BUFFER_TOO_SMALL). An empty packet means a lost packet:
        libopus conceals `frame_samples` samples (packet loss concealment)."""
        if not (is_integer(frame_samples) and 0 < frame_samples <= self._max_samples):
            raise ValueError(
                f"frame_samples must be in 1..{self._max_samples} at {self.sample_rate} Hz (got {frame_samples!r})"
            )
        try:
            pcm16 = self._decoder.decode(bytes(packet), int(frame_samples))
        except opuslib.OpusError as error:  # a corrupt packet or too little room: the caller's input
            raise ValueError(f"Opus decode failed: {error}") from error
        return int16_to_float(np.frombuffer(pcm16, dtype=np.int16))

