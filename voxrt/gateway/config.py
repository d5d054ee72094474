"""Gateway configuration: frozen, validated once."""

from __future__ import annotations

from dataclasses import dataclass, field

from voxrt.protocol.config import Limits


@dataclass(frozen=True)
class GatewayConfig:
    api_keys: tuple[str, ...] = ()
    token_secret: str | None = None  # None: a random secret per process (tokens die with it)
    token_ttl_s: float = 300.0  # default lifetime of a minted browser token
    max_token_ttl_s: float = 3600.0
    max_sessions: int = 256  # concurrent WebSocket sessions; more are refused with 4029
    limits: Limits = field(default_factory=Limits)
    max_http_input_chars: int = 20000  # /v1/audio/speech and /generate
    # Honour the `num_frames` benchmark extension of `text` (pinned output length). Off by default: it lets a
    # client ask for audio out of proportion to its text; `voxrt serve --allow-pinned-lengths` turns it on.
    allow_pinned_lengths: bool = False
    # Measurement (`voxrt serve --stats-file / --trace-file`): every second this gateway process writes its
    # cumulative frame-lateness and event-loop-lag histograms and CPU time to `<stats_path>.<pid>.json`; every
    # finished context appends its chunks' path timestamps to `<trace_path>.<pid>.jsonl`. None: off.
    stats_path: str | None = None
    trace_path: str | None = None
    # Audio out: worker threads that encode each chunk beside the event loop (libopus releases the GIL); 0
    # encodes each frame on the loop just before it is sent. `opus_signal`: libopus's mode hint ("auto" lets its
    # speech/music detector choose; "music" keeps CELT, ~4x cheaper per frame here; voxrt/audio/opus.py).
    encode_threads: int = 0
    opus_signal: str = "auto"
    # SIGTERM drains (gateway/drain.py): running contexts get this long to finish before their sessions are
    # closed with `server_shutting_down`; 0 closes them at once.
    drain_grace_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        if not (0 < self.token_ttl_s <= self.max_token_ttl_s):
            raise ValueError("need 0 < token_ttl_s <= max_token_ttl_s")
        if self.encode_threads < 0:
            raise ValueError(f"encode_threads must be >= 0, got {self.encode_threads}")
        if not self.drain_grace_s >= 0:
            raise ValueError(f"drain_grace_s must be >= 0, got {self.drain_grace_s}")
        if self.opus_signal not in ("auto", "voice", "music"):
            raise ValueError(f"opus_signal must be auto, voice or music, got {self.opus_signal!r}")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)
