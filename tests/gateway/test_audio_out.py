"""The audio-out path without a server: one timer paces every stream (pacer.py), sends start eagerly and a
send that cannot finish pauses only its own stream; frames leave in order with the right flags, and none
leaves after `aclose`. No tight timing: only lower bounds (pacing never sends early) and orders."""

from __future__ import annotations

import asyncio
import gc
import time

import numpy as np
import pytest

from voxrt.audio import StreamEncoder
from voxrt.gateway.audio_out import AudioOut
from voxrt.gateway.metrics import GatewayMetrics
from voxrt.gateway.pacer import Pacer, start_eagerly, start_eagerly_compat
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig
from voxrt.protocol.frames import decode_audio_frame


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def config(mode: str = "burst", lead_ms: int = 300, codec: str = "opus") -> SessionConfig:
    return SessionConfig("v", "m", OutputFormat(codec, 48000, 20), Pacing(mode, lead_ms))


def audio_out(send, cfg: SessionConfig, pacer: Pacer | None = None) -> tuple[AudioOut, StreamEncoder]:
    out = cfg.output
    encoder = StreamEncoder(out.codec, 24000, out.sample_rate, out.frame_ms)
    return AudioOut(1, cfg, encoder, PlaybackClock(), GatewayMetrics(), send, 0.0, pacer=pacer), encoder


def trace() -> list:
    return [0, 0, 0, None, None, None, None, None, None]


def speech(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 24000)) / 24000
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_start_eagerly_finishes_at_once_or_hands_over_to_a_task():
    async def main():
        log = []

        async def quick():
            log.append("quick")

        async def slow(event):
            try:
                await event.wait()
                log.append("slow")
                return 7
            finally:
                log.append("finally")

        for start in (start_eagerly, start_eagerly_compat):
            log.clear()
            assert start(quick()) is None and log == ["quick"]  # ran here, no task
            event = asyncio.Event()
            task = start(slow(event))
            assert task is not None and not task.done()
            event.set()
            assert await task == 7 and log == ["quick", "slow", "finally"]
            task = start(slow(asyncio.Event()))
            task.cancel()  # a cancellation reaches the coroutine where it waits
            with pytest.raises(asyncio.CancelledError):
                await task
            assert log[-1] == "finally"

            async def broken():
                raise ConnectionError("gone")
            with pytest.raises(ConnectionError):
                start(broken())
    run(main())


def test_burst_sends_every_frame_in_order_with_first_and_last_flags():
    async def main():
        sent = []

        async def send(data: bytes) -> None:
            sent.append(data)
        out, encoder = audio_out(send, config("burst"))
        frames = encoder.split(speech(0.5))
        await out.play(frames, False, time.monotonic_ns() / 1e6, trace())
        assert len(sent) == len(frames) >= 20  # 0.5 s, less what the resampler holds back
        await out.play(encoder.split_finish(), True, time.monotonic_ns() / 1e6, trace())
        headers = [decode_audio_frame(d)[0] for d in sent]
        assert [h.seq for h in headers] == list(range(len(sent)))
        assert headers[0].flags & 1 and not any(h.flags & 1 for h in headers[1:])  # FIRST once
        assert headers[-1].flags & 2 and not any(h.flags & 2 for h in headers[:-1])  # LAST once, at the end
        assert out.num_frames_sent == len(sent) and out.metrics.send_lateness.count == len(sent)
    run(main())


def test_a_last_chunk_without_audio_gets_a_silent_frame_for_the_last_flag():
    async def main():
        sent = []

        async def send(data: bytes) -> None:
            sent.append(data)
        out, _ = audio_out(send, config("burst"))
        await out.play([], True, 0.0, trace())
        header, payload = decode_audio_frame(sent[0])
        assert len(sent) == 1 and header.flags & 2 and payload
    run(main())


def test_realtime_pacing_keeps_at_most_lead_ms_ahead_of_the_listener():
    async def main():
        times = []

        async def send(data: bytes) -> None:
            times.append(time.monotonic())
        out, encoder = audio_out(send, config("realtime", lead_ms=40))
        frames = encoder.split(speech(0.4))  # 19 frames of 20 ms (the resampler holds the rest back)
        start = time.monotonic()
        await out.play(frames, False, 0.0, trace())
        # 40 ms ahead at most (+ a tick per frame): the last frame leaves no earlier than ~300 ms after the first
        assert len(times) == len(frames) >= 19 and times[-1] - start >= 0.25
        # just after a write: lead_ms and the last frame written (the protocol: no frame leaves with the buffer
        # above lead_ms; with writes in pairs the rule lets a pair out at lead_ms - one frame: context_core.py)
        assert out.clock.buffered_ms(time.monotonic_ns() / 1e6) <= 40 + 20 + 1
    run(main())


