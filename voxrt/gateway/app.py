"""The Starlette app: routes, shared state, and the lifespan that starts and stops the engine process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from voxrt.engine.client import EngineClient
from voxrt.engine.messages import EngineConfig
from voxrt.engine.replicas import ReplicaSet
from voxrt.engine.supervisor import SupervisorConfig
from voxrt.gateway import http
from voxrt.gateway.admission import Admission
from voxrt.gateway.access import AccessLogMiddleware
from voxrt.gateway.auth import Authenticator
from voxrt.gateway.compat import cartesia, elevenlabs, openai_speech, twilio
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.encode_worker import EncodeWorker
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.realtime import realtime_endpoint
from voxrt.gateway.replica_metrics import ReplicaCollector
from voxrt.gateway.stats import StatsWriter, TraceWriter
from voxrt.gateway.wire import RawSendMiddleware
from voxrt.gcpause import GcPauses, raise_young_threshold, settle_heap

log = logging.getLogger("voxrt.gateway")

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@dataclass
class AppState:
    config: GatewayConfig
    engine_config: EngineConfig | None
    auth: Authenticator
    metrics: GatewayMetrics
    # one engine, or with --dp-size N a ReplicaSet (the same members; `for_context()` picks a context's replica)
    engine: EngineClient | ReplicaSet | None = None
    engine_ready: bool = False
    num_sessions: int = 0
    trace: TraceWriter | None = None  # --trace-file: each finished context's chunk timestamps
    encode_worker: EncodeWorker | None = None  # --encode-threads (encode_worker.py)
    draining: bool = False  # SIGTERM (gateway/drain.py): not ready, new sessions refused
    sessions: set = field(default_factory=set)  # the open RealtimeSessions, for the drain
    admission: Admission | None = None  # slots shared by sessions and HTTP syntheses, and their queue
    loop: asyncio.AbstractEventLoop | None = None  # the serving loop (tests count its tasks)
    gc_pauses: GcPauses | None = None  # this process's garbage collections while serving (the stats file's `gc`)

    @property
    def engine_is_ready(self) -> bool:
        """Started, and not dead or restarting (the supervisor restarts a dead engine); with replicas, at least
        one of them."""
        return self.engine_ready and self.engine is not None and self.engine.is_ready

    def can_open_session(self) -> bool:
        """Whether a new session, native or through a compat adapter, may open: fewer sessions than the slots
        plus the queue can ever serve, the engine serving, and not draining (SIGTERM)."""
        return (self.num_sessions < self.config.max_sessions + self.config.max_queue and self.engine_is_ready
                and not self.draining)


def build_app(config: GatewayConfig, engine_config: EngineConfig | None,
              engine_address: tuple[str, bytes] | list[tuple[str, bytes]] | None = None) -> Starlette:
    """`engine_address` (Unix socket path, authkey): join a running engine (`voxrt serve --workers`, see
    gateway/workers.py) instead of starting one from `engine_config`; a list of them: join those replicas
    (`--workers` with `--dp-size`)."""
    state = AppState(config=config, engine_config=engine_config,
                     auth=Authenticator(config.api_keys, config.token_secret), metrics=GatewayMetrics(),
                     admission=Admission(config.max_sessions, config.max_queue, config.queue_timeout_s))
    state.metrics.watch(state)
    state.metrics.registry.register(ReplicaCollector(state))  # per-replica series (replica_metrics.py)
    supervisor = SupervisorConfig(heartbeat_timeout_s=config.engine_heartbeat_timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        state.loop = asyncio.get_running_loop()
        if isinstance(engine_address, list):  # a worker in front of replicas: it joins every one of them
            state.engine = await ReplicaSet.connect(engine_address, supervisor=supervisor)
        elif engine_address is not None:
            state.engine = await EngineClient.connect(*engine_address, supervisor=supervisor)
        elif config.dp_size > 1:
            state.engine = await ReplicaSet.start(engine_config, config.dp_size, supervisor=supervisor)
        else:
            log.info("starting the engine: model %s", engine_config.model)
            state.engine = await EngineClient.start(engine_config, supervisor=supervisor)
        state.engine_ready = True
        if config.settle_heap:  # start-up's objects out of later collections, and rarer young ones (voxrt/gcpause.py)
            log.info("start-up heap settled: %d objects frozen out of later garbage collections; collector "
                     "thresholds %s", settle_heap(), raise_young_threshold())
        state.gc_pauses = GcPauses().install()
        state.metrics.loop_lag.start()
        stats = StatsWriter(config.stats_path, state) if config.stats_path else None
        if stats is not None:
            stats.start()
        state.trace = TraceWriter(config.trace_path) if config.trace_path else None
        if config.encode_threads:
            state.encode_worker = EncodeWorker(config.encode_threads)
        try:
            yield
        finally:
            state.engine_ready = False
            state.gc_pauses.uninstall()
            await state.metrics.loop_lag.stop()
            if stats is not None:
                await stats.stop()
            if state.trace is not None:
                state.trace.close()
            if state.encode_worker is not None:
                state.encode_worker.shutdown()
            await state.engine.close()

    routes = [
        WebSocketRoute("/v1/realtime", realtime_endpoint),
        # drop-in surfaces of other APIs (gateway/compat/, docs/compat.md)
        WebSocketRoute("/v1/text-to-speech/{voice_id}/stream-input", elevenlabs.stream_input),
        WebSocketRoute("/v1/text-to-speech/{voice_id}/multi-stream-input", elevenlabs.multi_stream_input),
        WebSocketRoute("/tts/websocket", cartesia.websocket_endpoint),
        WebSocketRoute("/v1/twilio/media", twilio.media_endpoint),
        WebSocketRoute("/v1/twilio/calls/{call_id}", twilio.control_endpoint),
        Route("/v1/audio/speech", openai_speech.speech, methods=["POST"]),
        Route("/generate", http.generate, methods=["POST"]),
        Route("/v1/models", http.models, methods=["GET"]),
        Route("/v1/voices", http.voices, methods=["GET"]),
        Route("/v1/tokens", http.tokens, methods=["POST"]),
        Route("/healthz", http.healthz, methods=["GET"]),
        Route("/readyz", http.readyz, methods=["GET"]),
        Route("/metrics", http.metrics, methods=["GET"]),
    ]
    if WEB_DIR.is_dir():  # the browser page (web/, shipped as voxrt/web)
        routes.append(Mount("/", app=StaticFiles(directory=WEB_DIR, html=True), name="web"))
    # RawSendMiddleware first: the server's own `send` reaches it unwrapped (gateway/wire.py)
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(RawSendMiddleware), Middleware(AccessLogMiddleware)])
    app.state.voxrt = state
    return app
