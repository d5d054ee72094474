"""`voxrt bench`: N concurrent requests through the engine process, no HTTP. Prints per-request time to
first audio, duration, audio seconds and finish reason, then the overall realtime factor. A request the engine
refuses (`server_busy`: only with `--max-admission-wait-ms`, off for this command by default) is a row with
finish reason `refused` and counts in the summary; the others are measured as usual."""

from __future__ import annotations

import asyncio
import os
import time
import wave
from dataclasses import dataclass

import numpy as np

from voxrt.engine.client import EngineClient
from voxrt.engine.errors import ServerBusyError
from voxrt.engine.messages import EngineConfig
from voxrt.engine.params import SamplingParams

DEFAULT_TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs back home "
                "before the sun goes down behind the hills.")


REFUSED = "refused"  # the finish reason of a request the engine refused (server_busy)


@dataclass
class RequestResult:
    request_id: str
    ttfa_ms: float
    duration_ms: float
    audio_s: float
    finish_reason: str
    pcm: np.ndarray


async def _one(client: EngineClient, index: int, text: str, params: SamplingParams, t0_ns: int) -> RequestResult:
    rid = await client.submit(params=params, text=text, final=True, request_id=f"bench-{index}", arrival_ns=t0_ns)
    parts, first_ns, reason = [], None, "?"
    try:
        async for chunk in client.stream(rid):
            if first_ns is None and chunk.num_samples:
                first_ns = time.monotonic_ns()
            parts.append(np.frombuffer(chunk.pcm, dtype="<f4"))
            if chunk.is_last:
                reason = chunk.finish_reason or "?"
    except ServerBusyError:
        reason = REFUSED
    end_ns = time.monotonic_ns()
    pcm = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return RequestResult(rid, ((first_ns or end_ns) - t0_ns) / 1e6, (end_ns - t0_ns) / 1e6,
                         len(pcm) / client.info.sample_rate, reason, pcm)


async def run_bench(config: EngineConfig, num_requests: int, text: str, greedy: bool, num_frames: int | None,
                    out_dir: str | None) -> list[RequestResult]:
    print(f"starting engine: model {config.model} ...", flush=True)
    client = await EngineClient.start(config)
    info = client.info
    print(f"engine ready: {info.name} on {info.device}, attention {info.attention_backend}, "
          f"cuda graphs {info.use_cuda_graphs}, frame path {info.frame_path}, {info.sample_rate} Hz", flush=True)
    try:
        params = SamplingParams(greedy=greedy, num_frames=num_frames)
        t0_ns = time.monotonic_ns()
        results = await asyncio.gather(*(_one(client, i, text, params, t0_ns) for i in range(num_requests)))
        wall_s = (time.monotonic_ns() - t0_ns) / 1e9
    finally:
        await client.close()
    print(f"\n{'request':<10} {'ttfa_ms':>9} {'duration_ms':>12} {'audio_s':>8} {'finish':>8}")
    for r in results:
        print(f"{r.request_id:<10} {r.ttfa_ms:>9.1f} {r.duration_ms:>12.1f} {r.audio_s:>8.2f} {r.finish_reason:>8}")
    audio_s = sum(r.audio_s for r in results)
    ttfas = sorted(r.ttfa_ms for r in results if r.finish_reason != REFUSED)
    refused = num_requests - len(ttfas)
    ttfa = f"TTFA p50 {ttfas[len(ttfas) // 2]:.1f} ms, max {ttfas[-1]:.1f} ms" if ttfas else "no audio"
    print(f"\n{num_requests} requests, {audio_s:.2f} s of audio in {wall_s:.2f} s wall; {ttfa}")
    if refused:
        print(f"{refused} of {num_requests} refused by the engine (server_busy: not started within "
              f"--max-admission-wait-ms); the figures are the other requests'")
    rtf = wall_s / audio_s if audio_s else float("inf")
    print(f"realtime factor (wall / audio): {rtf:.3f}  ({1 / rtf if rtf else 0:.2f}x realtime)")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        for r in results:
            if r.finish_reason == REFUSED:
                continue
            _write_wav(os.path.join(out_dir, f"{r.request_id}.wav"), r.pcm, info.sample_rate)
        print(f"wrote {len(results) - refused} WAV files to {out_dir}")
    return results


def _write_wav(path: str, pcm: np.ndarray, sample_rate: int) -> None:
    data = (np.clip(pcm, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(data.tobytes())
