"""The engine process: one per GPU. It owns an `EngineCore` and runs the step loop; commands and results
travel as the typed records of `voxrt.engine.messages` over a pipe.

The gateway's event loop never shares a GIL with the step loop. torch is imported only in the child.

Several gateways per engine (`voxrt serve --workers N`): besides the pipe to the process that started it, the
engine can listen on a Unix socket (`listen=(path, authkey)`, multiprocessing's authenticated connections;
the socket file is created 0600-equivalent by the listener's umask and the authkey keeps out anyone else).
Each connection is one `EngineClient`; a request's chunks, failures and acknowledgements go back to the
connection that submitted it, and a connection that goes away has its requests cancelled at once (their
pages and slots return). The engine exits when the first connection (its parent's pipe) closes or sends
`Shutdown`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from multiprocessing.connection import Connection, Listener, wait

from voxrt.engine.errors import EngineError
from voxrt.engine.messages import (AppendText, AudioChunk, CancelRequest, EngineConfig, EngineFatal, EngineReady,
                                   GetStats, RequestCancelled, RequestFailed, SetPlayback, Shutdown, SubmitRequest)

log = logging.getLogger("voxrt.engine.process")

IDLE_POLL_S = 0.05


def engine_main(config: EngineConfig, conn: Connection, log_level: int = logging.INFO,
                listen: tuple[str, bytes] | None = None) -> None:
    """Entry point of the spawned engine process. `listen`: (Unix socket path, authkey) for more clients."""
    from voxrt.logs import setup_child_logging  # noqa: PLC0415

    setup_child_logging(f"engine[{os.getpid()}]", log_level)  # the CLI's --log-level / --log-json, via the env
    try:
        core = _build_core(config)
        core.warmup()
        listener = Listener(listen[0], family="AF_UNIX", authkey=listen[1]) if listen else None
    except EngineError as exc:
        conn.send(EngineFatal(exc.code, exc.message))
        return
    except Exception as exc:  # noqa: BLE001 (report any start-up failure to the parent, then exit)
        log.exception("engine failed to start")
        conn.send(EngineFatal("engine_unavailable", f"engine failed to start: {type(exc).__name__}: {exc}"))
        return
    conn.send(EngineReady(core.info))
    hub = _Hub(core, conn, listener)
    try:
        hub.run()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        log.info("client went away; engine exits")
    finally:
        if listener is not None:
            listener.close()
        core.close()


def _build_core(config: EngineConfig):
    from voxrt.engine.standin import STANDIN_MODEL, StandInCore  # noqa: PLC0415

    if config.model == STANDIN_MODEL:  # the gateway benchmark's engine: no model, no torch
        return StandInCore(config)
    from voxrt.engine.runtime.core import EngineCore  # noqa: PLC0415 (torch only in the child)

    return EngineCore(config)


class _Hub:
    """The step loop and the connections it serves. The first connection is the owner (the parent's pipe)."""

    def __init__(self, core, owner: Connection, listener: Listener | None) -> None:
        self.core = core
        self.owner = owner
        self.conns: list[Connection] = [owner]
        self.requests: dict[str, Connection] = {}  # live request -> the connection that submitted it
        self._accepted: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        if listener is not None:
            threading.Thread(target=self._accept_forever, args=(listener,), name="voxrt-engine-accept",
                             daemon=True).start()

    def _accept_forever(self, listener: Listener) -> None:
        while True:
            try:
                conn = listener.accept()  # the authkey handshake happens here
                conn.send(EngineReady(self.core.info))
            except OSError:  # the listener was closed: the engine is exiting
                return
            except Exception as exc:  # noqa: BLE001 (a client failing authentication must not stop the others)
                log.warning("refused an engine connection: %s", exc)
                continue
            self._accepted.put(conn)

    def run(self) -> None:
        was_busy = False
        while True:
            while not self._accepted.empty():
                self.conns.append(self._accepted.get())
            busy = self.core.has_work()
            for conn in wait(self.conns, 0 if busy else IDLE_POLL_S):
                if not self._drain(conn):
                    return
            busy = self.core.has_work()
            if busy:
                for event in self.core.step():
                    self._route(event)
            elif was_busy:  # just went idle: a good moment for the pool's integrity check
                if not self.core.stats().pool_ok:
                    log.error("KV page or slot pool integrity check failed while idle")
            was_busy = busy

    def _drain(self, conn: Connection) -> bool:
        """Handles every message waiting on `conn`. False: the engine must exit (Shutdown, or its owner left)."""
        try:
            while True:
                msg = conn.recv()
                if isinstance(msg, Shutdown):
                    log.info("shutdown requested")
                    return False
                self._handle(conn, msg)
                if not conn.poll(0):
                    return True
        except (EOFError, OSError):
            if conn is self.owner:
                raise EOFError from None
            self._drop(conn)
            return True

    def _drop(self, conn: Connection) -> None:
        """A gateway went away: its requests are cancelled now, so their pages and slots return."""
        self.conns.remove(conn)
        gone = [rid for rid, owner in self.requests.items() if owner is conn]
        for request_id in gone:
            self.core.cancel(request_id)
            del self.requests[request_id]
        log.info("an engine client disconnected; %d of its requests cancelled", len(gone))

    def _route(self, event) -> None:
        if isinstance(event, AudioChunk):
            event = dataclasses.replace(event, done_ns=time.monotonic_ns())
            conn = self.requests.pop(event.request_id) if event.is_last else self.requests.get(event.request_id)
        elif isinstance(event, RequestFailed):
            conn = self.requests.pop(event.request_id, None)
        else:  # nothing else comes out of a step today; anything with a request id goes to its client
            request_id = getattr(event, "request_id", None)
            conn = self.requests.get(request_id, self.owner) if request_id is not None else self.owner
        if conn is None:
            return  # a request whose client went away meanwhile
        try:
            conn.send(event)
        except (OSError, ValueError):
            if conn is self.owner:
                raise BrokenPipeError from None
            if conn in self.conns:
                self._drop(conn)

    def _handle(self, conn: Connection, msg) -> None:
        core = self.core
        if isinstance(msg, SubmitRequest):
            try:
                if msg.request_id in self.requests:
                    raise ValueError(f"request id {msg.request_id!r} is already live")
                core.submit(msg)
                self.requests[msg.request_id] = conn
            except EngineError as exc:
                conn.send(RequestFailed(msg.request_id, exc.code, exc.message))
            except ValueError as exc:  # e.g. a request id already live
                conn.send(RequestFailed(msg.request_id, "invalid_request", str(exc)))
        elif isinstance(msg, AppendText):
            core.append_text(msg.request_id, msg.text, msg.is_final)
        elif isinstance(msg, SetPlayback):
            core.set_playback(msg.request_id, msg.played_samples, msg.anchor_ns, msg.is_stalled)
        elif isinstance(msg, CancelRequest):
            core.cancel(msg.request_id)
            if self.requests.get(msg.request_id) is conn:
                del self.requests[msg.request_id]
            conn.send(RequestCancelled(msg.request_id))  # acknowledged even when already gone (idempotent)
        elif isinstance(msg, GetStats):
            conn.send(core.stats(msg.token))
        else:
            log.error("unknown message %r ignored", type(msg).__name__)
