"""The engine process: one per GPU. It owns an `EngineCore` and runs the step loop; commands and results
travel as the typed records of `voxrt.engine.messages` over a pipe.

The gateway's event loop never shares a GIL with the step loop. torch is imported only in the child.
"""

from __future__ import annotations

import logging
import os
from multiprocessing.connection import Connection

from voxrt.engine.errors import EngineError
from voxrt.engine.messages import (AppendText, CancelRequest, EngineConfig, EngineFatal, EngineReady, GetStats,
                                   RequestCancelled, RequestFailed, SetPlayback, Shutdown, SubmitRequest)

log = logging.getLogger("voxrt.engine.process")

IDLE_POLL_S = 0.05


def engine_main(config: EngineConfig, conn: Connection, log_level: int = logging.INFO) -> None:
    """Entry point of the spawned engine process."""
    logging.basicConfig(level=log_level, format=f"%(asctime)s engine[{os.getpid()}] %(levelname)s %(message)s")
    try:
        from voxrt.engine.runtime.core import EngineCore  # noqa: PLC0415 (torch only in the child)

        core = EngineCore(config)
        core.warmup()
    except EngineError as exc:
        conn.send(EngineFatal(exc.code, exc.message))
        return
    except Exception as exc:  # noqa: BLE001 (report any start-up failure to the parent, then exit)
        log.exception("engine failed to start")
        conn.send(EngineFatal("engine_unavailable", f"engine failed to start: {type(exc).__name__}: {exc}"))
        return
    conn.send(EngineReady(core.info))
    try:
        _loop(core, conn)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        log.info("client went away; engine exits")
    finally:
        core.close()


def _loop(core, conn: Connection) -> None:
    was_busy = False
    while True:
        busy = core.has_work()
        if conn.poll(0 if busy else IDLE_POLL_S):
            while True:
                msg = conn.recv()
                if isinstance(msg, Shutdown):
                    log.info("shutdown requested")
                    return
                _handle(core, conn, msg)
                if not conn.poll(0):
                    break
            busy = core.has_work()
        if busy:
            for event in core.step():
                conn.send(event)
        elif was_busy:  # just went idle: a good moment for the pool's integrity check
            if not core.stats().pool_ok:
                log.error("KV page or slot pool integrity check failed while idle")
        was_busy = busy


def _handle(core, conn: Connection, msg) -> None:
    if isinstance(msg, SubmitRequest):
        try:
            core.submit(msg)
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
        conn.send(RequestCancelled(msg.request_id))  # acknowledged even when already gone (idempotent)
    elif isinstance(msg, GetStats):
        conn.send(core.stats(msg.token))
    else:
        log.error("unknown message %r ignored", type(msg).__name__)
