"""`ReplicaSet`: several engine processes (one per GPU) behind the face of one `EngineClient`.

    replicas = await ReplicaSet.start(EngineConfig(model="tiny"), num_replicas=2, supervisor=SupervisorConfig())
    engine = replicas.for_context()          # the replica with the most SLO headroom (headroom.py)
    rid = await engine.submit(text="Hello", final=True)   # this context's every request goes there
    async for chunk in engine.stream(rid): ...
    await replicas.close()

`voxrt serve --dp-size N` holds one of these where a single engine holds an `EngineClient`; the gateway reads
the same members either way (`info`, `is_ready`, `num_restarts`, `stats()`, `for_context()`, `close()`).

- Devices (`replica_configs`): replica i runs on `cuda:i` (`--device auto` or `cuda`; `auto` falls back to the
  CPU where there is no CUDA, so CI runs N CPU engines); `--device cpu` runs N CPU engines. An engine asked for
  a GPU the machine lacks fails its start with an error that says so (runtime/core.py, resolve_device).
- Routing (`for_context`): a new context is bound to one replica for all its requests (long-form
  continuations, segment requests, cancel, playback), chosen by `headroom.choose_replica` over each replica's
  latest pushed `EngineLoad` plus what this gateway sent since (its submits the report does not count, and
  contexts routed there that have not submitted yet: a reservation, dropped at the context's first submit or
  after `RESERVATION_S`). The returned `ReplicaClient` is that replica's `EngineClient` with the reservation
  attached; everything else passes through.
- Failure: each replica is an `EngineClient` with its own supervisor. One that dies fails only its own
  requests (`EngineDeadError`, `engine_unavailable`) and restarts with backoff; the others keep serving, and
  while it is not ready no new context goes to it. The set is ready when at least one replica is (`/readyz`).
- Counters: `stats()` sums the ready replicas' `EngineStats` (the gateway's existing totals); `replica_stats()`
  has them one by one. Per-replica load for /metrics is the pushed report: no round trip per scrape.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from voxrt.engine.client import EngineClient
from voxrt.engine.errors import EngineDeadError
from voxrt.engine.headroom import ReplicaLoad, choose_replica
from voxrt.engine.messages import EngineConfig, EngineStats
from voxrt.engine.supervisor import SupervisorConfig

log = logging.getLogger("voxrt.engine.replicas")

RESERVATION_S = 2.0  # a routed context that has not submitted counts against its replica this long at most


def replica_configs(config: EngineConfig, num_replicas: int) -> list[EngineConfig]:
    """One engine config per replica: replica i on device `cuda:i` (`auto:i` for --device auto: the engine
    takes cuda:i where CUDA is, else the CPU), or every one on the CPU. One replica: the config as it is."""
    if not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"--dp-size must be an integer >= 1, got {num_replicas!r}")
    if num_replicas == 1:
        return [config]
    if config.device in ("auto", "cuda"):
        return [dataclasses.replace(config, device=f"{config.device}:{i}") for i in range(num_replicas)]
    if config.device == "cpu":
        return [config] * num_replicas
    raise ValueError(f"--device {config.device} names one device; with --dp-size {num_replicas} use auto, cuda or "
                     f"cpu (replica i runs on cuda:i)")


class ReplicaClient:
    """One replica's `EngineClient` as a context sees it: every call passes through, and the context's
    routing reservation is dropped at its first submit (the client's own count takes over then)."""

    def __init__(self, client: EngineClient, index: int, release) -> None:
        self._client = client
        self.replica = index
        self._release = release  # drops the reservation; None once dropped

    async def submit(self, *args, **kwargs) -> str:
        request_id = await self._client.submit(*args, **kwargs)
        self.release()
        return request_id

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    def for_context(self) -> "ReplicaClient":
        return self

    def __getattr__(self, name: str):  # info, append_text, set_playback(_nowait), stream, cancel, ...
        return getattr(self._client, name)


class ReplicaSet:
    def __init__(self, clients: list[EngineClient]) -> None:
        if not clients:
            raise ValueError("a replica set needs at least one engine")
        self.replicas = list(clients)
        self._reservations: list[dict[int, float]] = [{} for _ in clients]  # per replica: token -> when routed
        self._next_token = 0

    @classmethod
    async def start(cls, config: EngineConfig, num_replicas: int, *, supervisor: SupervisorConfig | None = None,
                    log_level: int = logging.INFO, startup_timeout_s: float = 600.0,
                    listen: list[tuple[str, bytes]] | None = None) -> "ReplicaSet":
        """Starts `num_replicas` engine processes at once (`replica_configs`) and waits for all of them; when
        one fails to start, the others are shut down and its error is raised (naming the replica). `listen`:
        one (Unix socket path, authkey) per replica, for gateway workers that `connect` (gateway/workers.py)."""
        configs = replica_configs(config, num_replicas)
        if listen is not None and len(listen) != num_replicas:
            raise ValueError(f"listen needs one address per replica: {len(listen)} for {num_replicas}")
        log.info("starting %d engine replicas: model %s on %s", num_replicas, config.model,
                 ", ".join(c.device for c in configs))
        results = await asyncio.gather(*(EngineClient.start(c, startup_timeout_s=startup_timeout_s,
                                                            log_level=log_level, supervisor=supervisor,
                                                            listen=listen[i] if listen else None)
                                         for i, c in enumerate(configs)), return_exceptions=True)
        return await cls._from_results(results, [c.device for c in configs])

    @classmethod
    async def connect(cls, addresses: list[tuple[str, bytes]], *, supervisor: SupervisorConfig | None = None,
                      timeout_s: float = 30.0) -> "ReplicaSet":
        """Joins running replicas that listen on Unix sockets (one gateway worker of `--workers` with
        `--dp-size`). Each engine's load reports count this connection's own submits, so the routing's
        unreported counts stay exact per worker while every worker reads the same load."""
        results = await asyncio.gather(*(EngineClient.connect(path, key, timeout_s=timeout_s, supervisor=supervisor)
                                         for path, key in addresses), return_exceptions=True)
        return await cls._from_results(results, [path for path, _ in addresses])

    @classmethod
    async def _from_results(cls, results: list, names: list[str]) -> "ReplicaSet":
        clients = [r for r in results if isinstance(r, EngineClient)]
        failures = [(i, r) for i, r in enumerate(results) if not isinstance(r, EngineClient)]
        if failures:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
            index, error = failures[0]
            if hasattr(error, "message"):  # a typed engine error: the same type, naming the replica
                error.message = f"replica {index} ({names[index]}): {error.message}"
                error.args = (error.message,)
            raise error
        models = {c.info.name for c in clients}
        if len(models) != 1:  # cannot happen with one config; a guard for connect()ed sets
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
            raise EngineDeadError(f"replicas serve different models: {sorted(models)}")
        return cls(clients)

    # ---- the EngineClient face the gateway reads -------------------------------------------------------------

    @property
    def info(self):
        """The served model (every replica serves the same); a ready replica's, so its `device` is live."""
        for client in self.replicas:
            if client.is_ready:
                return client.info
        return self.replicas[0].info

    @property
    def is_ready(self) -> bool:
        """At least one replica serves."""
        return any(c.is_ready for c in self.replicas)

    @property
    def is_alive(self) -> bool:
        return any(c.is_alive for c in self.replicas)

    @property
    def num_ready(self) -> int:
        return sum(1 for c in self.replicas if c.is_ready)

    @property
    def num_restarts(self) -> int:
        return sum(c.num_restarts for c in self.replicas)

    @property
    def num_streams(self) -> int:
        return sum(c.num_streams for c in self.replicas)

    def loads(self, now_s: float | None = None) -> list[ReplicaLoad]:
        """What the routing rule sees of each replica now."""
        now_s = time.monotonic() if now_s is None else now_s
        # replicas share one config: one that has not reported yet (just started) is measured against the
        # batch size the others report, by what was sent to it
        known_batch = max((c.load.max_batch_size for c in self.replicas if c.load is not None), default=1)
        loads = []
        for client, reserved in zip(self.replicas, self._reservations):
            for token in [t for t, made_s in reserved.items() if now_s - made_s > RESERVATION_S]:
                del reserved[token]  # a context that never submitted (closed with no text): not load any more
            report = client.load
            if report is None:  # a replica with no report yet (just started): counted by what was sent to it
                loads.append(ReplicaLoad(client.is_ready, known_batch,
                                         num_unreported=client.num_submits + len(reserved)))
                continue
            unreported = max(0, client.num_unreported_submits) + len(reserved)
            loads.append(ReplicaLoad(client.is_ready, report.max_batch_size, num_running=report.num_running,
                                     num_waiting=report.num_waiting, min_slack_ms=report.min_slack_ms,
                                     num_unreported=unreported, num_requests=report.num_requests))
        return loads

    def for_context(self) -> ReplicaClient:
        """The replica a new context goes to (most headroom), reserved for it until its first submit. Raises
        `EngineDeadError` when no replica is ready."""
        index = choose_replica(self.loads())
        if index is None:
            raise EngineDeadError("no engine replica is ready (all are starting or restarting); retry shortly")
        client = self.replicas[index].for_context()  # counts the context (num_contexts)
        token = self._next_token
        self._next_token += 1
        reserved = self._reservations[index]
        reserved[token] = time.monotonic()
        return ReplicaClient(client, index, lambda: reserved.pop(token, None))

    @property
    def num_routed(self) -> list[int]:
        """Contexts routed to each replica since start."""
        return [c.num_contexts for c in self.replicas]

    async def stats(self, timeout_s: float = 10.0, check_pools: bool = False) -> EngineStats:
        """The ready replicas' `EngineStats` summed (pool_ok: all of them). Raises when none is ready."""
        stats = [s for s in await self.replica_stats(timeout_s, check_pools) if s is not None]
        if not stats:
            raise EngineDeadError("no engine replica is ready")
        return sum_stats(stats)

    async def replica_stats(self, timeout_s: float = 10.0, check_pools: bool = False) -> list[EngineStats | None]:
        """Each replica's `EngineStats`, None for one that is not ready or did not answer in time."""
        async def one(client: EngineClient) -> EngineStats | None:
            if not client.is_ready:
                return None
            try:
                return await client.stats(timeout_s=timeout_s, check_pools=check_pools)
            except (EngineDeadError, asyncio.TimeoutError):
                return None
            except Exception:  # noqa: BLE001 (one replica's trouble must not hide the others' figures)
                log.warning("stats of an engine replica failed", exc_info=True)
                return None

        return list(await asyncio.gather(*(one(c) for c in self.replicas)))

    def kill(self, index: int = 0) -> None:
        """Kills replica `index`'s engine process at once (SIGKILL), as a crash would (tests)."""
        self.replicas[index].kill()

    async def close(self, timeout_s: float = 10.0) -> None:
        await asyncio.gather(*(c.close(timeout_s) for c in self.replicas), return_exceptions=True)


def sum_stats(stats: list[EngineStats]) -> EngineStats:
    """Counts and counters added field by field (codec launches per lane too); pool_ok only when all are."""
    first = stats[0]
    fields = {}
    for f in dataclasses.fields(EngineStats):
        values = [getattr(s, f.name) for s in stats]
        if f.name == "token":
            fields[f.name] = first.token
        elif f.name == "pool_ok":
            fields[f.name] = all(values)
        elif f.name == "codec_launches":
            lanes: dict[str, int] = {}
            for launches in values:
                for lane, count in launches:
                    lanes[lane] = lanes.get(lane, 0) + count
            fields[f.name] = tuple(sorted(lanes.items()))
        elif f.name == "lm_steps_by_sm_mode":  # per mode index; replicas with fewer modes add to the first ones
            width = max(len(v) for v in values)
            fields[f.name] = tuple(sum(v[i] for v in values if i < len(v)) for i in range(width))
        else:
            fields[f.name] = sum(values)
    return EngineStats(**fields)
