"""`voxrt serve`: the engine process and the gateway under uvicorn; prints the URL once ready."""

from __future__ import annotations

import uvicorn

from voxrt.engine.messages import EngineConfig
from voxrt.gateway.app import build_app
from voxrt.gateway.config import GatewayConfig


class _Server(uvicorn.Server):
    is_quiet = False  # a --workers worker: the parent prints the one ready line

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.is_quiet:
            cfg = self.config
            host = "localhost" if cfg.host in ("127.0.0.1", "0.0.0.0") else cfg.host
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else cfg.port
            print(f"voxrt ready: model {self.config.app.state.voxrt.engine.info.name}\n"
                  f"  http://{host}:{port}/v1/audio/speech   ws://{host}:{port}/v1/realtime", flush=True)


def make_server(gateway: GatewayConfig, engine: EngineConfig | None, host: str, port: int, log_level: str = "info",
                per_message_deflate: bool = False, engine_address: tuple[str, bytes] | None = None,
                quiet: bool = False) -> uvicorn.Server:
    app = build_app(gateway, engine, engine_address)
    # the protocol's own limit is enforced by the session (error, then close 1009), so the transport's must be larger
    ws_max = max(16 * 1024 * 1024, 2 * gateway.limits.max_message_bytes)
    # No permessage-deflate: clients (browsers, websockets) offer it by default, and deflating every Opus or
    # PCM frame costs CPU per frame for audio that does not compress; the JSON messages are small.
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, ws="websockets-sansio",
                            ws_max_size=ws_max, ws_per_message_deflate=per_message_deflate, lifespan="on",
                            timeout_graceful_shutdown=5)
    server = _Server(config)
    server.is_quiet = quiet
    return server
