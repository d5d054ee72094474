"""Several engine processes behind one `ReplicaSet` (voxrt/engine/replicas.py): devices per replica, routing
by headroom from the pushed load reports, cancel on the right replica, a replica killed and restarted while
the other serves. The engines are the stand-in core (no torch: a process starts in about a second); the
gateway's suite (tests/gateway/test_dp_replicas.py) runs the same over tiny-lite engines."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from voxrt.engine.errors import EngineDeadError
from voxrt.engine.messages import EngineConfig
from voxrt.engine.replicas import ReplicaSet, replica_configs, sum_stats
from voxrt.engine.supervisor import SupervisorConfig

STANDIN = EngineConfig(model="standin", max_batch_size=8, standin_speed=4.0)
SUPERVISOR = SupervisorConfig(heartbeat_interval_s=0.25, heartbeat_timeout_s=10.0, restart_backoff_s=0.1)


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def until(predicate, timeout_s: float = 20.0, what: str = "condition") -> None:
    """Polls `predicate` (load reports arrive every ~50 ms); no timing is asserted, only an upper bound."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_replica_devices():
    assert replica_configs(STANDIN, 1) == [STANDIN]
    auto = replica_configs(EngineConfig(device="auto"), 3)
    assert [c.device for c in auto] == ["auto:0", "auto:1", "auto:2"]  # cuda:i where CUDA is, else the CPU
    assert [c.device for c in replica_configs(EngineConfig(device="cuda"), 2)] == ["cuda:0", "cuda:1"]
    assert [c.device for c in replica_configs(EngineConfig(device="cpu"), 2)] == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="names one device"):
        replica_configs(EngineConfig(device="cuda:1"), 2)
    with pytest.raises(ValueError, match=">= 1"):
        replica_configs(STANDIN, 0)


def test_stats_sum_over_replicas():
    from voxrt.engine.messages import EngineStats  # noqa: PLC0415

    a = EngineStats(1, 1, 2, 3, 10, 5, 4, 2, 100, 0, True, codec_launches=(("loop", 3),), chunks_late=1)
    b = dataclasses.replace(a, pool_ok=False, codec_launches=(("loop", 2), ("urgent", 1)), chunks_late=2,
                            lm_steps_by_sm_mode=(7, 3))
    total = sum_stats([dataclasses.replace(a, lm_steps_by_sm_mode=(5,)), b])
    assert (total.num_running, total.num_pages_total, total.chunks_late, total.pool_ok) == (4, 20, 3, False)
    assert total.codec_launches == (("loop", 5), ("urgent", 1))
    assert total.lm_steps_by_sm_mode == (12, 3)  # per mode index


def test_new_contexts_go_to_the_replica_with_headroom_and_cancel_reaches_theirs():
    async def scenario():
        replicas = await ReplicaSet.start(STANDIN, 2, supervisor=SUPERVISOR)
        try:
            await until(lambda: all(c.load is not None for c in replicas.replicas), what="first load reports")
            busy = replicas.replicas[0]
            held = [await busy.submit(text="held ", final=False) for _ in range(4)]  # live until cancelled
            await until(lambda: busy.load.num_requests == 4 and busy.num_unreported_submits == 0,
                        what="replica 0 reporting its 4 requests")
            # replica 0: 4 of 8 batch slots taken (headroom 0.5); replica 1 idle. The next four contexts go to
            # replica 1 (each one routed counts against it at once: 1, 7/8, 6/8, 5/8 > 0.5), the fifth ties at
            # 0.5 and goes to the one with fewer requests... equal, so the lower index
            engines = [replicas.for_context() for _ in range(5)]
            assert [e.replica for e in engines] == [1, 1, 1, 1, 0]
            rids = [await e.submit(text="routed ", final=False) for e in engines]
            assert replicas.num_routed == [1, 4]
            await until(lambda: replicas.replicas[1].load.num_requests == 4, what="replica 1's 4 requests")
            # cancel through each context's engine reaches the replica that holds it: everything returns
            for engine, rid in zip(engines, rids):
                await engine.cancel(rid)
            for rid in held:
                await busy.cancel(rid)
            assert replicas.num_streams == 0
            stats = await replicas.replica_stats()
            assert [s.num_requests for s in stats] == [0, 0]
            assert (await replicas.stats()).num_requests == 0
        finally:
            await replicas.close()

    run(scenario())


