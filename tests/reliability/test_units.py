"""The reliability rules that need no server: the protocol edge, the session's timers, admission and rate
limits, the Origin rule, token expiry, the supervisor's decisions, and the engine process's command loop
(with a stand-in core, over a real pipe)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import threading

import pytest

from voxrt.engine.messages import (AppendText, CancelRequest, EngineStats, GetStats, Heartbeat, HeartbeatAck,
                                   RequestCancelled, RequestFailed, SubmitRequest)
from voxrt.engine.process import OUT_OF_MEMORY_HINT, _Hub, scrub_text, start_failure_message
from voxrt.engine.supervisor import SupervisorConfig, Supervision
from voxrt.gateway.admission import Admission, Busy, TokenBucket
from voxrt.gateway.auth import Authenticator
from voxrt.gateway.realtime import origin_allowed
from voxrt.protocol.actions import CloseConnection, SendText
from voxrt.protocol.config import Limits
from voxrt.protocol.errors import ProtocolError
from voxrt.protocol.events import parse_client_message
from voxrt.protocol.session import Session

LONE = "\ud800"


# ---- the protocol edge ---------------------------------------------------------------------------------------


def test_lone_surrogates_in_text_are_replaced_and_a_real_pair_is_kept():
    event = parse_client_message(json.dumps({"type": "text", "context_id": "c", "text": f"hi {LONE} \U0001F600"}))
    assert event.text == "hi \ufffd \U0001F600"
    event.text.encode("utf-8")  # encodable: the tokenizer and every echo can take it


@pytest.mark.parametrize("message, field", [
    ({"type": "text", "context_id": f"c{LONE}", "text": "x"}, "context_id"),
    ({"type": "cancel", "context_id": "\udfff"}, "context_id"),
    ({"type": "session.start", "voice": LONE}, "voice"),
    ({"type": "session.start", "output": {"codec": LONE}}, "output"),
    ({"type": "ping", "id": LONE}, "id"),
])
def test_lone_surrogates_elsewhere_are_refused_with_an_error_that_can_be_sent(message, field):
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(json.dumps(message))
    error = caught.value
    assert error.code == "invalid_message" and error.field == field and not error.fatal
    assert error.context_id is None  # never echoed: it could not be encoded
    error.message.encode("utf-8")


def test_a_session_answers_a_surrogate_context_id_with_a_sendable_error():
    session = Session("s", Limits(), ["default"], "default", ["tiny"], "tiny", 0.0)
    session.receive_text(json.dumps({"type": "session.start"}), 0.0)
    actions = session.receive_text(json.dumps({"type": "text", "context_id": f"a{LONE}", "text": "hi"}), 1.0)
    assert len(actions) == 1 and isinstance(actions[0], SendText)
    reply = json.loads(actions[0].data.encode("utf-8"))
    assert reply["code"] == "invalid_message" and "context_id" not in reply


def test_engine_text_is_scrubbed_of_lone_surrogates():
    assert scrub_text(f"a{LONE}b\udfffc") == "a\ufffdb\ufffdc"
    assert scrub_text("plain \U0001F600") == "plain \U0001F600"


# ---- session timers ------------------------------------------------------------------------------------------


def _closes(actions, code: int) -> bool:
    return any(isinstance(a, CloseConnection) and a.code == code for a in actions)


def test_an_engine_out_of_gpu_memory_at_start_up_says_what_to_change():
    """A GPU out of memory while the graphs are captured (64 chunks a codec launch on an H100) names the flags that
    free memory; any other start-up failure is reported as it is."""
    import torch  # noqa: PLC0415

    message = start_failure_message(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 610.00 MiB."))
    assert message.startswith(f"engine failed to start: {OUT_OF_MEMORY_HINT}. OutOfMemoryError: CUDA out of memory")
    assert "--max-codec-batch" in message and "--num-pages" in message
    assert start_failure_message(ValueError("bad checkpoint")) == "engine failed to start: ValueError: bad checkpoint"


def test_a_socket_that_never_starts_a_session_is_closed_after_the_start_timeout():
    session = Session("s", Limits(start_timeout_s=5), ["default"], "default", ["tiny"], "tiny", 0.0)
    session.receive_text("garbage keeps the inactivity timer fresh", 4000.0)
    assert session.poll(4900.0) == []
    assert _closes(session.poll(5000.0), 4008)


def test_inactivity_does_not_close_a_session_whose_open_context_is_being_spoken():
    session = Session("s", Limits(inactivity_timeout_s=2), ["default"], "default", ["tiny"], "tiny", 0.0)
    session.receive_text(json.dumps({"type": "session.start"}), 0.0)
    session.receive_text(json.dumps({"type": "text", "context_id": "a", "text": "long turn "}), 0.0)
    for t in range(1000, 10_000, 1000):  # the context stays OPEN (no context.end) while its audio flows
        assert session.poll(float(t), is_sending_audio=True) == []
    assert _closes(session.poll(12_500.0), 4008)  # silence on both sides: timed out as before


# ---- admission and rate limits -------------------------------------------------------------------------------


def test_admission_shares_slots_queues_fifo_and_refuses_with_retry_after():
    async def scenario():
        admission = Admission(max_active=2, max_queued=1, queue_timeout_s=5, retry_after_ms=700)
        await admission.acquire()
        await admission.acquire()
        queued = asyncio.ensure_future(admission.acquire())
        await asyncio.sleep(0)
        assert admission.num_queued == 1
        with pytest.raises(Busy) as busy:  # the queue is full
            await admission.acquire()
        assert busy.value.retry_after_ms == 700
        admission.release()  # the slot moves to the waiter
        await queued
        assert admission.num_active == 2 and admission.num_queued == 0
        short = Admission(max_active=1, max_queued=4, queue_timeout_s=0.05)
        await short.acquire()
        with pytest.raises(Busy):  # waited its time, then refused
            await short.acquire()
        assert short.num_queued == 0 and short.num_refused == 1
        short.release()
        assert short.num_active == 0

    asyncio.run(scenario())


def test_token_bucket_allows_bursts_then_the_rate():
    bucket = TokenBucket(rate=100, burst=200, now_s=0.0)
    assert all(bucket.delay_s(0.0) == 0 for _ in range(200))
    assert bucket.delay_s(0.0) == pytest.approx(0.01)
    assert bucket.delay_s(1.0) == 0  # a second later 100 tokens came back


@pytest.mark.parametrize("origin, host, allowed, ok", [
    (None, "127.0.0.1:8000", (), True),  # not a browser
    ("http://127.0.0.1:8000", "127.0.0.1:8000", (), True),  # same origin
    ("https://evil.example", "127.0.0.1:8000", (), False),
    ("null", "127.0.0.1:8000", (), False),
    ("https://app.example", "127.0.0.1:8000", ("https://app.example/",), True),
    ("https://evil.example", "127.0.0.1:8000", ("*",), True),
])
def test_origin_rule(origin, host, allowed, ok):
    assert origin_allowed(origin, host, allowed) is ok


def test_a_sub_second_token_is_valid_until_its_ttl_has_passed():
    auth = Authenticator(("key",))
    token, expires = auth.mint(0.5, now_s=1000.9)
    assert expires >= 1001.4
    assert auth.check_token(token, now_s=1001.3)
    assert not auth.check_token(token, now_s=expires)


def test_supervision_calls_an_unanswering_engine_frozen_and_backs_off():
    sup = Supervision(SupervisorConfig(heartbeat_timeout_s=3, restart_backoff_s=0.5, max_restart_backoff_s=4,
                                       stable_after_s=60))
    sup.on_ready(0.0)
    sup.on_ack(1.0)
    assert not sup.is_frozen(3.9) and sup.is_frozen(4.1)
    assert [sup.restart_delay_s(10.0) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    sup.on_ready(20.0)
    assert sup.restart_delay_s(100.0) == 0.5  # it had stayed up: the backoff starts over


# ---- the engine process's command loop -------------------------------------------------------------------------


class _Core:
    """A stand-in core whose tokenizer, like a real one, cannot encode lone surrogates."""

    info = None

    def __init__(self) -> None:
        self.requests: dict[str, str] = {}
        self.num_integrity_checks = 0

    def submit(self, msg):
        self.requests[msg.request_id] = ""
        if msg.text:
            self.append_text(msg.request_id, msg.text, msg.is_text_final)

    def append_text(self, request_id, text, is_final):
        text.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
        if text == "boom":
            raise RuntimeError("a tokenizer bug")
        self.requests[request_id] += text
        return True

    def cancel(self, request_id):
        return self.requests.pop(request_id, None) is not None

    def has_work(self):
        return False

    def stats(self, token=0, check_pools=True):
        self.num_integrity_checks += check_pools
        return EngineStats(token, 0, 0, len(self.requests), 1, 1, 1, 1, 0, 0, True)


def test_a_command_that_raises_fails_only_its_request_and_the_loop_answers_heartbeats_and_stats():
    parent, child = mp.Pipe()
    core = _Core()
    hub = _Hub(core, child, None)
    for msg in (SubmitRequest("a", "default", text="fine"), SubmitRequest("b", "default"),
                AppendText("b", "boom"), SubmitRequest("c", "default", text=f"x{LONE}"), AppendText("a", f"{LONE}!"),
                Heartbeat(7), GetStats(1), GetStats(2, check_pools=True), CancelRequest("b")):
        hub._handle(child, msg)
    replies = [parent.recv() for _ in range(5)]
    # the heartbeat's answer may go ahead of the rest (the sender sends request-less messages first); the rest
    # keep the loop's order
    assert HeartbeatAck(7) in replies
    replies.remove(HeartbeatAck(7))
    assert replies[0] == RequestFailed("b", "invalid_request", replies[0].message) and "RuntimeError" in replies[0].message
    assert isinstance(replies[1], EngineStats) and isinstance(replies[2], EngineStats)
    assert core.num_integrity_checks == 1  # only the stats that asked for it ran the pool check
    assert replies[3] == RequestCancelled("b")
    assert core.requests == {"a": "fine\ufffd!", "c": "x\ufffd"}  # lone surrogates scrubbed, both still served
    assert set(hub.requests) == {"a", "c"}


def test_the_engine_process_loop_runs_on_after_a_raising_step():
    parent, child = mp.Pipe()

    class Core(_Core):
        steps = 0

        def has_work(self):
            return self.steps < 5

        def step(self):
            self.steps += 1
            raise RuntimeError("a step bug outside the core's own handling")

    core = Core()
    hub = _Hub(core, child, None)
    hub.requests["r"] = child
    core.requests["r"] = ""
    for _ in range(5):
        hub._step()
    assert parent.recv() == RequestFailed("r", "request_failed", "the engine step generating this request failed")
    assert "r" not in core.requests and not hub.requests
    threading.Thread(target=parent.close).start()


def test_commands_past_a_drains_bound_wait_their_turn_and_a_client_sending_garbage_is_dropped(monkeypatch):
    """The hub reads a connection in bulk (voxrt/engine/wire.py) but handles at most MAX_COMMANDS_PER_DRAIN a
    turn: the rest wait, in order, for the next. Bytes that are no message end that client's connection (its
    requests cancelled), and the owner's end the engine, as a closed connection does."""
    import collections
    import os

    from voxrt.engine import process
    from voxrt.engine.wire import FrameReader

    monkeypatch.setattr(process, "MAX_COMMANDS_PER_DRAIN", 2)
    parent, child = mp.Pipe()
    hub = _Hub(_Core(), child, None)
    for i in range(5):
        parent.send(Heartbeat(i))
    assert hub._drain(child)
    assert len(hub.unhandled[child]) == 3  # read, not handled yet
    assert hub._drain(child, readable=False) and hub._drain(child, readable=False)
    assert not hub.unhandled[child]
    assert [parent.recv() for _ in range(5)] == [HeartbeatAck(i) for i in range(5)]

    other, other_end = mp.Pipe()  # a second client, as the accept thread adds one
    hub.conns.append(other)
    hub.inboxes[other], hub.unhandled[other], hub.num_submits[other] = FrameReader(other), collections.deque(), 0
    hub.requests["x"] = other
    hub.core.requests["x"] = ""
    os.write(other_end.fileno(), b"\0\0\0\3xyz")  # a length and three bytes that are no pickle
    assert hub._drain(other)  # the engine goes on
    assert other not in hub.conns and other not in hub.inboxes and "x" not in hub.requests
    assert "x" not in hub.core.requests  # its request was cancelled
    os.write(parent.fileno(), b"\0\0\0\3xyz")
    with pytest.raises(EOFError):  # the owner's garbage ends the engine like the owner's going away
        hub._drain(child)
    hub.outbox.close()
