"""Session configuration: what a client chose in `session.start`, and the server's limits.

Frozen dataclasses validated once, when built (`ValueError` for a bad value from code). The `*_from_wire`
functions merge a client's partial object over the defaults and turn a bad value into a non-fatal
`invalid_message` ProtocolError that names the field and the allowed values (protocol.md, `session.start`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from voxrt.protocol.errors import INVALID_MESSAGE, ProtocolError, clip

CODECS = ("opus", "pcm16", "mulaw", "alaw")  # pcm16 is little-endian s16
SAMPLE_RATES = (8000, 16000, 24000, 48000)  # all four are Opus rates (RFC 6716 section 2), so any pair works
FRAME_MS = (10, 20, 40, 60)  # Opus frame sizes of 10 ms and up (RFC 6716 section 2.1.4)
PACING_MODES = ("realtime", "burst")
SEGMENTATION_MODES = ("auto", "sentence", "none")
MAX_LEAD_MS = 10_000


def _allowed(name: str, value: Any, allowed: tuple) -> None:
    if type(value) is not type(allowed[0]) or value not in allowed:  # 48000.0 and True are not allowed values
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {clip(repr(value))}")


@dataclass(frozen=True)
class OutputFormat:
    codec: str = "opus"
    sample_rate: int = 48000
    frame_ms: int = 20

    def __post_init__(self) -> None:
        _allowed("codec", self.codec, CODECS)
        _allowed("sample_rate", self.sample_rate, SAMPLE_RATES)
        _allowed("frame_ms", self.frame_ms, FRAME_MS)

    @property
    def samples_per_frame(self) -> int:
        # Exact for every allowed pair: the smallest is 8000 Hz * 10 ms = 80 samples.
        return self.sample_rate * self.frame_ms // 1000

    def to_wire(self) -> dict:
        return {"codec": self.codec, "sample_rate": self.sample_rate, "frame_ms": self.frame_ms}


@dataclass(frozen=True)
class Pacing:
    mode: str = "realtime"  # realtime: send at most lead_ms ahead of the client's playback; burst: at once
    lead_ms: int = 300

    def __post_init__(self) -> None:
        _allowed("mode", self.mode, PACING_MODES)
        if isinstance(self.lead_ms, bool) or not isinstance(self.lead_ms, int) \
                or not 0 < self.lead_ms <= MAX_LEAD_MS:
            raise ValueError(f"lead_ms must be an integer in (0, {MAX_LEAD_MS}]; got {clip(repr(self.lead_ms))}")

    def to_wire(self) -> dict:
        return {"mode": self.mode, "lead_ms": self.lead_ms}


@dataclass(frozen=True)
class SessionConfig:
    """A started session's resolved choices: voice and model are names the server serves."""

    voice: str
    model: str
    output: OutputFormat
    pacing: Pacing
    segmentation: str = "auto"

    def __post_init__(self) -> None:
        _allowed("segmentation", self.segmentation, SEGMENTATION_MODES)


@dataclass(frozen=True)
class Limits:
    max_contexts: int = 8  # contexts not yet done, per session
    max_text_chars: int = 20000  # total text of one context, in characters (code points)
    max_message_bytes: int = 65536  # one client message, UTF-8 bytes
    inactivity_timeout_s: float = 60.0
    max_invalid_messages: int = 20  # invalid messages in a row before close 4400
    start_timeout_s: float = 10.0  # a connection must send session.start within this, else close 4008

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"{f.name} must be a positive number, got {value!r}")

    def to_wire(self) -> dict:
        """The limits a client can act on (max_invalid_messages and start_timeout_s stay private: they only bite
        garbage and idle sockets)."""
        return {"max_contexts": self.max_contexts, "max_text_chars": self.max_text_chars,
                "max_message_bytes": self.max_message_bytes, "inactivity_timeout_s": self.inactivity_timeout_s}


# ---- from the wire ------------------------------------------------------------------------------------------


def _invalid(field: str, message: str) -> ProtocolError:
    return ProtocolError(INVALID_MESSAGE, f"session.start: {message}", field=field, message_type="session.start")


def _wire_choice(obj: dict, prefix: str, name: str, allowed: tuple, default: Any) -> Any:
    """obj[name] if present and allowed (an integral float such as 48000.0 counts as the int), else the
    default when absent or null."""
    value = obj.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or value not in allowed or type(value) is not type(allowed[0]):
        raise _invalid(f"{prefix}.{name}", f"{prefix}.{name} must be one of "
                                            f"{', '.join(map(str, allowed))}; got {clip(repr(value))}")
    return value


def _wire_object(value: Any, name: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(name, f"{name} must be an object, got {type(value).__name__}")
    return value


def output_from_wire(value: Any, base: OutputFormat = OutputFormat()) -> OutputFormat:
    """`session.start`'s `output` merged over `base`; unknown keys are ignored (protocol.md, Connection)."""
    obj = _wire_object(value, "output")
    return replace(base, codec=_wire_choice(obj, "output", "codec", CODECS, base.codec),
                   sample_rate=_wire_choice(obj, "output", "sample_rate", SAMPLE_RATES, base.sample_rate),
                   frame_ms=_wire_choice(obj, "output", "frame_ms", FRAME_MS, base.frame_ms))


def pacing_from_wire(value: Any, base: Pacing = Pacing()) -> Pacing:
    obj = _wire_object(value, "pacing")
    mode = _wire_choice(obj, "pacing", "mode", PACING_MODES, base.mode)
    lead_ms = obj.get("lead_ms")
    if lead_ms is None:
        lead_ms = base.lead_ms
    elif isinstance(lead_ms, float) and lead_ms.is_integer():
        lead_ms = int(lead_ms)
    if isinstance(lead_ms, bool) or not isinstance(lead_ms, int) or not 0 < lead_ms <= MAX_LEAD_MS:
        raise _invalid("pacing.lead_ms", f"pacing.lead_ms must be an integer in (0, {MAX_LEAD_MS}]; "
                                         f"got {clip(repr(lead_ms))}")
    return replace(base, mode=mode, lead_ms=lead_ms)


def segmentation_from_wire(value: Any, default: str = "auto") -> str:
    if value is None:
        return default
    if not isinstance(value, str) or value not in SEGMENTATION_MODES:
        raise _invalid("segmentation", f"segmentation must be one of {', '.join(SEGMENTATION_MODES)}; "
                                       f"got {clip(repr(value))}")
    return value
