"""One load point: Poisson arrivals at `rate` req/s for `duration_s` seconds, each request a client that
speaks one workload text and simulates its listener.

- WebSocket (`WebSocketTarget`): one voxrt.client session per request (PCM16 24 kHz, 20 ms frames); the
  text is sent whole, or as a token stream (whitespace-led words) at `tokens_per_s`, while the frames are read
  (each timed when it arrives, before the last token too); the listener's `playback` is reported every 100 ms. TTFA is from the first text sent (as the server's own metric), the
  handshake is recorded apart (`connect_ms`). The pinned length goes in the first `text` message's
  `num_frames` (a voxrt extension the server honours when started with `--allow-pinned-lengths`).
- Engine-direct (`EngineTarget`): `EngineClient.submit` with the pinned `num_frames`, the same text modes,
  its listener's playback checked every 100 ms and sent (`set_playback`) when it moves the engine's deadlines,
  by the gateway's rule (`report_moves_deadlines`: the first, and any drift of 5 ms or more), so engine-direct
  asks of the engine what the WebSocket path does.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass

from voxrt.engine.sched.listener import report_moves_deadlines
from voxrt.loadgen.listener import Listener, llm_tokens
from voxrt.loadgen.metrics import RequestRecord
from voxrt.loadgen.workload import FRAMES_PER_S, WorkItem, frames_at_rate

PLAYBACK_REPORT_S = 0.1
PROGRESS_EVERY_S = 10.0


def arrival_times(rate: float, duration_s: float, seed: int, max_requests: int | None = None) -> list[float]:
    """Poisson process: exponential gaps of mean 1/rate, every arrival before `duration_s`."""
    rng = random.Random(seed)
    times, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s or (max_requests is not None and len(times) >= max_requests):
            return times
        times.append(t)


def point_rows(num_rows: int, seed: int) -> list[int]:
    """The workload rows of one point, in order: a seeded shuffle of every row (cycled when a point has more
    requests). Uniform over the workload, so each point's audio per request is the workload's mean, not that
    of one contiguous block (LibriTTS rows come in chapters of similar length)."""
    order = list(range(num_rows))
    random.Random(seed).shuffle(order)
    return order


tokens = llm_tokens  # an LLM-like token stream (`voxrt.engine.sched.listener.llm_tokens`)


async def _send_text(send, text: str, tokens_per_s: float | None) -> None:
    if not tokens_per_s:
        await send(text)
        return
    gap = 1.0 / tokens_per_s
    for i, token in enumerate(tokens(text)):
        if i:
            await asyncio.sleep(gap)
        await send(token)


def _status_of_error(exc: BaseException) -> str:
    return f"error:{getattr(exc, 'code', None) or type(exc).__name__}"


@dataclass
class WebSocketTarget:
    url: str
    api_key: str | None = None
    voice: str | None = None
    pin_frames: bool = True

    def __post_init__(self) -> None:
        # the client (and the websockets library under it) imported now, when the target is made, not by the
        # point's first request: that import held a load generator process's loop ~90 ms at its arrivals' start
        import voxrt.client  # noqa: F401, PLC0415

    async def run_one(self, item: WorkItem, rate: float, arrival_s: float, tokens_per_s: float | None) \
            -> RequestRecord:
        from voxrt.client import OutputFormat, connect  # noqa: PLC0415

        # Over the protocol the server's frame rate is not known: pinned frames are FRAMES_PER_S frames (Qwen3-TTS's
        # rate; another model's audio runs longer or shorter by its frame's length)
        num_frames = item.num_frames if self.pin_frames else None
        record = RequestRecord(item.id, rate, arrival_s, "error:unknown", None, 0, 0.0, 0.0, len(item.text),
                               num_frames, pinned_audio_s=num_frames / FRAMES_PER_S if num_frames is not None else None)
        t0 = time.monotonic()
        listener = None
        try:
            async with connect(self.url, output=OutputFormat("pcm16", 24000, 20), api_key=self.api_key,
                               voice=self.voice) as session:
                record.connect_ms = (time.monotonic() - t0) * 1000.0
                sample_rate = session.output.sample_rate
                ctx = session.context(num_frames=num_frames)
                listener = Listener(time.monotonic())
                reporter = asyncio.create_task(_report(listener, ctx.playback, lambda s: s * 1000.0))
                async def feed() -> None:
                    await _send_text(ctx.send, item.text, tokens_per_s)
                    await ctx.end()

                async def listen() -> None:
                    async for frame in ctx.frames():
                        listener.on_audio(time.monotonic(), len(frame.payload) / 2 / sample_rate, frame.is_last)
                # Frames are read while the text is still going out: a token stream takes seconds to send, and
                # audio that starts before its end must be timed when it arrives, not after the last token.
                feeder, reader = asyncio.create_task(feed()), asyncio.create_task(listen())
                try:
                    await _both(feeder, reader)
                    done = await ctx.done()
                finally:
                    reporter.cancel()
                    feeder.cancel()
                    reader.cancel()
                record.status = "ok" if done.reason == "completed" else done.reason
                record.server_ttfa_ms = done.ttfa_ms
        except Exception as exc:  # noqa: BLE001 (any failure is this request's status)
            record.status = _status_of_error(exc)
        _fill(record, listener)
        return record


@dataclass
class EngineTarget:
    client: object  # a started voxrt.engine.client.EngineClient
    voice: str | None = None
    pin_frames: bool = True

    async def run_one(self, item: WorkItem, rate: float, arrival_s: float, tokens_per_s: float | None) \
            -> RequestRecord:
        from voxrt.engine.params import SamplingParams  # noqa: PLC0415

        client = self.client
        sample_rate = client.info.sample_rate
        # the workload's pinned duration in this model's frames (its frame rate is known here)
        num_frames = frames_at_rate(item.num_frames, client.info.frame_rate_hz) if self.pin_frames else None
        record = RequestRecord(item.id, rate, arrival_s, "error:unknown", None, 0, 0.0, 0.0, len(item.text),
                               num_frames, pinned_audio_s=num_frames / client.info.frame_rate_hz
                               if num_frames is not None else None)
        listener = Listener(time.monotonic())
        reporter = None
        try:
            params = SamplingParams(num_frames=num_frames)
            if tokens_per_s:
                parts = tokens(item.text)
                rid = await client.submit(voice=self.voice, params=params, text=parts[0], final=len(parts) == 1)

                async def feed() -> None:
                    for i, part in enumerate(parts[1:], 2):
                        await asyncio.sleep(1.0 / tokens_per_s)
                        await client.append_text(rid, part, final=i == len(parts))
                feeder = asyncio.create_task(feed())
            else:
                rid = await client.submit(voice=self.voice, params=params, text=item.text, final=True)
                feeder = None

            sent: list[tuple[float, float, bool]] = []  # the last report sent to the engine

            async def report(played_s: float) -> None:
                # as the gateway forwards them: only reports that move the engine's deadlines
                played_ms, now_ms = played_s * 1e3, time.monotonic() * 1e3
                if not report_moves_deadlines(sent[0] if sent else None, played_ms, now_ms, False):
                    return
                sent[:] = [(played_ms, now_ms, False)]
                await client.set_playback(rid, int(played_s * sample_rate))
            reporter = asyncio.create_task(_report(listener, report, lambda s: s))
            try:
                async for chunk in client.stream(rid):
                    if chunk.num_samples or chunk.is_last:
                        listener.on_audio(time.monotonic(), chunk.num_samples / chunk.sample_rate, chunk.is_last)
            finally:
                if feeder is not None:
                    feeder.cancel()
            record.status = "ok" if listener.is_finished else "cancelled"
        except Exception as exc:  # noqa: BLE001
            record.status = _status_of_error(exc)
        finally:
            if reporter is not None:
                reporter.cancel()
        _fill(record, listener)
        return record


async def _both(first: asyncio.Task, second: asyncio.Task) -> None:
    """Waits for both tasks; the first to fail cancels the other and its error is raised."""
    done, pending = await asyncio.wait({first, second}, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            for other in pending:
                other.cancel()
            raise task.exception()


async def _report(listener: Listener, send, convert) -> None:
    """Every 100 ms, once audio has started, tell the server how much the listener played."""
    try:
        while not listener.is_finished:
            await asyncio.sleep(PLAYBACK_REPORT_S)
            if listener.first_audio_s is not None and not listener.is_finished:
                await send(convert(listener.played_s(time.monotonic())))
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 (a report for a context that just ended: nothing to do)
        return


def _fill(record: RequestRecord, listener: Listener | None) -> None:
    if listener is None:
        return
    record.ttfa_ms = listener.ttfa_ms
    record.stalls = listener.num_stalls
    record.stall_ms = listener.stall_ms
    record.audio_s = listener.audio_s


async def run_point(target, workload: list[WorkItem], rate: float, duration_s: float, *, seed: int = 0,
                    tokens_per_s: float | None = None, max_requests: int | None = None,
                    progress: bool = False, offset: int = 0, share: tuple[int, int] | None = None,
                    start_at: float | None = None) -> list[RequestRecord]:
    """Requests arrive at Poisson times; workload rows are taken in order from `offset`, cycling. Returns the
    records in arrival order once every request finished. `share=(k, n)`: only the requests i with i % n == k
    (one process of `--procs n`, procs.py), from `start_at` (time.monotonic(), shared by the processes)."""
    times = arrival_times(rate, duration_s, seed, max_requests)
    t0 = time.monotonic() if start_at is None else start_at
    tasks = []
    done_count = 0

    async def one(i: int, at: float) -> RequestRecord:
        nonlocal done_count
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        item = workload[(offset + i) % len(workload)]
        try:
            return await target.run_one(item, rate, at, tokens_per_s)
        finally:
            done_count += 1

    for i, at in enumerate(times):
        if share is None or i % share[1] == share[0]:
            tasks.append(asyncio.create_task(one(i, at)))
    if not progress:
        return list(await asyncio.gather(*tasks))
    everything = asyncio.gather(*tasks)
    while True:
        finished, _ = await asyncio.wait({everything}, timeout=PROGRESS_EVERY_S)
        if finished:
            break
        print(f"  rate {rate:g}: {time.monotonic() - t0:.0f} s, {done_count}/{len(tasks)} requests done",
              file=sys.stderr, flush=True)
    return list(everything.result())
