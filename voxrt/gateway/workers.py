"""`voxrt serve --workers N`: N gateway processes in front of one engine process.

One Python event loop paces, encodes and sends every frame of its sessions, so a gateway process tops out
at one core; the engine process has its own. With N workers:

- this (parent) process starts the engine with a listening Unix socket (`EngineClient.start(listen=...)`,
  voxrt/engine/process.py) and a random authkey, and keeps the engine's pipe: it owns the engine;
- each worker is a spawned process running the usual app and uvicorn on its own socket bound to the same
  port with SO_REUSEPORT, so the kernel spreads new connections over the workers (Linux hashes each
  connection to one of the listening sockets); its lifespan joins the engine with `EngineClient.connect`;
- a worker's sessions, limits (`--max-sessions` is per worker) and /metrics are its own. A worker that dies
  takes its sessions with it (the engine cancels their requests); the others go on.

The same split runs many gateways per GPU node: any process with the socket path and the authkey can join.

With `--dp-size N` the parent starts the N replicas (engine/replicas.py), each listening on its own socket
(`engine-<i>.sock` in the temporary directory), and every worker joins all of them (`ReplicaSet.connect`):
each worker routes its own new contexts by headroom over the same pushed load, counting its own unreported
submits (each engine echoes every connection's own count). A replica's restart is the parent's (its
supervisor); the workers reconnect to it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import secrets
import signal
import socket
import tempfile

from voxrt.engine.client import EngineClient
from voxrt.engine.messages import EngineConfig
from voxrt.engine.replicas import ReplicaSet
from voxrt.engine.supervisor import SupervisorConfig
from voxrt.gateway.config import GatewayConfig
from voxrt.gateway.event_loop import run as run_on_loop

log = logging.getLogger("voxrt.gateway.workers")


def reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _worker_main(gateway: GatewayConfig, engine_paths: list[str], authkey: bytes, host: str, port: int,
                 log_level: str, per_message_deflate: bool, ready) -> None:
    from voxrt.gateway.server import make_server  # noqa: PLC0415
    from voxrt.logs import setup_child_logging  # noqa: PLC0415

    setup_child_logging(f"gateway[{os.getpid()}]")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops workers with SIGTERM, once
    server = make_server(gateway, None, host, port, log_level, per_message_deflate,
                         engine_address=([(path, authkey) for path in engine_paths] if len(engine_paths) > 1
                                         else (engine_paths[0], authkey)), quiet=True)
    sock = reuseport_socket(host, port)
    original_startup = server.startup

    async def startup(sockets=None):
        await original_startup(sockets=sockets)
        ready.put(os.getpid() if server.started else None)

    server.startup = startup
    server.run(sockets=[sock])


def serve_workers(gateway: GatewayConfig, engine: EngineConfig, host: str, port: int, num_workers: int,
                  log_level: str = "warning", per_message_deflate: bool = False, engine_socket: str | None = None,
                  authkey: bytes | None = None) -> int:
    """Runs the engine here and `num_workers` gateway processes; returns when they are stopped (SIGINT/SIGTERM).
    `engine_socket` / `authkey`: where the engine listens and its key (default: a temporary path, a random
    key), so that other processes (a load generator driving the engine directly) can join it too."""
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if port == 0:
        raise ValueError("--workers needs a fixed --port: each worker binds it with SO_REUSEPORT")
    if engine_socket and gateway.dp_size > 1:
        raise ValueError("--engine-socket names one engine's socket; with --dp-size the replicas listen on "
                         "sockets of their own (leave --engine-socket out)")
    if engine_socket:
        engine_paths = [engine_socket]
    else:
        folder = tempfile.mkdtemp(prefix="voxrt-engine-")
        engine_paths = [os.path.join(folder, "engine.sock")] if gateway.dp_size == 1 else [
            os.path.join(folder, f"engine-{i}.sock") for i in range(gateway.dp_size)]
    engine_path = engine_paths[0]
    authkey = authkey or secrets.token_bytes(32)
    ctx = mp.get_context("spawn")
    stop = asyncio.Event()

    async def main() -> int:
        supervisor = SupervisorConfig(heartbeat_timeout_s=gateway.engine_heartbeat_timeout_s)
        if gateway.dp_size > 1:  # restarted on the same paths; workers rejoin
            client = await ReplicaSet.start(engine, gateway.dp_size, supervisor=supervisor,
                                            listen=[(path, authkey) for path in engine_paths])
        else:
            client = await EngineClient.start(engine, listen=(engine_path, authkey), supervisor=supervisor)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        ready = ctx.Queue()
        workers = [ctx.Process(target=_worker_main, name=f"voxrt-gateway-{i}", daemon=False,
                               args=(gateway, engine_paths, authkey, host, port, log_level, per_message_deflate,
                                     ready))
                   for i in range(num_workers)]
        for w in workers:
            w.start()
        try:
            pids = [await loop.run_in_executor(None, ready.get, True, 120) for _ in workers]
            if None in pids:
                log.error("a gateway worker failed to start")
                return 1
            shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
            replicas = f", {gateway.dp_size} engine replicas" if gateway.dp_size > 1 else ""
            print(f"voxrt ready: model {client.info.name}{replicas}, {num_workers} gateway processes (pids "
                  f"{', '.join(map(str, pids))})\n  http://{shown}:{port}/v1/audio/speech   "
                  f"ws://{shown}:{port}/v1/realtime", flush=True)
            while not stop.is_set():
                if not all(w.is_alive() for w in workers):
                    log.error("a gateway worker exited; stopping")
                    return 1
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
            return 0
        finally:
            for w in workers:
                if w.is_alive():
                    os.kill(w.pid, signal.SIGTERM)
            for w in workers:  # each drains on SIGTERM (gateway/drain.py): its grace period, then uvicorn's 5 s
                await loop.run_in_executor(None, w.join, gateway.drain_grace_s + 15)
                if w.is_alive():
                    w.kill()
            await client.close()
            if engine_socket is None:
                try:
                    os.rmdir(os.path.dirname(engine_path))  # the listener removed its socket file
                except OSError:
                    pass

    return run_on_loop(main(), gateway.loop)
