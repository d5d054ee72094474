"""The adapters' edge without a server (gateway/compat/bridge.py): typed event dispatch, every server event
class handled or logged, the wire output pinned, and the bounds a slow or stalled peer meets (the Outbox's
room and stall, the link's inbox)."""

from __future__ import annotations

import asyncio
import json
import logging
import typing
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar


from voxrt.gateway import server
from voxrt.gateway.compat import bridge, cartesia, elevenlabs, twilio
from voxrt.gateway.compat.bridge import MAX_INBOX_MESSAGES, NativeLink, Outbox, UntypedEvent
from voxrt.protocol.config import Limits, OutputFormat
from voxrt.protocol.frames import encode_audio_frame
from voxrt.protocol.server_events import (SERVER_EVENT_TYPES, Alignment, Cancelled, ContextDone, ContextStarted,
                                          Error, Flushed, Pong, ServerEvent, SessionStarted)

WIRE = Path(__file__).parent / "data" / "adapter_wire.jsonl"
STATE = SimpleNamespace(config=SimpleNamespace(limits=Limits()))


class FakeWS:
    """What an Outbox uses of a Starlette WebSocket. `gate`: sends wait for it (a peer that reads when told)."""

    def __init__(self, name: str = "ws", gate: asyncio.Event | None = None) -> None:
        self.name, self.out, self.scope, self.gate = name, [], {}, gate

    async def send_text(self, text: str) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.out.append([self.name, "text", text])

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.out.append([self.name, "close", code, reason])


def script(cid: str = "c1") -> list:
    """One of each server event, and frames (index, first seq, count, is_last), in a session's order."""
    return [SessionStarted("s1", "tiny", "default", OutputFormat("pcm16", 16000, 20), Limits()),
            ContextStarted(cid, 1),
            ("frames", 1, 0, 3),
            Alignment(cid, [{"text": "Hello", "char_start": 0, "char_end": 5, "start_ms": 0, "end_ms": 300}],
                      [{"word": "Hello", "char_start": 0, "char_end": 5, "start_ms": 0, "end_ms": 300}]),
            Flushed(cid),
            ("frames", 1, 3, 2, True),
            Alignment(cid, [{"text": " there", "char_start": 5, "char_end": 11, "start_ms": 300, "end_ms": 600}]),
            Error("text_too_long", "too long", False, cid),
            Cancelled(cid, 120.4, "Hello"),
            Pong(7, 1234.5),
            ContextDone(cid, "completed", 100.0, {"ttfa_ms": 12.3, "frames": 5}),
            Error("server_busy", "busy", True, None, {"retry_after_ms": 1000.2})]


async def feed(link: NativeLink, items: list, frame_bytes: int) -> None:
    for item in items:
        if isinstance(item, tuple):
            _, index, seq0, num, *last = item
            for seq in range(seq0, seq0 + num):
                await link.send_bytes(encode_audio_frame(index, seq, seq * 20, bytes([seq % 256]) * frame_bytes,
                                                         is_first=seq == 0,
                                                         is_last=bool(last) and seq == seq0 + num - 1))
        else:
            await link.send_event(item)
        await asyncio.sleep(0)


async def wire_of_every_adapter() -> list[list]:
    out: list[list] = []
    for multi in (False, True):
        for fmt in ("pcm_16000", "ulaw_8000"):
            ws = FakeWS(f"el-{multi}-{fmt}")
            adapter = elevenlabs.ElevenLabsAdapter(ws, STATE, "default", elevenlabs.OutputFormat(fmt), multi=multi)
            adapter._native_id("c1", create=True)  # as a client's text to context c1 opens it
            adapter.contexts["c1"].text = "Hello there"
            await feed(adapter.link, script(), 4)
            await adapter.outbox.drain()
            await adapter.outbox.stop()
            out += ws.out
    ws = FakeWS("cartesia")
    adapter = cartesia.CartesiaAdapter(ws, STATE)
    adapter.contexts["c1"] = cartesia.ContextOut("pcm_s16le", 16000)
    adapter.contexts["c1"].add_timestamps = True
    adapter.contexts["c1"].pending_flushes.append(True)  # a client's flush
    await feed(adapter.link, script(), 4)
    await adapter.outbox.drain()
    await adapter.outbox.stop()
    out += ws.out
    control, media = FakeWS("twilio-control"), FakeWS("twilio-call")
    call = twilio.Call("call1", "MZ1", "CA1", {}, Outbox(media))
    call_bridge = twilio.CallBridge(control, call)
    await feed(call_bridge.link, script(), 3)
    for outbox in (call_bridge.control, call.outbox):
        await outbox.drain()
        await outbox.stop()
    return out + control.out + media.out


