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

Whatever reaches it, the engine stays up: text is scrubbed of lone UTF-16 surrogates (which no tokenizer can
encode) before the core sees it, a command that raises fails only its request (`RequestFailed`, its pages and
slot returned), and a step that raises outside the core's own per-request handling fails the live requests
and the loop goes on. `Heartbeat`s are answered from the loop, between steps, so a frozen loop goes
unanswered and the client's supervisor restarts the process (voxrt/engine/supervisor.py).

Every `LOAD_REPORT_INTERVAL_S` the loop pushes each connection an `EngineLoad` (queue, batch, least stream
slack; `core.load()`, host-side state only) with that connection's count of submits taken, so a gateway that
routes new contexts over several engines (voxrt/engine/replicas.py) reads fresh load without asking.

Everything the loop sends goes out through one sender thread (`_Outbox`), in the loop's order but for first
chunks and request-less messages, which go ahead: a background codec launch's ~31 audio chunks (~140 KB each)
took milliseconds to pickle and write, and a write waits while the client's end of the pipe is full; on the
loop thread that left the GPU idle between LM steps (issue 13: all 21 gaps over 1 ms of a 96 req/s trace on the
H200 followed such a delivery, bench/results/2026-12-03-host-fill). A connection whose send fails is dropped by
the loop at its next turn (the owner's: the engine exits). The loop reads each ready connection in one read
and the sender writes what was queued meanwhile in one call per connection (voxrt/engine/wire.py): fewer
hand-overs of the GIL between them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import re
import threading
import time
from multiprocessing.connection import Connection, Listener, wait
from multiprocessing.reduction import ForkingPickler

from voxrt.engine.errors import EngineError
from voxrt.engine.messages import (AppendText, AudioChunk, CancelRequest, EngineConfig, EngineFatal, EngineLoad,
                                   EngineReady, GetStats, Heartbeat, HeartbeatAck, RequestCancelled, RequestFailed,
                                   SetPlayback, Shutdown, SubmitRequest)
from voxrt.engine.wire import FrameReader, send_payloads

log = logging.getLogger("voxrt.engine.process")

IDLE_POLL_S = 0.05
# The load report (`EngineLoad`) every connection gets unasked, for routing across replicas (replicas.py): a
# few hundred bytes 20 times a second per client, made from host-side state between steps (no device sync)
LOAD_REPORT_INTERVAL_S = 0.05
MAX_COMMANDS_PER_DRAIN = 1024
MAX_STEP_FAILURES_IN_ROW = 3  # steps that raise past the core, one after another: then every live request fails

_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")  # a str holds a surrogate only when it is unpaired


def scrub_text(text: str) -> str:
    """Lone surrogates (valid JSON escapes, not encodable as UTF-8) become U+FFFD, as WHATWG's UTF-8 encoder
    does; every other character passes unchanged."""
    return _LONE_SURROGATE.sub("\ufffd", text) if isinstance(text, str) else ""


# what to change when the GPU runs out of memory at start-up: the KV pages take half the memory free after the
# weights load (`runtime/core.py`, _default_num_pages), the CUDA graphs what they need after that (the codec's
# grow with --max-codec-batch x frames; on an H100 with max batch 128, 64 chunks did not fit:
# bench/results/2026-12-06-h100-hold-codec-batch/)
OUT_OF_MEMORY_HINT = ("the GPU ran out of memory at start-up: lower --max-codec-batch or --max-batch-size, or give the "
                      "KV cache fewer pages (--num-pages)")


def start_failure_message(exc: Exception) -> str:
    """The message an engine that could not start sends its parent: the exception, and for a GPU out of memory
    (torch.OutOfMemoryError, matched by name: this module imports no torch) what to change."""
    hint = f"{OUT_OF_MEMORY_HINT}. " if type(exc).__name__ == "OutOfMemoryError" else ""
    return f"engine failed to start: {hint}{type(exc).__name__}: {exc}"


def engine_main(config: EngineConfig, conn: Connection, log_level: int = logging.INFO,
                listen: tuple[str, bytes] | None = None) -> None:
    """Entry point of the spawned engine process. `listen`: (Unix socket path, authkey) for more clients."""
    from voxrt.logs import setup_child_logging  # noqa: PLC0415

    setup_child_logging(f"engine[{os.getpid()}]", log_level)  # the CLI's --log-level / --log-json, via the env
    try:
        core = _build_core(config)
        core.warmup()
        from voxrt.gcpause import settle_heap  # noqa: PLC0415 (stdlib only, no torch)

        frozen = settle_heap()  # start-up's objects out of later collections (voxrt/gcpause.py)
        if frozen:
            log.info("start-up heap settled: %d objects frozen out of later garbage collections", frozen)
        listener = Listener(listen[0], family="AF_UNIX", authkey=listen[1]) if listen else None
    except EngineError as exc:
        conn.send(EngineFatal(exc.code, exc.message))
        return
    except Exception as exc:  # noqa: BLE001 (report any start-up failure to the parent, then exit)
        log.exception("engine failed to start")
        conn.send(EngineFatal("engine_unavailable", start_failure_message(exc)))
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


class _Outbox:
    """The engine's sends, off the step loop: `put(conn, msg)` queues, one daemon thread sends (pickling and the
    write: wire.py). A connection whose send fails is reported once through `broken()` and later messages to it
    are dropped. `close()` sends what is queued, then stops.

    The thread takes what is queued in batches of up to `BATCH_BYTES` of audio and writes each connection's part
    of a batch in one `writev`. Each write releases the GIL, and taking it back while the step loop runs Python
    waits up to the interpreter's switch interval (5 ms): one write a message held a codec launch's ~31 chunks
    behind ~31 such waits (engine -> gateway p50 4.4 ms, p99 25.8 ms for later chunks at max batch 256 on an
    H100, bench/results/2026-12-07-h100-b256-paths/).

    Two queues, each in the loop's order: a request's first chunk (its first audio, a few KB) and the messages of
    no request (load reports, heartbeat answers) go before the rest, so that first audio does not wait behind a
    codec launch's ~31 later chunks of ~140 KB of other requests (up to 16 ms at the p99 at max batch 256 on an
    H100, bench/results/2026-12-07-h100-b256-paths/). A request's own messages keep their order: its first chunk
    is the first thing it is sent, and everything after it (later chunks, its failure or cancellation) shares
    the other queue."""

    BATCH_BYTES = 1 << 20  # of audio a batch (at least one message): a first chunk queued meanwhile waits for
    # at most this much to be written ahead of it (~7 later chunks)

    def __init__(self) -> None:
        self._ready = threading.Condition(threading.Lock())
        self._first: collections.deque = collections.deque()  # first chunks, load reports, heartbeat answers
        self._rest: collections.deque = collections.deque()
        self._closing = False
        self._broken: queue.SimpleQueue = queue.SimpleQueue()
        self._dead: set[int] = set()  # id() of connections whose send failed (the sender thread's own)
        self._thread = threading.Thread(target=self._send_forever, name="voxrt-engine-send", daemon=True)
        self._thread.start()

    @staticmethod
    def goes_first(msg) -> bool:
        """A first chunk, or a message of no request: sent before the queued later chunks."""
        if isinstance(msg, AudioChunk):
            return msg.chunk_index == 0
        return isinstance(msg, (EngineLoad, HeartbeatAck))

    def put(self, conn: Connection, msg) -> None:
        with self._ready:
            (self._first if self.goes_first(msg) else self._rest).append((conn, msg))
            self._ready.notify()

    def broken(self) -> list[Connection]:
        """Connections whose send failed since the last call."""
        out = []
        while not self._broken.empty():
            out.append(self._broken.get())
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._thread.join(timeout_s)

    def _take(self) -> list:
        """The next batch to send, in sending order: every queued first message, then later ones up to
        `BATCH_BYTES` of audio (at least one message); waits for one; [] once closing and nothing is left."""
        with self._ready:
            while not (self._first or self._rest or self._closing):
                self._ready.wait()
            batch = list(self._first)
            self._first.clear()
            rest, size = self._rest, 0
            while rest and (size < self.BATCH_BYTES or not batch):
                item = rest.popleft()
                batch.append(item)
                pcm = getattr(item[1], "pcm", None)
                size += len(pcm) if pcm is not None else 0
            return batch

    def _send_forever(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return
            per_conn: dict[Connection, list[bytes]] = {}  # each connection's messages in order, pickled
            for conn, msg in batch:
                if id(conn) in self._dead:
                    continue
                try:
                    payload = ForkingPickler.dumps(msg)
                except Exception:  # noqa: BLE001 (a message that cannot be pickled must not stop the others)
                    log.exception("could not send %s", type(msg).__name__)
                    continue
                per_conn.setdefault(conn, []).append(payload)
            for conn, payloads in per_conn.items():
                try:
                    send_payloads(conn, payloads)
                except (OSError, ValueError):  # closed, reset, or a broken pipe
                    self._dead.add(id(conn))
                    self._broken.put(conn)


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
        # each connection's reads, in bulk (wire.py), and the commands read but not yet handled (a drain handles
        # at most MAX_COMMANDS_PER_DRAIN; the rest go first in the next turn)
        self.inboxes: dict[Connection, FrameReader] = {owner: FrameReader(owner)}
        self.unhandled: dict[Connection, collections.deque] = {owner: collections.deque()}
        self.requests: dict[str, Connection] = {}  # live request -> the connection that submitted it
        self._accepted: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self.pool_ok = True  # the last idle integrity check
        self.num_step_failures = 0
        self.num_submits: dict[Connection, int] = {owner: 0}  # per connection: echoed in its load reports
        self._next_load_s = 0.0
        self.outbox = _Outbox()
        # with the core's trace on (`--trace-dir`): the commands read between two steps, by type, and the time
        # spent reading them and routing the step's events, one `hub` record a step (`_trace_hub`)
        self.tracer = getattr(core, "tracer", None)
        self._commands: dict[str, int] | None = {} if self.tracer is not None else None
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
        try:
            self._run()
        finally:
            self.outbox.close()  # what the loop queued goes out before the engine exits

    def _run(self) -> None:
        was_busy = False
        while True:
            self._drop_broken()
            while not self._accepted.empty():
                conn = self._accepted.get()
                self.conns.append(conn)
                self.inboxes[conn] = FrameReader(conn)
                self.unhandled[conn] = collections.deque()
                self.num_submits[conn] = 0
            self._report_load()
            busy = self.core.has_work()
            left = [conn for conn in self.conns if self.unhandled[conn]]  # read, not yet handled: no waiting
            timeout = 0.0 if busy or left else IDLE_POLL_S
            wake_s = None if busy else self.core.seconds_to_wake()  # frames held for a deadline
            ready = wait(self.conns, timeout if wake_s is None else min(timeout, wake_s))
            read_ns = time.perf_counter_ns() if self.tracer is not None else 0  # reading, not waiting
            for conn in ready:
                if not self._drain(conn):
                    return
            for conn in left:
                if conn not in ready and conn in self.unhandled and not self._drain(conn, readable=False):
                    return
            busy = self.core.has_work()
            if busy:
                if self.tracer is not None:
                    read_ns = time.perf_counter_ns() - read_ns
                self._step(read_ns)
            elif was_busy:  # just went idle: a good moment for the pool's integrity check
                self.pool_ok = self.core.stats(check_pools=True).pool_ok
                if not self.pool_ok:
                    log.error("KV page or slot pool integrity check failed while idle")
            was_busy = busy

    def _report_load(self) -> None:
        """Every LOAD_REPORT_INTERVAL_S (checked once a loop: between steps, or each idle poll), the load report
        to every connection, each with its own count of submits taken."""
        now_s = time.monotonic()
        if now_s < self._next_load_s:
            return
        self._next_load_s = now_s + LOAD_REPORT_INTERVAL_S
        load = self.core.load()
        for conn in list(self.conns):
            self._send(conn, dataclasses.replace(load, num_submits_seen=self.num_submits.get(conn, 0)))

    def _step(self, read_ns: int = 0) -> None:
        """One step. The core fails the requests of a step that raises; an exception that escapes it anyway
        is logged, and after a few in a row every live request fails, so a broken state cannot spin.
        `read_ns`: the time the loop spent reading commands before it (traced)."""
        try:
            events = self.core.step()
        except Exception:  # noqa: BLE001 (the engine outlives any one step)
            self.num_step_failures += 1
            log.exception("engine step raised (%d in a row)", self.num_step_failures)
            if self.num_step_failures >= MAX_STEP_FAILURES_IN_ROW:
                for request_id in list(self.requests):
                    self._fail(request_id, "request_failed", "the engine step generating this request failed")
                self.num_step_failures = 0
            return
        self.num_step_failures = 0
        route_ns = time.perf_counter_ns() if self.tracer is not None else 0
        for event in events:
            self._route(event)
        if self.tracer is not None:
            self._trace_hub(read_ns, time.perf_counter_ns() - route_ns, len(events))

    def _trace_hub(self, read_ns: int, route_ns: int, num_events: int) -> None:
        """One `hub` record: what the engine process did around a step (the step record's `outside_ms`):
        reading commands (`read_ms`, `commands` by type) and routing the step's events to their clients."""
        commands, self._commands = self._commands, {}
        self.tracer.write(kind="hub", t_ms=time.monotonic_ns() / 1e6, read_ms=round(read_ns / 1e6, 3),
                          route_ms=round(route_ns / 1e6, 3), events=num_events, commands=commands)

    def _fail(self, request_id: str, code: str, message: str) -> None:
        """Ends one request (pages and slot return) and tells its client why."""
        try:
            self.core.cancel(request_id)
        except Exception:  # noqa: BLE001
            log.exception("cancelling failed request %s raised", request_id)
        conn = self.requests.pop(request_id, None)
        if conn is not None:
            self._send(conn, RequestFailed(request_id, code, message))

    def _send(self, conn: Connection, msg) -> None:
        self.outbox.put(conn, msg)

    def _drop_broken(self) -> None:
        """Connections whose send failed: the owner's ends the engine, another's is dropped (its requests
        cancelled)."""
        for conn in self.outbox.broken():
            if conn is self.owner:
                raise BrokenPipeError
            if conn in self.conns:
                self._drop(conn)

    def _drain(self, conn: Connection, readable: bool = True) -> bool:
        """Reads what `conn` has (one read: wire.py; `readable`: `wait` said it has bytes) and handles the
        commands read, at most MAX_COMMANDS_PER_DRAIN (a flood of commands must not starve the steps; the rest
        are handled next turn). False: the engine must exit (Shutdown, or its owner left)."""
        pending = self.unhandled[conn]
        try:
            if readable:
                pending.extend(self.inboxes[conn].read())
            for _ in range(min(len(pending), MAX_COMMANDS_PER_DRAIN)):
                msg = pending.popleft()
                if isinstance(msg, Shutdown):
                    log.info("shutdown requested")
                    return False
                if self._commands is not None:
                    name = type(msg).__name__
                    self._commands[name] = self._commands.get(name, 0) + 1
                self._handle(conn, msg)
            return True
        except Exception as exc:  # noqa: BLE001 (gone, reset, or bytes that are no message: the connection ends)
            if not isinstance(exc, (EOFError, OSError)):
                log.error("an engine connection sent what cannot be read (%s: %s); dropping it",
                          type(exc).__name__, exc)
            if conn is self.owner:
                raise EOFError from None
            self._drop(conn)
            return True

    def _drop(self, conn: Connection) -> None:
        """A gateway went away: its requests are cancelled now, so their pages and slots return."""
        self.conns.remove(conn)
        self.inboxes.pop(conn, None)
        self.unhandled.pop(conn, None)
        self.num_submits.pop(conn, None)
        gone = [rid for rid, owner in self.requests.items() if owner is conn]
        for request_id in gone:
            self.core.cancel(request_id)
            del self.requests[request_id]
        log.info("an engine client disconnected; %d of its requests cancelled", len(gone))

    def _route(self, event) -> None:
        if isinstance(event, AudioChunk):
            event = dataclasses.replace(event, done_ns=time.monotonic_ns())
            conn = self.requests.pop(event.request_id, None) if event.is_last else self.requests.get(event.request_id)
        elif isinstance(event, RequestFailed):
            conn = self.requests.pop(event.request_id, None)
        else:  # nothing else comes out of a step today; anything with a request id goes to its client
            request_id = getattr(event, "request_id", None)
            conn = self.requests.get(request_id, self.owner) if request_id is not None else self.owner
        if conn is None:
            return  # a request whose client went away meanwhile
        self._send(conn, event)

    def _handle(self, conn: Connection, msg) -> None:
        """One command. Whatever it holds, a failure ends at most the request it names."""
        try:
            self._command(conn, msg)
        except (EOFError, OSError, BrokenPipeError):
            raise
        except Exception as exc:  # noqa: BLE001 (a bad command fails its request, never the engine)
            request_id = getattr(msg, "request_id", None)
            log.warning("%s for request %s failed: %s: %s", type(msg).__name__, request_id, type(exc).__name__,
                        exc, exc_info=not isinstance(exc, (ValueError, TypeError)))
            if isinstance(request_id, str):
                if self.requests.get(request_id, conn) is conn:
                    self.requests.setdefault(request_id, conn)
                    self._fail(request_id, "invalid_request", f"the engine could not take this request's "
                                                              f"{type(msg).__name__}: {type(exc).__name__}")

    def _command(self, conn: Connection, msg) -> None:
        core = self.core
        if isinstance(msg, SubmitRequest):
            self.num_submits[conn] = self.num_submits.get(conn, 0) + 1  # counted whatever becomes of it
            if msg.text:
                msg = dataclasses.replace(msg, text=scrub_text(msg.text))
            if msg.request_id in self.requests:
                self._send(conn, RequestFailed(msg.request_id, "invalid_request",
                                        f"request id {msg.request_id!r} is already live"))
                return
            self.requests[msg.request_id] = conn
            try:
                core.submit(msg)
            except EngineError as exc:
                self._fail(msg.request_id, exc.code, exc.message)
        elif isinstance(msg, AppendText):
            if self.requests.get(msg.request_id) is conn:  # a request of another client, or one gone: dropped
                core.append_text(msg.request_id, scrub_text(msg.text), msg.is_final)
        elif isinstance(msg, Heartbeat):
            self._send(conn, HeartbeatAck(msg.token))
        elif isinstance(msg, SetPlayback):
            core.set_playback(msg.request_id, msg.played_samples, msg.anchor_ns, msg.is_stalled)
        elif isinstance(msg, CancelRequest):
            core.cancel(msg.request_id)
            if self.requests.get(msg.request_id) is conn:
                del self.requests[msg.request_id]
            self._send(conn, RequestCancelled(msg.request_id))  # acknowledged even when already gone (idempotent)
        elif isinstance(msg, GetStats):
            stats = core.stats(msg.token, check_pools=msg.check_pools)
            self._send(conn, stats if msg.check_pools else dataclasses.replace(stats, pool_ok=self.pool_ok))
        else:
            log.error("unknown message %r ignored", type(msg).__name__)