def test_a_killed_replica_fails_only_its_requests_restarts_and_serves_again():
    async def scenario():
        replicas = await ReplicaSet.start(STANDIN, 2, supervisor=SUPERVISOR)
        try:
            first, second = replicas.for_context(), replicas.for_context()
            assert {first.replica, second.replica} == {0, 1}
            doomed, survivor = (first, second) if first.replica == 0 else (second, first)
            params = {"num_frames": 60}  # ~1.2 s at 4x real time: still running when the kill comes
            rid_doomed = await doomed.submit(text="doomed", final=True, params=params)
            rid_survivor = await survivor.submit(text="survivor", final=True, params=params)
            doomed_stream, survivor_stream = doomed.stream(rid_doomed), survivor.stream(rid_survivor)
            await doomed_stream.__anext__()  # both have started
            await survivor_stream.__anext__()
            replicas.kill(0)
            with pytest.raises(EngineDeadError) as err:
                async for _ in doomed_stream:
                    pass
            assert err.value.code == "engine_unavailable"
            frames = 0
            async for chunk in survivor_stream:  # the other replica's request completes
                frames = chunk.first_frame + chunk.num_frames
            assert frames == 60
            assert replicas.is_ready  # one replica is enough
            if not replicas.replicas[0].is_ready:  # while replica 0 restarts, new contexts avoid it
                assert replicas.for_context().replica == 1
            await until(lambda: replicas.replicas[0].is_ready, what="replica 0's restart")
            assert replicas.num_restarts == 1 and replicas.replicas[0].num_restarts == 1
            await until(lambda: replicas.replicas[0].load is not None, what="the restarted replica's report")
            again = replicas.replicas[0]
            rid = await again.submit(text="again", final=True, params={"num_frames": 8})
            assert sum([c.num_frames async for c in again.stream(rid)]) == 8
        finally:
            await replicas.close()

    run(scenario())


class _Down:
    """An engine client that is not ready (starting or restarting), as the router sees it."""

    is_ready, load, num_submits, num_unreported_submits, num_restarts = False, None, 0, 0, 0


def test_no_ready_replica_is_a_clear_error():
    replicas = ReplicaSet([_Down(), _Down()])
    assert not replicas.is_ready
    with pytest.raises(EngineDeadError, match="no engine replica is ready"):
        replicas.for_context()


def test_a_replica_that_cannot_start_names_itself():
    async def scenario():
        with pytest.raises(EngineDeadError) as err:  # the stand-in refuses a speed of 0 at start-up
            await ReplicaSet.start(dataclasses.replace(STANDIN, standin_speed=0.0), 2)
        assert str(err.value).startswith("replica 0 (auto:0): engine failed to start")

    run(scenario())


class _Client:
    """An engine client as the router sees it: ready, with or without a first load report."""

    is_ready, num_restarts, num_contexts = True, 0, 0

    def __init__(self, load=None) -> None:
        self.load, self.num_submits = load, 0

    @property
    def num_unreported_submits(self) -> int:
        return self.num_submits - (self.load.num_submits_seen if self.load is not None else 0)

    def for_context(self):
        self.num_contexts += 1
        return self


def test_a_burst_spreads_even_before_every_replica_has_reported():
    """A replica whose first report has not arrived is measured by what was routed to it against the batch the
    others report, so a burst right after start still alternates."""
    from voxrt.engine.messages import EngineLoad  # noqa: PLC0415

    idle = EngineLoad(0, 0, 0, 0, 16, 16, None, 100, 100, 32, 0, 0)
    replicas = ReplicaSet([_Client(), _Client(idle)])
    assert [replicas.for_context().replica for _ in range(4)] == [0, 1, 0, 1]
