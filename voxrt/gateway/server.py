"""`voxrt serve`: the engine process and the gateway under uvicorn; prints the URL once ready, drains on SIGTERM.

Connection hygiene beyond uvicorn's defaults: a connection that has not completed its request headers
`HEADER_TIMEOUT_S` after it opened is closed (uvicorn times out idle keep-alive connections, but not a fresh
or half-sent one), and uvicorn's traceback for a WebSocket text frame that is not UTF-8 (a client's fault,
answered with close 1007) becomes one info line. WebSocket reads pause only when a session has a backlog of
received messages (`_WebSocketProtocol`), not after each message, and a session may take a text message as
it is read (`on_text_now`: playback reports, realtime.py) when nothing of its own is queued ahead of it.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

try:
    from websockets.speedups import apply_mask
except ImportError:  # websockets without its C extension
    from websockets.utils import apply_mask

from voxrt.engine.messages import EngineConfig
from voxrt.gateway.app import build_app
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.drain import drain
from voxrt.gateway.event_loop import describe, resolve_loop

log = logging.getLogger("voxrt.gateway.server")


HEADER_TIMEOUT_S = 10.0
MAX_QUEUED_MESSAGES = 16  # received WebSocket messages a session may have waiting before reads pause


class _WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sansio WebSocket protocol, pausing reads only once `MAX_QUEUED_MESSAGES` received messages
    wait for the app, instead of after every message: uvicorn paused the transport at each message and resumed
    it when the app had read it, two selector changes (`epoll_ctl`) and their Python bookkeeping per playback
    report, ~15 us a frame at 10 reports a second (bench/results/2026-12-02-gateway/). A client that sends
    faster than its session reads still meets TCP backpressure, a few messages later; the session's own rate
    limit is unchanged."""

    # A session's hook (RealtimeSession._receive_now): a text message it takes now, on this call, instead of
    # through the queue, the ASGI task's wake-up and Starlette's receive. Offered only what nothing is queued
    # ahead of; True: handled (or queued by the session itself), nothing more to do here.
    on_text_now = None

    def data_received(self, data: bytes) -> None:
        """A read that is exactly one short, whole, masked text frame (a playback report, ~10 a second a
        session: most of what clients send) goes to `on_text_now` without websockets' frame parser, its events
        and uvicorn's dispatch: RFC 6455 §5.2's header read here, the payload unmasked by websockets' own
        `apply_mask`. Only where the parser holds nothing (no partial frame buffered, no fragmented message
        under way), the connection is open, no extension is negotiated (so RSV bits must be clear) and
        nothing is queued ahead; anything else, or a message the hook does not take, goes the parent's way
        with the same bytes (nothing was consumed)."""
        on_text_now = self.on_text_now
        length = len(data) - 6  # 2 bytes of header, 4 of mask, then a payload of < 126 bytes
        if on_text_now is not None and 0 <= length < 126 and data[0] == 0x81 and data[1] == 0x80 | length:
            conn = self.conn
            # (getattr: websockets releases that name these otherwise skip the fast path)
            if conn.state is State.OPEN and getattr(conn, "current_size", 0) is None and \
                    not getattr(conn.reader, "buffer", True) and not conn.extensions and not self.close_sent and \
                    self.queue.empty():
                try:
                    text = apply_mask(data[6:], data[2:6]).decode()
                except UnicodeDecodeError:
                    pass  # the parent's path answers it (close 1007)
                else:
                    if on_text_now(text):
                        return
        super().data_received(data)

    def send_receive_event_to_app(self) -> None:
        on_text_now = self.on_text_now
        if on_text_now is not None and self.curr_msg_data_type == "text" and not self.close_sent and \
                self.queue.empty():
            frames = self.frames
            try:
                text = (frames[0] if len(frames) == 1 else b"".join(frames)).decode()
            except UnicodeDecodeError:
                pass  # the parent's path answers it (close 1007)
            else:
                if on_text_now(text):
                    self.frames = []
                    return
        was_paused, self.read_paused = self.read_paused, True  # the parent pauses when this is False
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = was_paused
        if not self.read_paused and self.queue.qsize() >= MAX_QUEUED_MESSAGES:
            self.read_paused = True
            self.transport.pause_reading()  # resumed by the parent's receive() once the queue is empty