def _paced_writes(lead_ms: int, seconds: float, early_frames: int, monkeypatch, encode_all: bool = True):
    """One realtime chunk through `send_now`: per write, its frames' seqs and the listener's buffer just before
    it (by the context's clock)."""
    from voxrt.gateway import audio_out as module
    monkeypatch.setattr(module, "EARLY_FRAMES", early_frames)

    async def main():
        writes = []

        async def send_bytes(data: bytes) -> None:
            raise AssertionError("every write could happen at once")

        def send_now(messages: list) -> bool:
            now = time.monotonic_ns() / 1e6
            before = out.clock.buffered_ms(now) - 20 * len(messages)  # the clock counted them already
            writes.append(([decode_audio_frame(m)[0].seq for m in messages], before, now))
            return True
        cfg = config("realtime", lead_ms=lead_ms)
        encoder = StreamEncoder("opus", 24000, 48000, 20)
        out = AudioOut(1, cfg, encoder, PlaybackClock(), GatewayMetrics(), send_bytes, 0.0, send_now=send_now)
        frames = encoder.split(speech(seconds))
        if encode_all:  # encoded before they are due, as a worker does
            frames = [encoder.encode(f) for f in frames]
        await out.play(frames, False, time.monotonic_ns() / 1e6, trace())
        return writes, out, len(frames)
    return run(main())


def test_steady_frames_go_two_to_a_write_one_frame_early_at_most(monkeypatch):
    """Round 12's rule (audio_out.py, EARLY_FRAMES): a realtime write takes along the next frame when it is
    encoded and due within a frame, so steady frames go in pairs. The protocol's bound holds: a write goes when
    the listener's buffer is down to lead_ms - one frame (PacingRule.send_lead_ms), so its second frame leaves
    with the buffer at lead_ms, never above. The early frame's lateness counts from one frame before its due
    (so none is counted 20 ms early, clamped to 0)."""
    writes, out, num_frames = _paced_writes(40, 0.6, 1, monkeypatch)
    assert [seq for w in writes for seq in w[0]] == list(range(num_frames))
    assert out.metrics.num_frame_writes == len(writes) < 0.6 * num_frames
    assert writes[0][0] == [0]  # the first frame alone (time to first audio)
    steady = [w for w in writes if w[1] >= 20 - 2]  # after the lead fill: writes the pacing rule released
    assert len(steady) >= 8 and all(len(w[0]) <= 2 for w in writes[1:])
    assert sum(len(w[0]) == 2 for w in steady) >= len(steady) - 2  # pairs (a last odd frame may go alone)
    for frames, before, _ in steady:
        assert 20 - 2 <= before <= 20 + 2  # a tick of slack either way (timers)
        assert before + 20 * (len(frames) - 1) <= 40 + 2  # the last frame of the write leaves at lead_ms at most
    for frames, before, _ in writes:
        assert before + 20 * (len(frames) - 1) <= 40 + 2  # the lead fill too
    raw = out.metrics.lateness.paced + out.metrics.lateness.ready  # before folding (which clamps at 0)
    assert len(raw) == num_frames and min(raw) > -2 and max(raw) < 5  # none counted ~20 ms early, nor late


def test_without_early_frames_each_steady_frame_goes_alone_at_lead_ms(monkeypatch):
    writes, out, num_frames = _paced_writes(40, 0.5, 0, monkeypatch)
    steady = [w for w in writes if w[1] >= 40 - 2]
    assert len(steady) >= 8 and all(len(w[0]) == 1 for w in steady)
    assert out.metrics.num_frame_writes == len(writes) > 0.9 * num_frames
    assert all(before <= 40 + 2 for _, before, _ in steady)


def test_a_frame_not_yet_encoded_is_not_taken_early(monkeypatch):
    """Without a worker, frames are encoded in runs after each tick (`prepare`): the early frame goes along
    only when one is ready, never encoded on the loop for the purpose."""
    writes, out, num_frames = _paced_writes(40, 0.6, 1, monkeypatch, encode_all=False)
    assert [seq for w in writes for seq in w[0]] == list(range(num_frames))
    assert all(before + 20 * (len(frames) - 1) <= 40 + 2 for frames, before, _ in writes)


def test_one_stuck_connection_does_not_hold_the_others():
    async def main():
        pacer = Pacer(asyncio.get_running_loop())
        release = asyncio.Event()
        stuck_sent, free_sent = [], []

        async def stuck(data: bytes) -> None:
            if len(stuck_sent) == 2:
                await release.wait()  # a full transport: uvicorn's send waits until it drains
            stuck_sent.append(decode_audio_frame(data)[0].seq)

        async def free(data: bytes) -> None:
            free_sent.append(decode_audio_frame(data)[0].seq)
        a, enc_a = audio_out(stuck, config("burst"), pacer)
        b, enc_b = audio_out(free, config("burst"), pacer)
        play_a = asyncio.create_task(a.play(enc_a.split(speech(0.2)), False, 0.0, trace()))
        await b.play(enc_b.split(speech(0.2)), False, 0.0, trace())
        num_frames = len(free_sent)
        assert free_sent == list(range(num_frames)) and num_frames >= 8
        assert stuck_sent == [0, 1] and not play_a.done()
        release.set()
        await play_a
        assert stuck_sent == list(range(num_frames))  # resumed in order after the one slow send
    run(main())