def test_wire_output_is_byte_for_byte_what_it_was():
    """data/adapter_wire.jsonl was written by the adapters as they were before they dispatched on event classes
    (they switched on the to_wire() dict's "type"): the same script gives the same frames, text for text.
    Changed on purpose since: Cartesia's chunks and timestamps carry their segment's flush_id, an error about a
    context ends it (no `done` after it), and server_busy is status 429; ElevenLabs' alignment rides on its
    chunk's audio message, times relative to that chunk, and covers the spaces between words."""
    expected = [json.loads(line) for line in WIRE.read_text().splitlines()]
    assert asyncio.run(wire_of_every_adapter()) == expected


def _adapters():
    eleven = elevenlabs.ElevenLabsAdapter(FakeWS(), STATE, "default", elevenlabs.OutputFormat("pcm_16000"),
                                          multi=True)
    cart = cartesia.CartesiaAdapter(FakeWS(), STATE)
    call_bridge = twilio.CallBridge(FakeWS(), twilio.Call("call1", "MZ1", "CA1", {}, Outbox(FakeWS())))
    return {"elevenlabs": eleven, "cartesia": cart, "twilio": call_bridge}


def test_every_server_event_class_has_a_case_in_every_adapter(monkeypatch):
    """A new event in server_events.py's ServerEvent must be given a case (a translation, or an explicit
    'nothing to say') in each adapter: none reaches the unknown path."""
    classes = typing.get_args(ServerEvent)
    assert tuple(cls.TYPE for cls in classes) == SERVER_EVENT_TYPES
    unknown = []
    for module in (elevenlabs, cartesia, twilio):
        monkeypatch.setattr(module, "unknown_event", lambda adapter, event, *rest: unknown.append((adapter, event)))
    samples = [event for event in script() if not isinstance(event, tuple)]
    assert {type(event) for event in samples} == set(classes)

    async def go():
        for adapter in _adapters().values():
            for event in samples:
                await adapter.link.send_event(event)

    asyncio.run(go())
    assert unknown == []


@dataclass(frozen=True)
class RenamedEvent:
    """An event an adapter has never heard of (a new or renamed class)."""
    TYPE: ClassVar[str] = "context.renamed"
    context_id: str

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "context_id": self.context_id}


def test_an_unknown_event_is_logged_once_per_adapter_and_class_not_dropped_silently(caplog):
    bridge._UNKNOWN_LOGGED.clear()

    async def go():
        adapters = _adapters()
        for adapter in adapters.values():
            await adapter.link.send_event(RenamedEvent("c1"))
            await adapter.link.send_event(RenamedEvent("c2"))
            await adapter.link.send_text('{"type":"mystery","context_id":"c1"}')  # untyped: also logged
        sent = {}
        for name, adapter in adapters.items():
            outbox = adapter.control if name == "twilio" else adapter.outbox
            await outbox.drain()
            sent[name] = list(outbox.ws.out)
            await outbox.stop()
        return sent

    with caplog.at_level(logging.DEBUG, logger="voxrt.gateway.compat"):
        sent = asyncio.run(go())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for adapter in ("elevenlabs", "cartesia", "twilio"):
        assert sum(f"{adapter} adapter: no case for the native event RenamedEvent" in w for w in warnings) == 1
        assert sum(f"{adapter} adapter: no case for the native event untyped 'mystery'" in w for w in warnings) == 1
    # nothing of them reaches an ElevenLabs or Cartesia peer; the Twilio control API is the native protocol, so
    # the agent still gets each event as it is
    assert sent["elevenlabs"] == sent["cartesia"] == []
    assert [entry[2] for entry in sent["twilio"]] == ['{"type":"context.renamed","context_id":"c1"}',
                                                      '{"type":"context.renamed","context_id":"c2"}',
                                                      '{"type":"mystery","context_id":"c1"}']


def test_the_inbox_bound_is_the_native_one():
    assert MAX_INBOX_MESSAGES == server.MAX_QUEUED_MESSAGES


