"""Gateway configuration: frozen, validated once."""

from __future__ import annotations

from dataclasses import dataclass, field

from voxrt.gateway.compat.aliases import Aliases
from voxrt.protocol.config import Limits


@dataclass(frozen=True)
class GatewayConfig:
    api_keys: tuple[str, ...] = ()
    token_secret: str | None = None  # None: a random secret per process (tokens die with it)
    token_ttl_s: float = 300.0  # default lifetime of a minted browser token
    max_token_ttl_s: float = 3600.0
    # Admission (gateway/admission.py): slots shared by realtime sessions and HTTP syntheses; a bounded queue
    # waits up to queue_timeout_s for one; past it: 4029 / HTTP 429 with retry_after_ms.
    max_sessions: int = 256
    max_queue: int = 64
    queue_timeout_s: float = 10.0
    # Per-session message rate (token bucket, bursts of twice the rate): past it the reader waits.
    max_messages_per_s: float = 200.0
    # Origins whose browser pages may open a WebSocket besides the server's own ("*": any). Requests without an
    # Origin header (not browsers) are not affected.
    allowed_origins: tuple[str, ...] = ()
    # HTTP: request bodies over this are refused (413); a body that does not arrive within the timeout gets 408.
    max_http_body_bytes: int = 1 << 20
    http_body_timeout_s: float = 30.0
    # Engine supervision (voxrt/engine/supervisor.py): an engine that answers no heartbeat for this long is
    # restarted, as is one that died.
    engine_heartbeat_timeout_s: float = 30.0
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
    # Audio out: worker threads that encode each chunk's frames as it arrives, beside the event loop (libopus
    # releases the GIL; gateway/encode_worker.py); 0 encodes a few frames ahead on the loop (audio_out.py). `opus_signal`: libopus's mode hint ("auto" lets its
    # speech/music detector choose; "music" keeps CELT, ~4x cheaper per frame here; voxrt/audio/opus.py).
    encode_threads: int = 0
    opus_signal: str = "auto"
    # `opus_rate`: what libopus is fed: "auto" the model's own samples where its rate is an Opus input rate below
    # the wire rate (24 kHz under 48: no resampler, ~9% less libopus a frame, the same bitrate); "wire" resampled to
    # the wire rate first (voxrt/audio/encoder.py). The packets decode at 48 kHz either way.
    opus_rate: str = "auto"
    # Once its engine client is connected, the process collects once and freezes what survived (voxrt/gcpause.py):
    # a later full collection, which holds the event loop and every session's frames, then walks only what
    # sessions allocate, not start-up's modules; and it raises the young generation's threshold, so young
    # collections (each holds the loop too) come ~20x less often. `voxrt serve` sets it; off for an app built in a process that
    # hosts other work (tests build many apps in one process: a freeze there would keep their garbage for good).
    settle_heap: bool = False
    # Model and voice names of other APIs (OpenAI, ElevenLabs, Cartesia) -> the served ones (compat/aliases.py)
    aliases: Aliases = field(default_factory=Aliases)
    # SIGTERM drains (gateway/drain.py): running contexts get this long to finish before their sessions are
    # closed with `server_shutting_down`; 0 closes them at once.
    drain_grace_s: float = 30.0
    # Engine replicas (`--dp-size`, voxrt/engine/replicas.py): this many engine processes (replica i on cuda:i, or
    # all on the CPU), a new context going to the one with the most SLO headroom. 1: the one engine, as before.
    dp_size: int = 1
    # The event loop of each gateway process (`--loop`, gateway/event_loop.py): "auto" (uvloop where it can be
    # imported, else the standard library's), "uvloop" or "asyncio".
    loop: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.dp_size, int) or self.dp_size < 1:
            raise ValueError(f"dp_size must be an integer >= 1, got {self.dp_size!r}")
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        if self.max_queue < 0 or self.queue_timeout_s < 0:
            raise ValueError("max_queue and queue_timeout_s must be >= 0")
        if not self.max_messages_per_s > 0:
            raise ValueError(f"max_messages_per_s must be > 0, got {self.max_messages_per_s}")
        if self.max_http_body_bytes < 1024 or not self.http_body_timeout_s > 0:
            raise ValueError("max_http_body_bytes must be >= 1024 and http_body_timeout_s > 0")
        if not self.engine_heartbeat_timeout_s > 1:
            raise ValueError("engine_heartbeat_timeout_s must be > 1")
        if not (0 < self.token_ttl_s <= self.max_token_ttl_s):
            raise ValueError("need 0 < token_ttl_s <= max_token_ttl_s")
        if self.encode_threads < 0:
            raise ValueError(f"encode_threads must be >= 0, got {self.encode_threads}")
        if not self.drain_grace_s >= 0:
            raise ValueError(f"drain_grace_s must be >= 0, got {self.drain_grace_s}")
        if self.opus_signal not in ("auto", "voice", "music"):
            raise ValueError(f"opus_signal must be auto, voice or music, got {self.opus_signal!r}")
        if self.opus_rate not in ("auto", "wire"):
            raise ValueError(f"opus_rate must be auto or wire, got {self.opus_rate!r}")
        if self.loop not in ("auto", "uvloop", "asyncio"):
            raise ValueError(f"loop must be auto, uvloop or asyncio, got {self.loop!r}")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)
