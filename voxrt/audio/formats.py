"""The wire formats the gateway can send: codec names, output sample rates and frame durations.

One place lists what is allowed, so the encoder, the Opus wrapper and the gateway's request validation
agree, and every rejection names the allowed values.
"""

from __future__ import annotations

import numbers

# Opus codes these rates natively (RFC 6716 §2: 8/12/16/24/48 kHz; 12 kHz is left out because no client
# asks for it). The same set serves the PCM codecs: 8 kHz for telephony (G.711), 16/24/48 kHz for the rest.
SAMPLE_RATES_HZ: tuple[int, ...] = (8000, 16000, 24000, 48000)

# Opus frame durations (RFC 6716 §2.1.4 allows 2.5/5/10/20/40/60 ms; below 10 ms the encoder cannot use
# its LPC/hybrid modes, so speech would cost more bits). The PCM codecs use the same set so that every
# codec paces identically.
FRAME_MS: tuple[int, ...] = (10, 20, 40, 60)

CODECS: tuple[str, ...] = ("opus", "pcm16", "mulaw", "alaw")

# The widest input a model may produce; anything higher is a bug, not a format.
MAX_INPUT_RATE_HZ = 384_000


def check_sample_rate(sample_rate_hz: object, what: str = "sample rate") -> int:
    """Returns the rate if it is one of SAMPLE_RATES_HZ, else raises ValueError naming the allowed ones."""
    if not is_integer(sample_rate_hz) or sample_rate_hz not in SAMPLE_RATES_HZ:
        raise ValueError(f"{what} must be one of {list(SAMPLE_RATES_HZ)} Hz (got {sample_rate_hz!r})")
    return int(sample_rate_hz)


def check_input_rate(sample_rate_hz: object) -> int:
    """Model output rates vary (22050, 24000, 44100 ...): any positive integer up to MAX_INPUT_RATE_HZ."""
    if not is_integer(sample_rate_hz) or not (0 < sample_rate_hz <= MAX_INPUT_RATE_HZ):
        raise ValueError(f"input rate must be an integer in [1, {MAX_INPUT_RATE_HZ}] Hz (got {sample_rate_hz!r})")
    return int(sample_rate_hz)


def check_frame_ms(frame_ms: object) -> int:
    if not is_integer(frame_ms) or frame_ms not in FRAME_MS:
        raise ValueError(f"frame_ms must be one of {list(FRAME_MS)} (got {frame_ms!r})")
    return int(frame_ms)


def check_codec(codec: object) -> str:
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {list(CODECS)} (got {codec!r})")
    return str(codec)


def frame_samples(sample_rate_hz: int, frame_ms: int) -> int:
    """Samples in one frame; exact for every allowed rate and duration (all rates are multiples of 1 kHz)."""
    num_samples, remainder = divmod(sample_rate_hz * frame_ms, 1000)
    assert remainder == 0, (sample_rate_hz, frame_ms)
    return num_samples


def is_integer(value: object) -> bool:
    # numbers.Integral admits numpy integers too (a rate read from an array is still a rate)
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
