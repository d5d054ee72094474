"""Misbehaving clients for the reliability suite (tests/reliability/) and its long form (bench/reliability.py):
protocol fuzzing, abrupt disconnects at every stage of a session, and a canary session that must keep being
served. Deterministic for a seed.

    messages = fuzz_messages(random.Random(0), 5000)
    stats = await fuzz_connection(url, messages)      # sends them all, reconnecting whenever it is closed
    await disconnect(url, host, port, "after_text", rng)
    reason, audio_ms = await canary(url)              # a well-behaved turn: "completed"
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import struct
from dataclasses import dataclass, field

import websockets

LONE_SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff")
DROP_POINTS = ("tcp", "handshake", "after_start", "after_text", "after_audio", "after_cancel", "mid_message")
OPEN_TIMEOUT_S = 60  # generous: a loaded CI machine may take seconds to answer a handshake
_WORDS = ("hello", "world", "Dr.", "$3.50", "**bold**", "\U0001F600", "naïve", "1,234", "e.g.", "\n", "  ", "ok.")


@dataclass
class FuzzStats:
    num_sent: int = 0
    num_surrogates: int = 0
    num_connections: int = 0
    num_replies: int = 0
    num_connect_failures: int = 0  # handshakes that failed or timed out (retried)
    close_codes: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)  # error code -> count


def _text(rng: random.Random, surrogate: bool) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(0, 4))]
    if surrogate:
        words.insert(rng.randint(0, len(words)), rng.choice(LONE_SURROGATES))
    return " ".join(words)


def _value(rng: random.Random):
    return rng.choice([None, True, 0, -1, 1e308, float("nan"), "", "x" * rng.randint(1, 300), [], {}, [1, [2]],
                       {"a": {"b": None}}, rng.choice(LONE_SURROGATES), "*"])


def fuzz_message(rng: random.Random) -> tuple[str | bytes, bool]:
    """One message a client might send, valid or not: (message, whether it holds a lone surrogate)."""
    kind = rng.random()
    cid = rng.choice(["c1", "c2", "c3", "*", "", "c" * 300]) if rng.random() < 0.2 else f"c{rng.randint(1, 6)}"
    surrogate = rng.random() < 0.15
    if kind < 0.20:
        msg = {"type": "text", "context_id": cid, "text": _text(rng, surrogate)}
        if rng.random() < 0.2:
            msg["flush"] = rng.choice([True, False, "yes", 1])
    elif kind < 0.40:
        msg = {"type": rng.choice(["cancel", "flush", "context.end"]), "context_id": cid}
    elif kind < 0.48:
        msg = {"type": "playback", "context_id": cid, "played_ms": rng.choice([0, 100, -5, 1e9, "x", None])}
    elif kind < 0.55:
        msg = {"type": "ping", "id": rng.choice([1, "a", None, [], 2.5])}
    elif kind < 0.62:
        msg = {"type": "session.start", "voice": rng.choice(["default", "nobody", None, 3]),
               "output": rng.choice([None, {"codec": "mp3"}, {"sample_rate": 44100}, "x", {"frame_ms": 20}])}
    elif kind < 0.70:  # a known type with one field of every wrong kind
        msg = {"type": rng.choice(["text", "cancel", "playback", "flush"]), "context_id": _value(rng),
               "text": _value(rng), "played_ms": _value(rng)}
    elif kind < 0.76:
        msg = {"type": rng.choice(["dance", "", "TEXT", None, 5, "session.end\u0000"])}
    elif kind < 0.82:  # not JSON, or not an object
        return rng.choice(["not json", "{", "[]", "null", "1", '"s"', "{\"type\":", "\u0000", "[" * 5000,
                           "{\"a\":" * 3000]), False
    elif kind < 0.86:
        return os.urandom(rng.randint(0, 64)) if rng.random() < 0.7 else b"", False
    elif kind < 0.90:  # a lone surrogate in a name or id, written as the escape a client would send
        field_name = rng.choice(["context_id", "voice", "id", "segmentation"])
        lone = rng.choice(LONE_SURROGATES)
        return json.dumps({"type": rng.choice(["text", "session.start", "ping"]), field_name: f"x{lone}",
                           "context_id": f"s{lone}" if field_name == "context_id" else "c1", "text": "hi"}), True
    elif kind < 0.93:
        msg = {"type": "text", "context_id": cid, "text": "x" * rng.choice([1, 1000, 30_000])}
    else:
        msg = {"type": "text", "context_id": cid, "text": _text(rng, surrogate), "num_frames": _value(rng),
               "extra": _value(rng)}
    return json.dumps(msg), surrogate


def fuzz_messages(rng: random.Random, n: int) -> list[tuple[str | bytes, bool]]:
    return [fuzz_message(rng) for _ in range(n)]


async def _reader(ws, stats: FuzzStats) -> int:
    """Counts the replies; returns the retry_after_ms of a `server_busy` refusal (0: none)."""
    retry_after_ms = 0
    try:
        async for message in ws:
            stats.num_replies += 1
            if isinstance(message, str):
                data = json.loads(message)  # every reply must be valid JSON (and valid UTF-8)
                if data.get("type") == "error":
                    stats.errors[data["code"]] = stats.errors.get(data["code"], 0) + 1
                    if data["code"] == "server_busy":
                        retry_after_ms = data.get("retry_after_ms") or 1000
    except websockets.ConnectionClosed:
        pass
    return retry_after_ms


async def fuzz_connection(url: str, messages: list[tuple[str | bytes, bool]], stats: FuzzStats | None = None,
                          start_every: int = 60) -> FuzzStats:
    """Sends every message, starting a session on each connection first (most of the time) and again
    now and then; reconnects whenever the server closes. Ends with `cancel *` and a close."""
    stats = stats or FuzzStats()
    rng = random.Random(len(messages))
    i = 0
    while i < len(messages):
        try:
            ws = await websockets.connect(url, max_size=None, open_timeout=OPEN_TIMEOUT_S)
        except (OSError, TimeoutError, websockets.InvalidHandshake):
            stats.num_connect_failures += 1
            await asyncio.sleep(1)
            continue
        async with ws:
            stats.num_connections += 1
            reader = asyncio.ensure_future(_reader(ws, stats))
            try:
                if rng.random() < 0.9:
                    await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"}}))
                while i < len(messages):
                    message, surrogate = messages[i]
                    await ws.send(message)
                    i += 1
                    stats.num_sent += 1
                    stats.num_surrogates += surrogate
                    if i % start_every == 0:
                        await ws.send(json.dumps({"type": "cancel", "context_id": "*"}))
                        break
                await ws.send(json.dumps({"type": "cancel", "context_id": "*"}))
            except websockets.ConnectionClosed:
                pass
            finally:
                await ws.close()
                retry_after_ms = await reader
                code = ws.close_code
                stats.close_codes[code] = stats.close_codes.get(code, 0) + 1
        if retry_after_ms:  # refused at capacity: as a good client, wait as told (the messages count as sent)
            await asyncio.sleep(retry_after_ms / 1000)
    return stats


async def canary(url: str, text: str = "The canary keeps singing.", timeout_s: float = 120) -> tuple[str, float]:
    """A well-behaved turn; returns (context.done reason, audio_ms); an error reason names its code and message."""
    async with websockets.connect(url, max_size=None, open_timeout=OPEN_TIMEOUT_S) as ws:
        await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": "burst"}}))
        await ws.send(json.dumps({"type": "text", "context_id": "canary", "text": text}))
        await ws.send(json.dumps({"type": "context.end", "context_id": "canary"}))
        last_error: dict = {}
        while True:
            message = await asyncio.wait_for(ws.recv(), timeout_s)
            if isinstance(message, str):
                data = json.loads(message)
                if data["type"] == "error":
                    last_error = data
                if data["type"] == "context.done":
                    if data["reason"] == "error":
                        return f"error:{last_error.get('code')}:{last_error.get('message')}", data["audio_ms"]
                    return data["reason"], data["audio_ms"]
                if data["type"] == "error" and data.get("fatal"):
                    return "fatal:" + data["code"], 0.0


def _masked_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame (RFC 6455 5.2, masked) written by hand: half-sent or invalid ones included."""
    key = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