class _HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose first request's headers do not arrive in time."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._on_header_timeout)

    def _on_header_timeout(self) -> None:
        # after a WebSocket upgrade the transport belongs to the WebSocket protocol: leave it alone
        if self.cycle is None and self.transport.get_protocol() is self and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self._header_timer.cancel()
        super().connection_lost(exc)


class _ClientFaultFilter(logging.Filter):
    """uvicorn logs a client's invalid UTF-8 text frame with a traceback; one info line says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Invalid UTF-8 sequence"):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "a client sent a WebSocket text frame that is not UTF-8; closed it with 1007"
        return True


_CLIENT_FAULT_FILTER = _ClientFaultFilter()


class _Server(uvicorn.Server):
    is_quiet = False  # a --workers worker: the parent prints the one ready line
    _loop: asyncio.AbstractEventLoop | None = None
    _drain_task: asyncio.Task | None = None

    loop_description = ""  # which event loop runs (make_server), logged at startup

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        if self.loop_description:
            log.info("%s", self.loop_description)
        await super().startup(sockets=sockets)
        if self.started and not self.is_quiet:
            cfg = self.config
            host = "localhost" if cfg.host in ("127.0.0.1", "0.0.0.0") else cfg.host
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else cfg.port
            print(f"voxrt ready: model {self.config.app.state.voxrt.engine.info.name}\n"
                  f"  http://{host}:{port}/v1/audio/speech   ws://{host}:{port}/v1/realtime", flush=True)

    def handle_exit(self, sig: int, frame) -> None:
        """The first SIGTERM drains (gateway/drain.py) and then exits; SIGINT or a second SIGTERM exits at
        once, as uvicorn does. Called from a signal handler (or another thread): only thread-safe calls."""
        if sig == signal.SIGTERM and self._drain_task is None and self.started and self._loop is not None \
                and not self.should_exit:
            self._captured_signals.append(sig)  # re-raised after the shutdown, as uvicorn does
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        if self._drain_task is not None:
            return
        state = self.config.app.state.voxrt

        async def run() -> None:
            try:
                await drain(state, state.config.drain_grace_s)
            except Exception:  # noqa: BLE001 (a failed drain must still stop the server)
                log.exception("drain failed; shutting down")
            finally:
                self.should_exit = True

        self._drain_task = self._loop.create_task(run())


def make_server(gateway: GatewayConfig, engine: EngineConfig | None, host: str, port: int, log_level: str = "info",
                per_message_deflate: bool = False,
                engine_address: tuple[str, bytes] | list[tuple[str, bytes]] | None = None,
                quiet: bool = False) -> uvicorn.Server:
    app = build_app(gateway, engine, engine_address)
    # the protocol's own limit is enforced by the session (error, then close 1009), so the transport's must be larger
    ws_max = max(16 * 1024 * 1024, 2 * gateway.limits.max_message_bytes)
    # No permessage-deflate: clients (browsers, websockets) offer it by default, and deflating every Opus or
    # PCM frame costs CPU per frame for audio that does not compress; the JSON messages are small.
    # log_config=None: uvicorn's loggers go through voxrt/logs.py's handler; access_log=False: the gateway
    # writes its own access lines (gateway/access.py, with ids and durations).
    # loop: the resolved name (gateway/event_loop.py), never uvicorn's own "auto"; LoopUnavailable for
    # --loop uvloop without uvloop
    loop = resolve_loop(gateway.loop)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, ws=_WebSocketProtocol,
                            http=_HeaderTimeoutH11, ws_max_size=ws_max, ws_per_message_deflate=per_message_deflate,
                            lifespan="on", timeout_graceful_shutdown=5, log_config=None, access_log=False, loop=loop)
    logging.getLogger("uvicorn.error").addFilter(_CLIENT_FAULT_FILTER)
    server = _Server(config)
    server.is_quiet = quiet
    server.loop_description = describe(loop, gateway.loop)
    return server
