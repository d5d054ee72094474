"""A stand-in engine core for benchmarking the gateway without a GPU: `voxrt serve --model standin`.

It has `EngineCore`'s command interface (submit, append_text, set_playback, cancel, has_work, step, stats) and
runs in the engine process like the real core, so the gateway pays exactly what it pays in production: the
pickled `AudioChunk` over the pipe, the client's reader thread, the hand-off to the event loop. It generates
no tokens: each request's frames "finish" at a fixed rate (`standin_speed` times real time, Qwen3-TTS's 12.5
frames of 80 ms per second) from its first text, and are cut into Qwen3-TTS's chunk schedule (2, 4, 8, 16,
25, 25, ... frames; ARCHITECTURE.md, "Chunks") of float32 PCM at 24 kHz. Playback reports are accepted and
ignored: the rate is fixed, so a benchmark measures the gateway alone.

The audio is a speech-like signal (voiced syllables with a gliding pitch, formant-shaped harmonics, short
gaps), because what an Opus frame costs depends on what is in it: silence encodes ~3x faster than speech and
white noise ~3x slower (bench/results/2026-12-01-gateway-bench/README.md). No torch, no numpy beyond the one
buffer made at start.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from dataclasses import dataclass

import numpy as np

from voxrt.engine.errors import UnknownVoiceError
from voxrt.engine.messages import (AudioChunk, EngineConfig, EngineLoad, EngineMessage, EngineStats, ModelInfo,
                                   RequestFailed, SubmitRequest)

STANDIN_MODEL = "standin"
SAMPLE_RATE = 24000
FRAME_RATE_HZ = 12.5
SAMPLES_PER_FRAME = 1920  # 80 ms at 24 kHz
CHUNK_SCHEDULE = (2, 4, 8, 16)  # then CHUNK_FRAMES each
CHUNK_FRAMES = 25
CHARS_PER_AUDIO_S = 15.0  # unpinned requests: as many frames as the text would take to speak
MAX_SLEEP_S = 0.002  # step() sleeps at most this long, so commands wait at most this long
SIGNAL_S = 10.0


def chunk_sizes(num_frames: int) -> list[int]:
    """The chunk sizes of a request of `num_frames` frames: 2, 4, 8, 16, 25, 25, ..., the last one cut short."""
    sizes, left = [], num_frames
    for size in (*CHUNK_SCHEDULE, *([CHUNK_FRAMES] * (num_frames // CHUNK_FRAMES + 1))):
        if left <= 0:
            break
        sizes.append(min(size, left))
        left -= sizes[-1]
    return sizes


def speechlike_signal(seconds: float = SIGNAL_S, sample_rate: int = SAMPLE_RATE, seed: int = 0) -> np.ndarray:
    """Syllables of 120-280 ms with 30-150 ms of digital silence between them (TTS output has clean pauses):
    a gliding pitch of 90-220 Hz, harmonics up to the Nyquist falling as 1/k and shaped by three formants,
    and a little breath noise under the same envelope."""
    rng = np.random.default_rng(seed)
    out = np.zeros(int(seconds * sample_rate), dtype=np.float64)
    pos = 0
    while pos < len(out):
        n = int(rng.uniform(0.12, 0.28) * sample_rate)
        t = np.arange(n) / sample_rate
        f0 = rng.uniform(90, 220) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(1, 4) * t))
        phase = 2 * np.pi * np.cumsum(f0) / sample_rate
        formants = ((rng.uniform(300, 800), 250, 1.0), (rng.uniform(900, 2500), 400, 0.5),
                    (rng.uniform(2500, 3500), 500, 0.25))
        voiced = np.zeros(n)
        for k in range(1, 200):
            freq = k * f0.mean()
            if freq > sample_rate / 2 - 500:
                break
            gain = sum(g * math.exp(-((freq - f) / w) ** 2) for f, w, g in formants) + 0.02
            voiced += gain * np.sin(k * phase) / k
        envelope = np.sqrt(np.clip(np.sin(np.pi * t / t[-1]), 0.0, 1.0))
        syllable = envelope * (0.25 * voiced / max(1e-9, np.abs(voiced).max()) + 0.002 * rng.standard_normal(n))
        end = min(len(out), pos + n)
        out[pos:end] = syllable[: end - pos]
        pos = end + int(rng.uniform(0.03, 0.15) * sample_rate)
    return out.astype("<f4")


def opus_floor_us(repeats: int = 3, signal: str = "auto", num_streams: int = 25, rate: int = 48000,
                  bitrate: int | None = None) -> float:
    """libopus alone (through opuslib, as the gateway calls it) on this signal at `rate` (48 kHz: the signal
    resampled to the wire rate, issue 21's floor; 24 kHz: the stand-in's own samples, as the gateway feeds
    libopus by default, voxrt/audio/encoder.py), 20 ms frames, libopus's bitrate for `rate` unless `bitrate`:
    the gateway benchmark's hardware floor, in microseconds per frame. Like the benchmark's contexts, each
    stream is a fresh encoder over 87 model frames starting at one of the offsets the stand-in uses (libopus's
    mode choice, and so its cost, depends on how a stream starts); the fastest of `repeats` passes."""
    import soxr  # noqa: PLC0415 (only the benchmark needs it here)

    from voxrt.audio.opus import OpusEncoder  # noqa: PLC0415
    from voxrt.audio.pcm import float_to_int16  # noqa: PLC0415

    spf = rate // 50  # samples in a 20 ms frame
    base = speechlike_signal()
    num_offsets = int(SIGNAL_S * FRAME_RATE_HZ)
    streams = []
    for k in range(num_streams):
        start = (k * num_offsets // num_streams) * SAMPLES_PER_FRAME
        pcm = np.resize(np.roll(base, -start), 87 * SAMPLES_PER_FRAME)
        wire = pcm if rate == SAMPLE_RATE else soxr.resample(pcm, SAMPLE_RATE, rate, quality="HQ").astype(np.float32)
        streams.append([float_to_int16(wire[i:i + spf]).tobytes() for i in range(0, len(wire) - spf + 1, spf)])
    best = float("inf")
    for _ in range(repeats):
        start_s, num_frames = time.thread_time(), 0
        for frames in streams:
            encoder = OpusEncoder(rate, 20, bitrate=bitrate, signal=signal)._encoder  # raw opuslib: no conversion
            for frame in frames:
                encoder.encode(frame, spf)
            num_frames += len(frames)
        best = min(best, (time.thread_time() - start_s) / num_frames)
    return best * 1e6


@dataclass
class _Request:
    request_id: str
    start_ns: int  # when its first text came (frames start finishing then)
    num_frames: int | None  # None: not known until the text is final
    is_pinned: bool
    text_chars: int = 0
    is_final: bool = False
    num_frames_sent: int = 0
    num_chunks: int = 0
    signal_offset: int = 0


class StandInCore:
    def __init__(self, config: EngineConfig) -> None:
        if not config.standin_speed > 0:
            raise ValueError(f"standin_speed must be > 0, got {config.standin_speed}")
        if config.first_chunk_frames is not None:
            raise ValueError("first_chunk_frames applies to a model program; the stand-in's chunks are fixed "
                             f"(CHUNK_SCHEDULE {CHUNK_SCHEDULE})")
        self.speed = config.standin_speed
        # only reported (load): what a real engine would decode (None: a CPU engine's default)
        self.max_batch_size = config.max_batch_size or 64
        self.frame_ns = int(1e9 / FRAME_RATE_HZ / self.speed)  # one frame "finishes" every frame_ns
        self.signal = speechlike_signal()
        self.signal_bytes = self.signal.tobytes()
        self.requests: dict[str, _Request] = {}
        self._due: list[tuple[int, str, int]] = []  # (ns, request id, chunk index): when a chunk is ready
        self.num_steps = 0
        self.num_chunks = 0
        self.info = ModelInfo(
            name=STANDIN_MODEL, sample_rate=SAMPLE_RATE, frame_rate_hz=FRAME_RATE_HZ,
            samples_per_frame=SAMPLES_PER_FRAME, num_codebooks=16, chunk_frames=CHUNK_FRAMES,
            first_chunk_frames=CHUNK_SCHEDULE[0], voices=("default",), default_voice="default",
            consumes_text_incrementally=True, device="cpu", attention_backend="none", use_cuda_graphs=False,
            lanes=f"none (stand-in at {self.speed:g}x real time)", scheduler_type="standin")

    def warmup(self) -> None:
        pass

    # ---- commands (EngineCore's) ------------------------------------------------------------------------------

    def submit(self, msg: SubmitRequest, now_ns: int | None = None) -> None:
        if msg.voice not in self.info.voices:
            raise UnknownVoiceError(f"unknown voice {msg.voice!r}; available: {', '.join(self.info.voices)}")
        if msg.request_id in self.requests:
            raise ValueError(f"request id {msg.request_id!r} is already live")
        pinned = msg.params.num_frames
        offset = (zlib.crc32(msg.request_id.encode()) % int(SIGNAL_S * FRAME_RATE_HZ)) * SAMPLES_PER_FRAME
        request = _Request(msg.request_id, 0, pinned, pinned is not None, signal_offset=offset)
        self.requests[msg.request_id] = request
        self.append_text(msg.request_id, msg.text, msg.is_text_final, now_ns)

    def append_text(self, request_id: str, text: str, is_final: bool, now_ns: int | None = None) -> bool:
        request = self.requests.get(request_id)
        if request is None or request.is_final:
            return False
        request.text_chars += len(text)
        request.is_final = is_final
        is_starting = request.start_ns == 0 and (text or is_final)
        if is_starting:
            request.start_ns = now_ns or time.monotonic_ns()
        if is_final and request.num_frames is None:
            request.num_frames = max(1, math.ceil(request.text_chars / CHARS_PER_AUDIO_S * FRAME_RATE_HZ))
            self._schedule(request)
        elif is_starting and request.num_frames is not None:
            self._schedule(request)
        return True

    def set_playback(self, request_id: str, played_samples: int, anchor_ns: int, is_stalled: bool = False) -> bool:
        return request_id in self.requests

    def cancel(self, request_id: str) -> bool:
        return self.requests.pop(request_id, None) is not None

    def has_work(self) -> bool:
        return bool(self.requests)

    def seconds_to_wake(self) -> float | None:
        return None  # it holds nothing for a deadline: `step` sleeps until its next chunk itself

    def step(self, now_ns: int | None = None) -> list[EngineMessage]:
        """The chunks due by now; sleeps (at most MAX_SLEEP_S) until the next one when none is."""
        self.num_steps += 1
        now_ns = now_ns or time.monotonic_ns()
        if not self._due or self._due[0][0] > now_ns:
            wait_ns = (self._due[0][0] - now_ns) if self._due else MAX_SLEEP_S * 1e9
            time.sleep(min(wait_ns / 1e9, MAX_SLEEP_S))
            now_ns = time.monotonic_ns()
        events: list[EngineMessage] = []
        while self._due and self._due[0][0] <= now_ns:
            _, request_id, chunk_index = heapq.heappop(self._due)
            request = self.requests.get(request_id)
            if request is not None and request.num_chunks == chunk_index:
                events.append(self._chunk(request))
        return events

    def stats(self, token: int = 0, check_pools: bool = True) -> EngineStats:
        n = len(self.requests)
        return EngineStats(token=token, num_waiting=0, num_running=n, num_requests=n, num_pages_total=0,
                           num_pages_free=0, num_slots_total=0, num_slots_free=0, num_steps=self.num_steps,
                           num_failed_steps=0, pool_ok=True)

    def load(self, now_ns: int | None = None) -> EngineLoad:
        """EngineCore's load report: every request "runs", against the configured batch (the stand-in itself has
        no batch limit and no deadlines)."""
        n = len(self.requests)
        return EngineLoad(num_waiting=0, num_running=n, num_requests=n, decode_batch=n,
                          max_batch_size=self.max_batch_size, max_live_requests=self.max_batch_size, min_slack_ms=None, num_pages_free=0, num_pages_total=0,
                          num_slots_free=0, chunks_late=0, made_ns=now_ns or time.monotonic_ns())

    def close(self) -> None:
        pass

    # ---- internals ----------------------------------------------------------------------------------------------

    def _schedule(self, request: _Request) -> None:
        """Every chunk's due time, from the request's start: chunk j is ready when its last frame finished."""
        if request.num_frames is None or request.num_frames < 1:
            self.requests.pop(request.request_id, None)
            return
        done = 0
        for index, size in enumerate(chunk_sizes(request.num_frames)):
            done += size
            heapq.heappush(self._due, (request.start_ns + done * self.frame_ns, request.request_id, index))

    def _chunk(self, request: _Request) -> AudioChunk | RequestFailed:
        sizes = chunk_sizes(request.num_frames)
        size = sizes[request.num_chunks]
        num_samples = size * SAMPLES_PER_FRAME
        start = (request.signal_offset + request.num_frames_sent * SAMPLES_PER_FRAME) % len(self.signal)
        end = start + num_samples
        if end <= len(self.signal):
            pcm = self.signal_bytes[start * 4:end * 4]
        else:
            pcm = np.concatenate([self.signal[start:], self.signal[: end - len(self.signal)]]).tobytes()
        is_last = request.num_chunks == len(sizes) - 1
        chunk = AudioChunk(request_id=request.request_id, chunk_index=request.num_chunks, pcm=pcm,
                           sample_rate=SAMPLE_RATE, first_frame=request.num_frames_sent, num_frames=size,
                           is_last=is_last, text_span=None,
                           finish_reason=("pinned" if request.is_pinned else "length") if is_last else None)
        request.num_frames_sent += size
        request.num_chunks += 1
        self.num_chunks += 1
        if is_last:
            del self.requests[request.request_id]
        return chunk
