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


def read_env(environ: dict[str, str] | None = None) -> EnvSettings:
    env = os.environ if environ is None else environ
    keys = tuple(k.strip() for k in env.get("VOXRT_API_KEYS", "").split(",") if k.strip())
    port = env.get("VOXRT_PORT")
    if port is not None and not port.isdigit():
        raise ValueError(f"VOXRT_PORT must be a port number, got {port!r}")
    return EnvSettings(api_keys=keys, token_secret=env.get("VOXRT_TOKEN_SECRET") or None,
                       host=env.get("VOXRT_HOST") or None, port=int(port) if port else None)
