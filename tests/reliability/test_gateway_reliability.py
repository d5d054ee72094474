"""The bounded reliability suite on a live server (tiny, CPU): whatever clients send or however they leave,
the server stays up, a canary session keeps being served, every resource returns, and a killed engine is
restarted without restarting the server. The long form: bench/reliability.py."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import time

import httpx
import pytest
import websockets

from conftest import num_server_tasks, on_server_loop
from voxrt.loadgen.chaos import DROP_POINTS, FuzzStats, canary, disconnect, fuzz_connection, fuzz_messages

NUM_FUZZ_MESSAGES = 5000
NUM_FUZZ_CONNECTIONS = 10
NUM_DISCONNECTS = 200
CAP_MS = 27 * 80  # one engine request of this server: 27 frames of 80 ms (max_seq_len 32, a 5-token prompt)


def run(coro, timeout_s: float = 300):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def metric(live, name: str, labels: str = "") -> float:
    text = httpx.get(f"{live.http}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"{name}{labels} ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _recv_json(ws, timeout_s: float = 60) -> dict:
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(message, str):
            return json.loads(message)


async def _until_done(ws, timeout_s: float = 120) -> tuple[list[bytes], list[dict]]:
    frames, messages = [], []
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout_s)
        if isinstance(message, bytes):
            frames.append(message)
        else:
            data = json.loads(message)
            messages.append(data)
            if data["type"] == "context.done":
                return frames, messages


def assert_all_returned(live, baseline_tasks: int | None = None, timeout_s: float = 60) -> None:
    """Engine requests, KV pages, codec slots, the engine client's streams, sessions, admission slots and
    (given a baseline) the server's asyncio tasks are all back where an idle server has them."""
    state = live.state
    deadline = time.monotonic() + timeout_s
    while True:
        stats = on_server_loop(live, lambda: state.engine.stats(check_pools=True))
        figures = {"requests": stats.num_requests, "pages_used": stats.num_pages_total - stats.num_pages_free,
                   "slots_used": stats.num_slots_total - stats.num_slots_free, "streams": state.engine.num_streams,
                   "sessions": state.num_sessions, "admitted": state.admission.num_active,
                   "queued": state.admission.num_queued}
        if baseline_tasks is not None:
            figures["tasks"] = num_server_tasks(live) - baseline_tasks
        if stats.pool_ok and not any(figures.values()):
            return
        assert time.monotonic() < deadline, f"resources not returned: {figures}, pool_ok {stats.pool_ok}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def baseline(live):
    assert_all_returned(live)
    return num_server_tasks(live)


def test_fuzzing_with_lone_surrogates_never_hurts_the_server_or_the_canary(live, baseline, caplog):
    async def scenario():
        rng = random.Random(19)
        messages = fuzz_messages(rng, NUM_FUZZ_MESSAGES)
        share = len(messages) // NUM_FUZZ_CONNECTIONS
        stats = FuzzStats()
        assert (await canary(live.ws))[0] == "completed"
        fuzzers = [fuzz_connection(live.ws, messages[i * share:(i + 1) * share], stats)
                   for i in range(NUM_FUZZ_CONNECTIONS)]
        during = asyncio.ensure_future(canary(live.ws, "The canary sings through the fuzz."))
        await asyncio.gather(*fuzzers)
        assert (await during)[0] == "completed"
        assert (await canary(live.ws))[0] == "completed"
        return stats

    with caplog.at_level(logging.INFO):
        stats = run(scenario())
    assert stats.num_sent == NUM_FUZZ_MESSAGES and stats.num_surrogates >= 500
    assert stats.errors.get("invalid_message", 0) > 0 and stats.errors.get("invalid_json", 0) > 0
    assert set(stats.close_codes) <= {1000, 1009, 4400, 4008, 4029}, stats.close_codes
    assert live.state.engine.num_restarts == 0 and live.state.engine.is_ready  # the engine never died
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
    assert_all_returned(live, baseline)