def test_nothing_leaves_after_aclose_even_with_a_send_in_flight():
    async def main():
        sent, gate = [], asyncio.Event()

        async def send(data: bytes) -> None:
            if sent:
                await gate.wait()
            sent.append(data)
        out, encoder = audio_out(send, config("burst"))
        play = asyncio.create_task(out.play(encoder.split(speech(0.2)), False, 0.0, trace()))
        await asyncio.sleep(0.05)
        play.cancel()
        await out.aclose()
        gate.set()
        await asyncio.sleep(0.05)
        assert len(sent) == 1 and out.is_closed
        with pytest.raises(ConnectionError):
            await out.play([], True, 0.0, trace())
    run(main())


def test_a_send_that_fails_ends_play_with_its_error():
    async def main():
        async def send(data: bytes) -> None:
            raise ConnectionError("session closed")
        out, encoder = audio_out(send, config("burst", codec="pcm16"))
        with pytest.raises(ConnectionError, match="session closed"):
            await out.play(encoder.split(speech(0.1)), False, 0.0, trace())
    run(main())


def test_a_send_that_fails_after_close_has_its_error_retrieved():
    """A send in flight that fails once its stream is closed (a stalled client aborted): its error is read and
    dropped, not left for asyncio's "Task exception was never retrieved" at garbage collection."""
    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context.get("message")))
        out, _ = audio_out(lambda data: None, config("burst"))
        failed = loop.create_future()
        failed.set_exception(ConnectionError("session closed"))
        out.is_closed = True
        out._on_send_done(trace(), 0.0, False, failed)
        del failed
        gc.collect()
        await asyncio.sleep(0)
        assert reported == []
    run(main())


def test_one_wakeup_serves_every_stream_due_together():
    async def main():
        pacer = Pacer(asyncio.get_running_loop())
        sent = []

        async def send(data: bytes) -> None:
            sent.append(data)
        outs = [audio_out(send, config("burst"), pacer) for _ in range(50)]
        await asyncio.gather(*(o.play(e.split(speech(0.1)), False, 0.0, trace()) for o, e in outs))
        assert len(sent) >= 50 * 3 and pacer.num_wakeups <= 5  # not one per stream
    run(main())


def test_a_frame_that_fails_to_encode_ends_play_with_its_error():
    async def main():
        async def send(data: bytes) -> None:
            pass
        out, encoder = audio_out(send, config("burst"))
        with pytest.raises(ValueError, match="480 samples"):  # a frame of the wrong size (libopus at the model's 24 kHz): an error, not a hang
            await out.play([np.zeros(100, dtype=np.float32)], False, 0.0, trace())
    run(main())


def test_frames_encoded_ahead_are_the_same_packets_in_the_same_order():
    """Encoding ahead (runs of ENCODE_AHEAD_FRAMES after a tick, a chunk that came early at once) changes when
    libopus runs, never what it is given: the packets equal one encoder's, frame by frame in order."""
    async def main():
        sent = []

        async def send(data: bytes) -> None:
            sent.append(data)
        out, encoder = audio_out(send, config("realtime", lead_ms=20))
        chunks = [encoder.split(speech(0.25)) for _ in range(3)]
        for chunk in chunks:
            await out.play(chunk, False, time.monotonic_ns() / 1e6, trace())
        reference = StreamEncoder("opus", 24000, 48000, 20)
        expected = [p for _ in range(3) for p in reference.push(speech(0.25))]
        assert [decode_audio_frame(d)[1] for d in sent] == expected
        assert [decode_audio_frame(d)[0].seq for d in sent] == list(range(len(expected)))
    run(main())


def test_prepare_encodes_a_bounded_run_only_once_the_encoded_frames_are_used_up():
    async def main():
        from voxrt.gateway.audio_out import ENCODE_AHEAD_FRAMES

        async def send(data: bytes) -> None:
            pass
        out, encoder = audio_out(send, config("realtime"))
        frames = encoder.split(speech(1.0))  # ~45 frames
        out._raw.extend((f, False, trace()) for f in frames)  # queued, as play() does, without sending
        out.prepare()
        assert len(out._ready) == ENCODE_AHEAD_FRAMES and len(out._raw) == len(frames) - ENCODE_AHEAD_FRAMES
        assert all(isinstance(p, bytes) for p, _, _ in out._ready)
        out.prepare()  # frames still encoded: nothing more
        assert len(out._ready) == ENCODE_AHEAD_FRAMES
        await out.aclose()
        assert not out._raw and not out._ready


def test_a_lead_under_two_frames_takes_no_frame_early(monkeypatch):
    """With lead_ms = one frame a pair would leave its second frame above lead_ms: the rule keeps lead_ms and
    every steady frame goes alone (PacingRule.early_frames 0)."""
    writes, out, num_frames = _paced_writes(20, 0.4, 1, monkeypatch)
    assert [seq for w in writes for seq in w[0]] == list(range(num_frames))
    assert out._num_early == 0 and out._lead_ms == 20
    assert all(len(frames) == 1 for frames, _, _ in writes[1:])
    assert all(before <= 20 + 2 for _, before, _ in writes)