async def disconnect(url: str, host: str, port: int, point: str, rng: random.Random) -> None:
    """One client that vanishes without a close frame (a reset TCP connection) at `point`."""
    if point == "tcp":  # connected, then gone before the upgrade
        _, writer = await asyncio.open_connection(host, port)
        if rng.random() < 0.5:
            writer.write(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\n")  # half a request
            await writer.drain()
        writer.transport.abort()
        return
    ws = await websockets.connect(url, max_size=None, open_timeout=OPEN_TIMEOUT_S)
    try:
        if point != "handshake":
            await ws.send(json.dumps({"type": "session.start", "pacing": {"mode": rng.choice(["burst", "realtime"])}}))
            await asyncio.wait_for(ws.recv(), 30)
        if point in ("after_text", "after_audio", "after_cancel", "mid_message"):
            await ws.send(json.dumps({"type": "text", "context_id": "t", "text": "Speak until the line drops. " * 2}))
            if rng.random() < 0.5:
                await ws.send(json.dumps({"type": "context.end", "context_id": "t"}))
        if point == "after_audio":
            while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
                pass
        if point == "after_cancel":
            await ws.send(json.dumps({"type": "cancel", "context_id": "t"}))
        if point == "mid_message":  # half a frame, then gone; or a text frame that is not UTF-8
            ws.transport.write(_masked_frame(0x1, b"\xff\xfe\xfd") if rng.random() < 0.5
                               else _masked_frame(0x1, b'{"type":"ping"}')[:5])
    finally:
        ws.transport.abort()