def test_abrupt_disconnects_at_every_stage_leave_nothing_behind_and_log_no_traceback(live, baseline, caplog):
    async def scenario():
        rng = random.Random(7)
        points = [DROP_POINTS[i % len(DROP_POINTS)] for i in range(NUM_DISCONNECTS)]
        for i in range(0, len(points), 20):
            await asyncio.gather(*(disconnect(live.ws, live.host, live.port, p, rng) for p in points[i:i + 20]),
                                 return_exceptions=False)
        assert (await canary(live.ws))[0] == "completed"

    with caplog.at_level(logging.INFO):
        run(scenario())
    assert_all_returned(live, baseline)
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert not tracebacks, tracebacks[:3]
    gone = [r for r in caplog.records if "the client went away" in r.getMessage()]
    assert gone and all(r.levelno == logging.INFO for r in gone)


def test_text_then_cancel_at_once_leaks_no_engine_client_stream(live, baseline):
    async def scenario():
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await _recv_json(ws)
            for i in range(60):
                await ws.send(json.dumps({"type": "text", "context_id": f"x{i}", "text": "Now, "}))
                await ws.send(json.dumps({"type": "cancel", "context_id": f"x{i}"}))
            cancelled = 0
            while cancelled < 60:
                cancelled += (await _recv_json(ws))["type"] == "cancelled"
            await asyncio.sleep(0.2)
            assert live.state.engine.num_streams == 0  # while the session is still open

    run(scenario())
    assert_all_returned(live, baseline)


def test_a_lone_surrogate_gets_a_clear_error_and_text_with_one_is_spoken(live):
    async def scenario():
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"}}))
            await _recv_json(ws)
            await ws.send(json.dumps({"type": "text", "context_id": "bad\ud800", "text": "x"}))
            error = await _recv_json(ws, 10)  # before the fix nothing came back: the reply could not be encoded
            assert error["type"] == "error" and error["code"] == "invalid_message" and not error["fatal"]
            await ws.send(json.dumps({"type": "text", "context_id": "ok", "text": "Hi \ud83d there."}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "ok"}))
            frames, messages = await _until_done(ws)
            assert messages[-1]["reason"] == "completed" and frames
            assert live.state.engine.num_restarts == 0

    run(scenario())


def test_a_turn_past_the_length_cap_goes_on_to_the_end_of_its_text(live):
    text = ("This turn is far longer than one engine request of this server can hold, so it has to go on "
            "in further requests of the same context.")

    async def scenario():
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"},
                                      "output": {"codec": "pcm16", "sample_rate": 24000, "frame_ms": 20}}))
            await _recv_json(ws)
            await ws.send(json.dumps({"type": "text", "context_id": "long", "text": text}))
            await ws.send(json.dumps({"type": "context.end", "context_id": "long"}))
            frames, messages = await _until_done(ws, 240)
            done = messages[-1]
            assert done["reason"] == "completed", messages[-3:]
            assert done["audio_ms"] > 2 * CAP_MS  # not cut at the cap
            seqs = [int.from_bytes(f[4:8], "big") for f in frames]
            assert seqs == list(range(len(frames)))  # one continuous frame sequence
            assert [f[1] & 2 for f in frames].count(2) == 1 and frames[-1][1] & 2  # LAST once, at the end
            ends = [w["char_end"] for m in messages if m["type"] == "alignment" for w in m.get("words") or []]
            assert ends and max(ends) >= len(text) - 2  # the alignment reaches the end of the text

    run(scenario())


def test_inactivity_does_not_close_a_session_while_its_open_context_is_spoken(live):
    async def scenario():
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "realtime", "lead_ms": 100}}))
            await _recv_json(ws)
            # no context.end: the context stays open while its audio plays, longer than the 3 s timeout
            await ws.send(json.dumps({"type": "text", "context_id": "a", "flush": True,
                                      "text": "A long answer that plays for several seconds while the client "
                                              "just listens and sends nothing at all, not even a ping, until "
                                              "the audio is over."}))
            num_frames = 0
            while num_frames < 4000 // 20:  # 4 s of audio (the timeout is 3 s), sent at the listener's pace
                message = await asyncio.wait_for(ws.recv(), 30)
                num_frames += isinstance(message, bytes)
            await ws.send(json.dumps({"type": "cancel", "context_id": "a"}))
            while (await _recv_json(ws))["type"] != "context.done":
                pass

    run(scenario(), 300)


