"""`EngineClient`: the asyncio face of an engine process. No torch here; the gateway uses it.

    client = await EngineClient.start(EngineConfig(model="tiny"))
    rid = await client.submit(voice="default", text="Hello", final=False)
    await client.append_text(rid, " world.", final=True)
    async for chunk in client.stream(rid):   # AudioChunk: float32 PCM at client.info.sample_rate
        ...
    await client.close()

A reader thread receives the engine's messages and hands them to the event loop, so a large audio chunk
never blocks the loop; it stamps each chunk's `received_ns`.

`EngineClient.start` spawns the engine process (the client owns it: `close()` shuts it down).
`EngineClient.connect(path, authkey)` joins an engine that another process started with `listen=` (several
gateway processes in front of one engine: `voxrt serve --workers N`); `close()` then only disconnects, and the
engine cancels what this client left running. A request's stream ends after its last chunk, raises the engine's typed error when
it failed (`CapacityError`, `RequestFailedError`, ... each with its `code`), and ends quietly when it was
cancelled.

Supervision (supervisor.py, when `start`/`connect` get a `SupervisorConfig`, as the gateway's do): the client sends the engine a heartbeat every second; an engine that stops
answering is killed, and a dead one fails every request it held at once (`EngineDeadError`, code
`engine_unavailable`, which the gateway sends to clients as an `error`) and is started again with backoff
(a connected client reconnects). Requests do not survive a restart: a stream of the old engine ends with the
error, and `append_text` for it raises it. `is_ready` is false while the engine restarts; `num_restarts`
counts the restarts that became ready.

Load: the engine pushes an `EngineLoad` about every 50 ms; the reader thread keeps the latest in `load` (no
event-loop wake-up), and `num_unreported_submits` says how many of this client's submits it does not count
yet. `ReplicaSet` (replicas.py) routes new contexts by them; `for_context()` is the one-engine case of its
choice (this client).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import dataclasses
import multiprocessing as mp
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

from voxrt.engine.errors import (EngineDeadError, EngineError, InvalidParamsError, UnknownRequestError,
                                 UnknownVoiceError, error_from_code)
from voxrt.engine.messages import (AppendText, AudioChunk, CancelRequest, EngineConfig, EngineFatal, EngineLoad,
                                   EngineReady, EngineStats, GetStats, Heartbeat, HeartbeatAck, ModelInfo,
                                   RequestCancelled, RequestFailed, SetPlayback, Shutdown, SubmitRequest)
from voxrt.engine.params import SamplingParams, instructions_problem
from voxrt.engine.supervisor import SupervisorConfig, Supervision
from voxrt.engine.wire import FrameReader

log = logging.getLogger("voxrt.engine.client")

_END = object()


@dataclass
class _Stream:
    generation: int  # which engine process (a restart starts a new generation) holds the request
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    is_terminal: bool = False  # its last chunk, failure or cancel acknowledgement arrived
    is_abandoned: bool = False  # the consumer stopped before the end: the request was cancelled
    is_cancel_requested: bool = False  # cancel() was called: nobody will read it; forgotten once terminal


class EngineClient:
    def __init__(self, process, conn, loop: asyncio.AbstractEventLoop,
                 supervisor: SupervisorConfig | None = None) -> None:
        self._process = process
        self._conn = conn
        self._loop = loop
        self._streams: dict[str, _Stream] = {}
        self._stats_waiters: dict[int, asyncio.Future] = {}
        self._cancel_waiters: dict[str, list[asyncio.Event]] = {}
        self._ids = itertools.count(1)
        # request ids are unique per engine, and an engine may serve several clients: a random prefix per client
        self._id_prefix = f"req-{secrets.token_hex(4)}-"
        self._ready: asyncio.Future = loop.create_future()
        self._dead: EngineError | None = None
        self._closing = False
        self.info: ModelInfo | None = None
        self._generation = 0
        self._reader = self._make_reader()
        # supervision: how to start the engine again (set by start/connect), heartbeats, restarts
        self._respawn_args: tuple | None = None
        self._reconnect_args: tuple | None = None
        self._supervisor = supervisor
        self._supervision = Supervision(supervisor) if supervisor is not None else None
        self._last_ack_s = 0.0  # written by the reader thread
        self._supervise_task: asyncio.Task | None = None
        self._is_restarting = False
        self.num_restarts = 0
        # The engine's latest pushed load report (`EngineLoad`, about every 50 ms; None until the first, and again
        # after a restart) and when it arrived; `num_submits` counts this client's submits to the current engine,
        # so `num_unreported_submits` is what the report does not count yet. Written by the reader thread.
        self.load: EngineLoad | None = None
        self.load_received_s = 0.0
        self.num_submits = 0
        self.num_contexts = 0  # contexts (and HTTP syntheses) routed here by `for_context`, since start

    @classmethod
    async def start(cls, config: EngineConfig | None = None, *, startup_timeout_s: float = 600.0,
                    log_level: int = logging.INFO, listen: tuple[str, bytes] | None = None,
                    supervisor: SupervisorConfig | None = None) -> "EngineClient":
        """Spawns the engine process and waits until its model is loaded (and graphs captured). `listen`:
        (Unix socket path, authkey) on which the engine also accepts `connect()`ing clients. `supervisor`:
        heartbeat and restart policy (None, the default for benchmarks and tools: a dead engine stays dead; the
        gateway supervises)."""
        config = config or EngineConfig()
        process, parent = _spawn(config, log_level, listen)
        client = await cls._ready_client(process, parent, startup_timeout_s, supervisor)
        client._respawn_args = (config, log_level, listen, startup_timeout_s)
        client._start_supervising()
        return client

    @classmethod
    async def connect(cls, path: str, authkey: bytes, *, timeout_s: float = 30.0,
                      supervisor: SupervisorConfig | None = None) -> "EngineClient":
        """Joins a running engine that listens on the Unix socket `path` (see `start(listen=...)`). Supervised,
        it reconnects when the connection is lost (the owner restarts the engine on the same path)."""
        conn = await _connect(path, authkey, timeout_s)
        client = await cls._ready_client(None, conn, timeout_s, supervisor)
        client._reconnect_args = (path, authkey, timeout_s)
        client._start_supervising()
        return client

    @classmethod
    async def _ready_client(cls, process, conn, startup_timeout_s: float,
                            supervisor: SupervisorConfig | None = None) -> "EngineClient":
        client = cls(process, conn, asyncio.get_running_loop(), supervisor)
        client._reader.start()
        try:
            client.info = await asyncio.wait_for(asyncio.shield(client._ready), startup_timeout_s)
        except asyncio.TimeoutError:
            await client.close()
            raise EngineDeadError(f"engine did not become ready within {startup_timeout_s:.0f} s") from None
        except EngineError:
            await client.close()
            raise
        return client

    # ---- commands --------------------------------------------------------------------------------------------

    async def submit(self, voice: str | None = None, params: SamplingParams | dict | None = None, text: str = "",
                     final: bool = False, request_id: str | None = None, arrival_ns: int | None = None,
                     streaming: bool = True) -> str:
        """Starts a request and returns its id. Bad voice or parameters raise a typed error here."""
        self._check_alive()
        info = self.info
        voice = voice or info.default_voice
        if voice not in info.voices:
            raise UnknownVoiceError(f"unknown voice {voice!r}; available: {', '.join(info.voices)}")
        # the model's defaults under what the caller set (None or a dict); a SamplingParams is taken as it is
        if params is None:
            params = SamplingParams.from_dict(dict(info.sampling_defaults))
        elif isinstance(params, dict):
            params = SamplingParams.from_dict({**info.sampling_defaults, **params})
        elif not isinstance(params, SamplingParams):
            raise InvalidParamsError(f"params must be SamplingParams or a dict, got {type(params).__name__}")
        problem = instructions_problem(params.instructions, info.name, info.accepts_instructions,
                                       info.max_instructions_bytes)
        if problem is not None:
            raise InvalidParamsError(problem[1])
        request_id = request_id or f"{self._id_prefix}{next(self._ids)}"
        if request_id in self._streams:
            raise InvalidParamsError(f"request id {request_id!r} is already in use")
        self._send(SubmitRequest(request_id, voice, params, text, final, arrival_ns or time.monotonic_ns(), streaming))
        self.num_submits += 1
        self._streams[request_id] = _Stream(self._generation)
        return request_id

    def for_context(self) -> "EngineClient":
        """The engine a new context (and every request of it) uses: this one. `ReplicaSet.for_context`
        (replicas.py) picks one of several by headroom; the gateway calls this either way."""
        self._check_alive()
        self.num_contexts += 1
        return self

    @property
    def num_unreported_submits(self) -> int:
        """This client's submits the engine's latest load report does not count yet (all of them before the
        first report)."""
        load = self.load
        return self.num_submits - (load.num_submits_seen if load is not None else 0)

    async def append_text(self, request_id: str, text: str, final: bool = False) -> None:
        self._known(request_id)
        self._send(AppendText(request_id, text, final))

    async def set_playback(self, request_id: str, played_samples: int, anchor_ns: int | None = None,
                           is_stalled: bool = False) -> None:
        self.set_playback_nowait(request_id, played_samples, anchor_ns, is_stalled)

    def set_playback_nowait(self, request_id: str, played_samples: int, anchor_ns: int | None = None,
                            is_stalled: bool = False) -> None:
        """`set_playback` as a plain call (it never waits): for callers on the event loop that must not leave a
        task behind, whose exception nobody would retrieve. Raises what `set_playback` raises."""
        self._known(request_id)
        self._send(SetPlayback(request_id, played_samples, anchor_ns or time.monotonic_ns(), is_stalled))

    async def cancel(self, request_id: str, timeout_s: float = 10.0) -> None:
        """Hard stop. Returns once the engine has freed the request's pages and slot. Idempotent: an
        unknown or finished request is acknowledged too. The request's stream is forgotten once it ends
        (whether or not anyone read it)."""
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.is_cancel_requested = True
            if stream.is_terminal:
                self._streams.pop(request_id, None)
                return
            if stream.generation != self._generation:  # its engine is gone, and so is the request
                self._end_stream(request_id, stream, _END)
                return
        if self._dead is not None:
            return
        acked = asyncio.Event()
        self._cancel_waiters.setdefault(request_id, []).append(acked)
        try:
            self._send(CancelRequest(request_id))
            await asyncio.wait_for(acked.wait(), timeout_s)
        finally:
            waiters = self._cancel_waiters.get(request_id, [])
            if acked in waiters:
                waiters.remove(acked)
            if not waiters:
                self._cancel_waiters.pop(request_id, None)

    async def stream(self, request_id: str) -> AsyncIterator[AudioChunk]:
        """The request's chunks until its last. Leaving the loop early cancels the request (nothing else
        would ever read its audio)."""
        stream = self._streams.get(request_id)
        if stream is None:
            raise UnknownRequestError(f"unknown request id {request_id!r}")
        try:
            while True:
                item = await stream.queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if stream.is_terminal:
                self._streams.pop(request_id, None)
            else:
                stream.is_abandoned = True
                if self._dead is None and stream.generation == self._generation:
                    try:
                        self._send(CancelRequest(request_id))
                    except EngineError:
                        pass

    async def stats(self, timeout_s: float = 10.0, check_pools: bool = False) -> EngineStats:
        """The engine's counters. `pool_ok` is its last idle integrity check, or a check run now with
        `check_pools=True` (tests; a walk over every page and slot)."""
        self._check_alive()
        token = next(self._ids)
        future = self._loop.create_future()
        self._stats_waiters[token] = future
        self._send(GetStats(token, check_pools))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._stats_waiters.pop(token, None)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Shuts the engine down when this client started it; a connected client only disconnects (the engine
        cancels what it left running)."""
        self._closing = True
        if self._supervise_task is not None:
            self._supervise_task.cancel()
            try:
                await self._supervise_task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        await self._stop_engine(timeout_s)
        self._fail_all(EngineDeadError("engine client closed"))

    @property
    def is_alive(self) -> bool:
        return self._dead is None and (self._process is None or self._process.is_alive())

    @property
    def is_ready(self) -> bool:
        """Serving: started, not dead, not restarting."""
        return self.info is not None and self.is_alive and not self._is_restarting

    @property
    def num_streams(self) -> int:
        """Requests this client still tracks (a leak check: zero once every request ended and was read)."""
        return len(self._streams)

    def kill(self) -> None:
        """Kills the engine process at once (SIGKILL), as a crash would; the supervisor restarts it."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    # ---- supervision -------------------------------------------------------------------------------------------

    def _start_supervising(self) -> None:
        if self._supervisor is not None:
            self._supervision.on_ready(time.monotonic())
            self._last_ack_s = time.monotonic()
            self._supervise_task = self._loop.create_task(self._supervise_forever(), name="voxrt-engine-supervisor")

    async def _supervise_forever(self) -> None:
        config = self._supervisor
        tokens = itertools.count(1)
        while not self._closing:
            if self._dead is not None:
                if not config.is_restart_enabled:
                    return
                await self._restart()
                continue
            await asyncio.sleep(config.heartbeat_interval_s)
            if self._dead is not None or self._closing:
                continue
            self._supervision.on_ack(self._last_ack_s)
            if self._supervision.is_frozen(time.monotonic()):
                log.error("the engine has not answered a heartbeat for %.0f s: killing it",
                          config.heartbeat_timeout_s)
                self._on_lost(self._generation, EngineDeadError("the engine stopped responding; restarting it"))
                await self._stop_engine(2.0, kill=True)
                continue
            try:
                self._send(Heartbeat(next(tokens)))
            except EngineError:
                pass  # the reader sees the loss and fails the requests

    async def _restart(self) -> None:
        self._is_restarting = True
        delay = self._supervision.restart_delay_s(time.monotonic())
        log.warning("engine unavailable; %s in %.1f s", "reconnecting" if self._reconnect_args else "restarting",
                    delay)
        await asyncio.sleep(delay)
        await self._stop_engine(5.0, kill=True)
        try:
            if self._reconnect_args is not None:
                path, authkey, timeout_s = self._reconnect_args
                process, conn = None, await _connect(path, authkey, timeout_s)
            else:
                config, log_level, listen, timeout_s = self._respawn_args
                if listen is not None:  # a killed engine leaves its socket file behind: bind would fail
                    with contextlib.suppress(OSError):
                        os.unlink(listen[0])
                process, conn = _spawn(config, log_level, listen)
        except EngineError as exc:
            log.error("engine restart failed: %s", exc.message)
            return
        self._generation += 1
        self._process, self._conn = process, conn
        self.load, self.num_submits = None, 0  # a new engine counts this client's submits from 0
        self._ready = self._loop.create_future()
        self._reader = self._make_reader()
        self._reader.start()
        try:
            info = await asyncio.wait_for(asyncio.shield(self._ready), timeout_s)
        except (asyncio.TimeoutError, EngineError) as exc:
            log.error("restarted engine did not become ready: %s", getattr(exc, "message", type(exc).__name__))
            self._on_lost(self._generation, EngineDeadError("the engine failed to restart"))
            return
        if self._closing:
            return
        self.info = info
        self._dead = None
        self._is_restarting = False
        self._last_ack_s = time.monotonic()
        self._supervision.on_ready(self._last_ack_s)
        self.num_restarts += 1
        log.warning("engine %s (restart %d)", "reconnected" if self._reconnect_args else "restarted and ready",
                    self.num_restarts)

    async def _stop_engine(self, timeout_s: float, kill: bool = False) -> None:
        """Ends this client's link to the engine: an owned process is shut down (or killed), a connection
        is shut so that the reader wakes."""
        loop = asyncio.get_running_loop()
        process = self._process
        if process is not None and process.is_alive():
            if kill:
                process.kill()
            else:
                try:
                    self._conn.send(Shutdown())
                except (OSError, ValueError):
                    pass
            await loop.run_in_executor(None, process.join, timeout_s)
            if process.is_alive():
                process.kill()
                await loop.run_in_executor(None, process.join, timeout_s)
        elif process is None:
            # a connected client: the engine stays up, so no EOF would ever wake the reader thread; shutting the
            # socket down does (closing the descriptor alone does not interrupt a blocked recv)
            try:
                sock = socket.socket(fileno=os.dup(self._conn.fileno()))
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass
        self._conn.close()

    # ---- internals ------------------------------------------------------------------------------------------------

    def _make_reader(self) -> threading.Thread:
        return threading.Thread(target=self._read_forever, args=(self._conn, self._generation),
                                name="voxrt-engine-reader", daemon=True)

    def _send(self, msg) -> None:
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as exc:
            raise EngineDeadError("the engine process is not reachable") from exc

    def _check_alive(self) -> None:
        if self._dead is not None:
            raise self._dead
        if self.info is None:
            raise EngineDeadError("engine not started")

    def _known(self, request_id: str) -> _Stream:
        self._check_alive()
        stream = self._streams.get(request_id)
        if stream is None:
            raise UnknownRequestError(f"unknown request id {request_id!r}")
        if stream.generation != self._generation:
            raise EngineDeadError("the engine restarted; this request was lost with the old engine")
        return stream

    def _read_forever(self, conn, generation: int) -> None:
        """The reader thread: every read takes what the connection has (wire.py: one system call, however many
        messages), stamps the chunks' `received_ns`, keeps heartbeat answers and load reports here, and hands the
        rest to the event loop in one call a read (one wake-up of the loop, not one a message)."""
        reader = FrameReader(conn)
        while True:
            try:
                messages = reader.read()
            except Exception as exc:  # noqa: BLE001 (gone, reset, or bytes that are no message: the engine is lost)
                if not self._closing:
                    log.error("engine process connection lost" if isinstance(exc, (EOFError, OSError, ValueError))
                              else f"engine process connection unreadable ({type(exc).__name__}: {exc})")
                error = EngineDeadError("the engine process exited; restarting it"
                                        if self._supervisor is not None and self._supervisor.is_restart_enabled
                                        and not self._closing else "the engine process exited")
                with contextlib.suppress(RuntimeError):  # the loop already closed: nobody is left to tell
                    self._loop.call_soon_threadsafe(self._on_lost, generation, error)
                return
            received_ns = time.monotonic_ns()
            batch = []
            for msg in messages:
                if isinstance(msg, HeartbeatAck):
                    self._last_ack_s = time.monotonic()  # here, not on the loop: a busy loop is not a frozen engine
                elif isinstance(msg, EngineLoad):  # kept here, no loop wake-up: routing reads the latest
                    if generation == self._generation:
                        self.load, self.load_received_s = msg, time.monotonic()
                elif isinstance(msg, AudioChunk):
                    batch.append(dataclasses.replace(msg, received_ns=received_ns))
                else:
                    batch.append(msg)
            if batch:
                with contextlib.suppress(RuntimeError):  # the loop already closed (the reader ends at its next read)
                    self._loop.call_soon_threadsafe(self._dispatch_all, batch, generation)

    def _dispatch_all(self, messages: list, generation: int) -> None:
        for msg in messages:
            self._dispatch(msg, generation)

    def _on_lost(self, generation: int, error: EngineError) -> None:
        if generation == self._generation and not self._loop.is_closed():
            self._fail_all(error)

    def _dispatch(self, msg, generation: int) -> None:
        if generation != self._generation:
            return  # a late message of an engine that was replaced
        if isinstance(msg, AudioChunk):
            stream = self._streams.get(msg.request_id)
            if stream is not None and not stream.is_terminal and not stream.is_abandoned:
                stream.queue.put_nowait(msg)
                if msg.is_last:
                    self._end_stream(msg.request_id, stream, _END)
        elif isinstance(msg, RequestFailed):
            stream = self._streams.get(msg.request_id)
            if stream is not None and not stream.is_terminal:
                self._end_stream(msg.request_id, stream, error_from_code(msg.code, msg.message))
        elif isinstance(msg, RequestCancelled):
            for acked in self._cancel_waiters.get(msg.request_id, []):
                acked.set()
            stream = self._streams.get(msg.request_id)
            if stream is not None and not stream.is_terminal:
                self._end_stream(msg.request_id, stream, _END)
        elif isinstance(msg, EngineStats):
            future = self._stats_waiters.get(msg.token)
            if future is not None and not future.done():
                future.set_result(msg)
        elif isinstance(msg, EngineReady):
            if not self._ready.done():
                self._ready.set_result(msg.info)
        elif isinstance(msg, EngineFatal):
            error = error_from_code(msg.code, msg.message)
            if not self._ready.done():
                self._ready.set_exception(error)
            self._fail_all(error)

    def _end_stream(self, request_id: str, stream: _Stream, item) -> None:
        stream.is_terminal = True
        if stream.is_abandoned or stream.is_cancel_requested:  # nobody will read it
            self._streams.pop(request_id, None)
        if not stream.is_abandoned:
            stream.queue.put_nowait(item)

    def _fail_all(self, error: EngineError) -> None:
        """The engine is gone: every request it held ends with `error` (its readers get it now)."""
        if self._dead is None:
            self._dead = error
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: a restart's failed start is logged, not "never retrieved"
        for request_id, stream in list(self._streams.items()):
            if not stream.is_terminal:
                self._end_stream(request_id, stream, error)
        for waiters in self._cancel_waiters.values():
            for acked in waiters:
                acked.set()
        for future in self._stats_waiters.values():
            if not future.done():
                future.set_exception(error)


def _spawn(config: EngineConfig, log_level: int, listen: tuple[str, bytes] | None):
    from voxrt.engine.process import engine_main  # noqa: PLC0415

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=True)
    process = ctx.Process(target=engine_main, args=(config, child, log_level, listen), name="voxrt-engine",
                          daemon=True)
    process.start()
    child.close()
    return process, parent


async def _connect(path: str, authkey: bytes, timeout_s: float):
    from multiprocessing.connection import Client  # noqa: PLC0415

    loop = asyncio.get_running_loop()
    try:
        return await asyncio.wait_for(loop.run_in_executor(None, lambda: Client(path, "AF_UNIX", authkey)),
                                      timeout_s)
    except (OSError, EOFError, asyncio.TimeoutError) as exc:
        raise EngineDeadError(f"cannot connect to the engine at {path}: {type(exc).__name__}: {exc}") from None
    except mp.AuthenticationError:
        raise EngineDeadError(f"the engine at {path} refused the authkey") from None