def test_the_reader_waits_while_the_native_session_has_not_read_its_messages():
    async def go():
        link = NativeLink(None, None, None)
        for i in range(MAX_INBOX_MESSAGES):
            link.send({"type": "ping", "id": i})
        waiter = asyncio.ensure_future(link.wait_room())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # the peer's next message is not read: TCP pushes back on it
        await link.receive()
        await asyncio.wait_for(waiter, 1)

    asyncio.run(go())


def test_a_slow_peer_holds_at_most_the_bound_and_gets_every_frame_in_order():
    """The link's send returns only once the outbox is back under its bound, so the native session (its
    AudioOut) waits on the slow peer as on a paused transport; a peer that keeps up gets a chunk per message."""
    bound, frame = 1000, 100

    async def go():
        gate = asyncio.Event()
        ws = FakeWS(gate=gate)
        outbox = Outbox(ws, max_queued_bytes=bound)

        async def on_frame(header, payload: bytes) -> None:
            outbox.frame("k", payload, lambda key, payloads, extras: {"n": len(payloads), "first": payloads[0][0]},
                         len(payload))

        link = NativeLink(None, on_frame, None, (outbox,))

        async def produce():
            for seq in range(50):
                await link.send_bytes(encode_audio_frame(1, seq, seq * 20, bytes([seq]) * frame, is_first=seq == 0,
                                                         is_last=seq == 49))

        producer = asyncio.ensure_future(produce())
        await asyncio.sleep(0.05)
        assert not producer.done() and outbox.num_queued_bytes <= bound + frame  # waits: the peer reads nothing
        for _ in range(200):  # the peer reads a message now and then
            gate.set()
            await asyncio.sleep(0)
            gate.clear()
            await asyncio.sleep(0.001)
            if producer.done() and outbox.num_queued_bytes == 0:
                break
        gate.set()
        await producer
        await outbox.drain()
        await outbox.stop()
        assert outbox.max_num_queued_bytes <= bound + frame and not outbox.is_stalled
        firsts = [json.loads(entry[2]) for entry in ws.out]
        assert sum(m["n"] for m in firsts) == 50  # every frame, in order, none twice
        seqs = [m["first"] for m in firsts]
        assert seqs == sorted(seqs)

    asyncio.run(go())


def test_a_stalled_peer_is_given_up_after_the_timeout_and_nothing_waits_on_it():
    async def go():
        ws = FakeWS(gate=asyncio.Event())  # never opened: the peer reads nothing at all
        outbox = Outbox(ws, stall_timeout_s=0.2, max_queued_bytes=10,
                        stall_message=lambda code, message: {"error": code, "message": message})
        outbox.json({"a": "x" * 20})
        outbox.json({"b": 1})
        waiting = asyncio.ensure_future(outbox.room())
        drained = asyncio.ensure_future(outbox.drain(timeout_s=10))
        await asyncio.sleep(0.1)
        assert not waiting.done() and not outbox.gone.is_set()
        await asyncio.wait_for(outbox.gone.wait(), 2)
        await asyncio.wait_for(asyncio.gather(waiting, drained), 1)  # room and drains return at once
        assert outbox.is_stalled and outbox.is_closed and outbox.num_queued_bytes == 0
        await asyncio.sleep(0.05)  # the close (not on uvicorn here: its own close, bounded, in a task)
        outbox.json({"late": True})  # nothing is queued after the stall
        assert outbox.num_queued_bytes == 0
        return ws.out

    out = asyncio.run(go())
    assert out == [["ws", "close", 4008, "inactivity timeout"]]


def test_a_send_that_completes_in_time_is_no_stall():
    async def go():
        gate = asyncio.Event()
        outbox = Outbox(FakeWS(gate=gate), stall_timeout_s=0.3)
        for i in range(5):
            outbox.json({"i": i})
            await asyncio.sleep(0.1)  # each send waits 0.1 s for the peer: slow, never stalled for 0.3 s
            gate.set()
            await asyncio.sleep(0)
            gate.clear()
        gate.set()
        await outbox.drain()
        assert not outbox.is_stalled and not outbox.gone.is_set()
        await outbox.stop()

    asyncio.run(go())


def test_untyped_event_reads_like_a_typed_one():
    event = UntypedEvent({"type": "flushed", "context_id": "c"})
    assert event.TYPE == "flushed" and event.to_wire() == {"type": "flushed", "context_id": "c"}