def test_admission_is_shared_by_sessions_and_http_with_a_retry_hint(live, baseline):
    async def scenario():
        limit = live.state.config.max_sessions
        sessions = [await websockets.connect(live.ws, max_size=None) for _ in range(limit)]
        try:
            for ws in sessions:
                await ws.send(json.dumps({"type": "session.start"}))
                assert (await _recv_json(ws))["type"] == "session.started"
            async with httpx.AsyncClient(timeout=30) as http:
                reply = await http.post(f"{live.http}/v1/audio/speech", json={"input": "No slot for me."})
            assert reply.status_code == 429 and int(reply.headers["retry-after"]) >= 1
            assert reply.json()["error"]["code"] == "server_busy"
            async with websockets.connect(live.ws) as extra:
                await extra.send(json.dumps({"type": "session.start"}))
                refused = await _recv_json(extra)
                assert refused["code"] == "server_busy" and refused["retry_after_ms"] > 0
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(extra.recv(), 10)
                assert extra.close_code == 4029
        finally:
            for ws in sessions:
                await ws.close()
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(timeout=120) as http:  # a slot is free again
            reply = await http.post(f"{live.http}/v1/audio/speech", json={"input": "Now there is room."})
        assert reply.status_code == 200 and len(reply.content) > 44

    run(scenario())
    assert_all_returned(live, baseline)


def test_a_flooding_session_is_read_no_faster_than_its_rate(live):
    rate = live.state.config.max_messages_per_s
    n = int(4 * rate)

    async def scenario():
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await _recv_json(ws)
            t0 = time.monotonic()
            sender = asyncio.ensure_future(asyncio.gather(*(ws.send(json.dumps({"type": "ping", "id": i}))
                                                            for i in range(n))))
            for _ in range(n):
                assert (await _recv_json(ws))["type"] == "pong"
            await sender
            return time.monotonic() - t0

    elapsed = run(scenario())
    assert elapsed >= (n - 2 * rate) / rate * 0.9  # the burst (2x the rate) at once, the rest at the rate


def test_browser_pages_of_other_origins_are_refused(live):
    async def scenario():
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(live.ws, origin="https://evil.example")
        assert refused.value.response.status_code == 403
        async with websockets.connect(live.ws, origin=f"http://{live.host}:{live.port}") as ws:  # same origin
            await ws.send(json.dumps({"type": "session.start"}))
            assert (await _recv_json(ws))["type"] == "session.started"

    run(scenario())


def test_unstarted_sockets_and_half_sent_requests_are_closed(live):
    async def scenario():
        async with websockets.connect(live.ws) as ws:  # never sends session.start: closed after start_timeout_s
            error = await _recv_json(ws, 30)
            assert error["code"] == "inactivity_timeout"
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 30)
            assert ws.close_code == 4008

    run(scenario())
    with socket.create_connection((live.host, live.port), timeout=30) as sock:  # half a request line, then nothing
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")
        assert sock.recv(1024) == b""  # the server closed it (after its header timeout)


def test_http_hardening(live):
    url = f"{live.http}/v1/audio/speech"
    with httpx.Client(timeout=30) as http:
        big = http.post(url, content=b'{"input": "' + b"a" * (2 << 20) + b'"}',
                        headers={"content-type": "application/json"})
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
        for fmt in (["wav"], {"a": 1}, 3):
            reply = http.post(url, json={"input": "x", "response_format": fmt})
            assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_format"
        nested = http.post(url, content=b"[" * 100_000, headers={"content-type": "application/json"})
        assert nested.status_code == 400
        reply = http.post(url, content=b'{"input": "Hi \\ud800 there."}', headers={"content-type": "application/json"})
        assert reply.status_code == 200 and len(reply.content) > 44


