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
"""

from __future__ import annotations

import asyncio
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
from voxrt.engine.messages import (AppendText, AudioChunk, CancelRequest, EngineConfig, EngineFatal, EngineReady,
                                   EngineStats, GetStats, ModelInfo, RequestCancelled, RequestFailed, SetPlayback,
                                   Shutdown, SubmitRequest)
from voxrt.engine.params import SamplingParams

log = logging.getLogger("voxrt.engine.client")

_END = object()


@dataclass
class _Stream:
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    is_terminal: bool = False  # its last chunk, failure or cancel acknowledgement arrived
    is_abandoned: bool = False  # the consumer stopped before the end: the request was cancelled


class EngineClient:
    def __init__(self, process, conn, loop: asyncio.AbstractEventLoop) -> None:
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
        self._reader = threading.Thread(target=self._read_forever, name="voxrt-engine-reader", daemon=True)

    @classmethod
    async def start(cls, config: EngineConfig | None = None, *, startup_timeout_s: float = 600.0,
                    log_level: int = logging.INFO, listen: tuple[str, bytes] | None = None) -> "EngineClient":
        """Spawns the engine process and waits until its model is loaded (and graphs captured). `listen`:
        (Unix socket path, authkey) on which the engine also accepts `connect()`ing clients."""
        from voxrt.engine.process import engine_main  # noqa: PLC0415

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        process = ctx.Process(target=engine_main, args=(config or EngineConfig(), child, log_level, listen),
                              name="voxrt-engine", daemon=True)
        process.start()
        child.close()
        return await cls._ready_client(process, parent, startup_timeout_s)

    @classmethod
    async def connect(cls, path: str, authkey: bytes, *, timeout_s: float = 30.0) -> "EngineClient":
        """Joins a running engine that listens on the Unix socket `path` (see `start(listen=...)`)."""
        from multiprocessing.connection import Client  # noqa: PLC0415

        loop = asyncio.get_running_loop()
        try:
            conn = await asyncio.wait_for(loop.run_in_executor(None, lambda: Client(path, "AF_UNIX", authkey)),
                                          timeout_s)
        except (OSError, EOFError, asyncio.TimeoutError) as exc:
            raise EngineDeadError(f"cannot connect to the engine at {path}: {type(exc).__name__}: {exc}") from None
        except mp.AuthenticationError:
            raise EngineDeadError(f"the engine at {path} refused the authkey") from None
        return await cls._ready_client(None, conn, timeout_s)

    @classmethod
    async def _ready_client(cls, process, conn, startup_timeout_s: float) -> "EngineClient":
        client = cls(process, conn, asyncio.get_running_loop())
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
        if params is None:
            params = SamplingParams()
        elif isinstance(params, dict):
            params = SamplingParams.from_dict(params)
        elif not isinstance(params, SamplingParams):
            raise InvalidParamsError(f"params must be SamplingParams or a dict, got {type(params).__name__}")
        request_id = request_id or f"{self._id_prefix}{next(self._ids)}"
        if request_id in self._streams:
            raise InvalidParamsError(f"request id {request_id!r} is already in use")
        self._streams[request_id] = _Stream()
        self._send(SubmitRequest(request_id, voice, params, text, final, arrival_ns or time.monotonic_ns(), streaming))
        return request_id

    async def append_text(self, request_id: str, text: str, final: bool = False) -> None:
        self._known(request_id)
        self._send(AppendText(request_id, text, final))

    async def set_playback(self, request_id: str, played_samples: int, anchor_ns: int | None = None,
                           is_stalled: bool = False) -> None:
        self._known(request_id)
        self._send(SetPlayback(request_id, played_samples, anchor_ns or time.monotonic_ns(), is_stalled))

    async def cancel(self, request_id: str, timeout_s: float = 10.0) -> None:
        """Hard stop. Returns once the engine has freed the request's pages and slot. Idempotent: an
        unknown or finished request is acknowledged too."""
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
        stream = self._known(request_id)
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
                if self._dead is None:
                    try:
                        self._send(CancelRequest(request_id))
                    except EngineError:
                        pass

    async def stats(self, timeout_s: float = 10.0) -> EngineStats:
        self._check_alive()
        token = next(self._ids)
        future = self._loop.create_future()
        self._stats_waiters[token] = future
        self._send(GetStats(token))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._stats_waiters.pop(token, None)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Shuts the engine down when this client started it; a connected client only disconnects (the engine
        cancels what it left running)."""
        self._closing = True
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send(Shutdown())
            except (OSError, ValueError):
                pass
            await asyncio.get_running_loop().run_in_executor(None, self._process.join, timeout_s)
            if self._process.is_alive():
                self._process.terminate()
                await asyncio.get_running_loop().run_in_executor(None, self._process.join, timeout_s)
        elif self._process is None:
            # a connected client: the engine stays up, so no EOF would ever wake the reader thread; shutting the
            # socket down does (closing the descriptor alone does not interrupt a blocked recv)
            try:
                sock = socket.socket(fileno=os.dup(self._conn.fileno()))
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass
        self._conn.close()
        self._fail_all(EngineDeadError("engine client closed"))

    @property
    def is_alive(self) -> bool:
        return self._dead is None and (self._process is None or self._process.is_alive())

    # ---- internals ------------------------------------------------------------------------------------------------

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
        return stream

    def _read_forever(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError, ValueError):
                if not self._closing:
                    log.error("engine process connection lost")
                self._loop.call_soon_threadsafe(self._fail_all, EngineDeadError("the engine process exited"))
                return
            if isinstance(msg, AudioChunk):
                msg = dataclasses.replace(msg, received_ns=time.monotonic_ns())
            self._loop.call_soon_threadsafe(self._dispatch, msg)

    def _dispatch(self, msg) -> None:
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
        if stream.is_abandoned:
            self._streams.pop(request_id, None)
        else:
            stream.queue.put_nowait(item)

    def _fail_all(self, error: EngineError) -> None:
        if self._dead is None:
            self._dead = error
        if not self._ready.done():
            self._ready.set_exception(error)
        for stream in self._streams.values():
            stream.queue.put_nowait(error)
        for waiters in self._cancel_waiters.values():
            for acked in waiters:
                acked.set()
        for future in self._stats_waiters.values():
            if not future.done():
                future.set_exception(error)
