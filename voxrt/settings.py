"""Environment knobs, in one typed place, all with the `VOXRT_` prefix. Read once, at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvSettings:
    api_keys: tuple[str, ...]  # VOXRT_API_KEYS: comma-separated keys; empty: no auth (binds 127.0.0.1)
    token_secret: str | None  # VOXRT_TOKEN_SECRET: signs browser tokens (default: random per process)
    host: str | None  # VOXRT_HOST
    port: int | None  # VOXRT_PORT
    # VOXRT_ENGINE_AUTHKEY: hex authkey of the engine's socket (`voxrt serve --engine-socket`, `voxrt loadgen
    # --engine-socket`); default: a random one per `voxrt serve`
    engine_authkey: bytes | None = None
    # VOXRT_VOICE_ALIASES: "name=voice,name=voice" (other APIs' voice names or ids -> served voices)
    voice_aliases: tuple[str, ...] = ()


def read_env(environ: dict[str, str] | None = None) -> EnvSettings:
    env = os.environ if environ is None else environ
    keys = tuple(k.strip() for k in env.get("VOXRT_API_KEYS", "").split(",") if k.strip())
    port = env.get("VOXRT_PORT")
    if port is not None and not port.isdigit():
        raise ValueError(f"VOXRT_PORT must be a port number, got {port!r}")
    authkey = env.get("VOXRT_ENGINE_AUTHKEY") or None
    try:
        engine_authkey = bytes.fromhex(authkey) if authkey else None
    except ValueError:
        raise ValueError("VOXRT_ENGINE_AUTHKEY must be hex digits") from None
    return EnvSettings(api_keys=keys, token_secret=env.get("VOXRT_TOKEN_SECRET") or None,
                       host=env.get("VOXRT_HOST") or None, port=int(port) if port else None,
                       engine_authkey=engine_authkey,
                       voice_aliases=tuple(a.strip() for a in env.get("VOXRT_VOICE_ALIASES", "").split(",") if a.strip()))


@dataclass(frozen=True)
class LogSettings:
    level: str | None  # VOXRT_LOG_LEVEL: debug, info, warning or error (set by the CLI for its child processes)
    json_logs: bool  # VOXRT_LOG_JSON=1: JSON lines


def read_log_env(environ: dict[str, str] | None = None) -> LogSettings:
    env = os.environ if environ is None else environ
    level = (env.get("VOXRT_LOG_LEVEL") or "").strip().lower() or None
    if level not in (None, "debug", "info", "warning", "error"):
        level = "info"  # a child process never dies of a bad knob; the CLI validated what it exported
    return LogSettings(level=level, json_logs=env.get("VOXRT_LOG_JSON", "0").strip() in ("1", "true", "yes"))