def test_generate_stops_when_its_client_leaves(live, baseline):
    body = "text=" + "Nobody will hear this long answer to the end. " * 20 + "&streaming=false"
    with socket.create_connection((live.host, live.port), timeout=30) as sock:
        sock.sendall(f"POST /generate HTTP/1.1\r\nHost: x\r\ncontent-type: application/x-www-form-urlencoded\r\n"
                     f"content-length: {len(body)}\r\n\r\n{body}".encode())
        deadline = time.monotonic() + 60
        while live.state.admission.num_active == 0:  # generating
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert_all_returned(live, baseline, timeout_s=10)  # cancelled, not generated to its end


def test_errors_are_counted_once(live):
    before = metric(live, "voxrt_errors_total", '{code="invalid_json"}')

    async def scenario():
        async with websockets.connect(live.ws) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await _recv_json(ws)
            await ws.send("not json")
            assert (await _recv_json(ws))["code"] == "invalid_json"

    run(scenario())
    assert metric(live, "voxrt_errors_total", '{code="invalid_json"}') == before + 1


def test_kill_9_of_the_engine_fails_its_contexts_within_a_second_and_a_new_session_works(live, baseline):
    """Last in the module: the engine restarts."""
    state = live.state
    errors_before = metric(live, "voxrt_errors_total", '{code="engine_unavailable"}')

    async def speaking_session(got_audio: asyncio.Event, result: dict) -> None:
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "realtime"}}))
            await _recv_json(ws)
            await ws.send(json.dumps({"type": "text", "context_id": "t", "text": "Talking when the engine dies. " * 4}))
            while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
                pass
            got_audio.set()
            _, messages = await _until_done(ws, 60)
            result["at"] = time.monotonic()
            result["error"] = next(m for m in messages if m["type"] == "error")
            result["done"] = messages[-1]

    async def scenario():
        events, results = [asyncio.Event() for _ in range(3)], [{} for _ in range(3)]
        tasks = [asyncio.ensure_future(speaking_session(e, r)) for e, r in zip(events, results)]
        await asyncio.gather(*(e.wait() for e in events))
        pid = state.engine.pid
        t_kill = time.monotonic()
        import os, signal  # noqa: E401, PLC0415
        os.kill(pid, signal.SIGKILL)
        await asyncio.gather(*tasks)
        for r in results:
            assert r["at"] - t_kill < 1.0, r["at"] - t_kill
            assert r["error"]["code"] == "engine_unavailable" and r["error"]["context_id"] == "t"
            assert r["done"]["reason"] == "error"
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{live.http}/readyz")).status_code == 503
            assert (await http.get(f"{live.http}/healthz")).status_code == 200
        t0 = time.monotonic()
        while not state.engine_is_ready:
            assert time.monotonic() - t0 < 120
            await asyncio.sleep(0.1)
        assert (await canary(live.ws))[0] == "completed"
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{live.http}/readyz")).status_code == 200
        assert state.engine.pid != pid

    run(scenario())
    assert metric(live, "voxrt_engine_restarts_total") == 1
    assert metric(live, "voxrt_errors_total", '{code="engine_unavailable"}') == errors_before + 3
    assert_all_returned(live, baseline)


def test_a_silent_session_with_text_the_engine_cannot_voice_yet_times_out(live):
    """An open context whose last word is unfinished ("wor": the engine waits for the rest of it) and a client
    that sends nothing more: once its audio stops, the session is idle like any other and closes after the
    inactivity timeout (3 s here). Audio still owed used to count as activity as of every poll, so such a
    session stayed open for ever (an ElevenLabs socket with unflushed text was open past 80 s)."""
    async def scenario():
        async with websockets.connect(live.ws, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"}}))
            await _recv_json(ws)
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": "Hello there, my wor"}))
            last_audio = time.monotonic()
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    last_audio = time.monotonic()
                elif (data := json.loads(message))["type"] == "error":
                    break
            assert data["code"] == "inactivity_timeout" and data["fatal"]
            # one timeout after the last audio (or after the text, when none came), not two, and never never
            assert time.monotonic() - last_audio < 3.0 + 2.5
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 30)
            assert ws.close_code == 4008

    run(scenario(), 120)
