"""A simulated listener, the pinned-length rule and the token stream of a simulated agent (PURE: every time is
passed in, in seconds on any one clock).

Shared by the load generator (`voxrt.loadgen`, which re-exports them) and the scheduler simulation
(`sched/sim.py`): one statement of what a stall is, and of how an agent's text is split, below both.

The listener starts playing when the first audio arrives and plays in real time. Audio that arrives while
the buffer still holds some is appended to it; audio that arrives after the buffer ran dry (before the last
frame) is a stall, lasting from the moment the buffer ran dry to that arrival, after which playback resumes
at once. TTFA is from the request's start to its first audio.
"""

from __future__ import annotations

import math
import re

CHARS_PER_AUDIO_S = 15.0
PLAYBACK_TOLERANCE_MS = 5.0  # a playback report that moves the engine's deadlines less than this is not sent
FRAMES_PER_S = 12.5
PINNED_LENGTH_RULE = (f"frames = max(1, floor(len(text) / {CHARS_PER_AUDIO_S:g} * {FRAMES_PER_S:g} + 0.5)): "
                      f"{CHARS_PER_AUDIO_S:g} characters per audio second at {FRAMES_PER_S:g} frames/s")


def report_moves_deadlines(last: tuple[float, float, bool] | None, played_ms: float, now_ms: float,
                           is_stalled: bool, tolerance_ms: float = PLAYBACK_TOLERANCE_MS) -> bool:
    """Whether a playback report (`played_ms` played at `now_ms`) is worth sending to the engine, given the
    last one sent, `last` = (played_ms, now_ms, is_stalled), or None. The engine extrapolates its last anchor in
    real time (sched/deadlines.py), so a report that agrees with that within `tolerance_ms`, in the same stall
    state, moves no deadline by more than that. Drift is measured from the last report sent, so it never
    accumulates. The gateway forwards by this rule, and so does the engine-direct load generator (which sent
    every report: ~8,000 a second to the engine at 120 req/s, each read between two steps)."""
    if last is None:
        return True
    last_played, last_now, last_stalled = last
    return last_stalled != is_stalled or abs((now_ms - last_now) - (played_ms - last_played)) >= tolerance_ms


def frames_at_rate(frames: int, frame_rate_hz: float) -> int:
    """A pinned length (`pinned_frames`, frames at FRAMES_PER_S) as frames of a model of another frame rate,
    the same audio duration: Orpheus's 11.7 Hz frames are longer than Qwen3-TTS's 12.5 Hz ones."""
    return max(1, math.floor(frames * frame_rate_hz / FRAMES_PER_S + 0.5))


def pinned_frames(text: str) -> int:
    """The pinned output length of a workload text (`voxrt.loadgen.workload`'s docstring)."""
    return max(1, math.floor(len(text) / CHARS_PER_AUDIO_S * FRAMES_PER_S + 0.5))


def llm_tokens(text: str) -> list[str]:
    """An LLM-like token stream: each word with the whitespace before it (the last keeps what follows it)."""
    return re.findall(r"\s*\S+\s*$|\s*\S+", text) or [text]


class Listener:
    def __init__(self, start_s: float) -> None:
        self.start_s = start_s  # when the request started (its first text)
        self.first_audio_s: float | None = None
        self.play_end_s: float | None = None  # when the buffer runs dry if nothing more arrives
        self.audio_s = 0.0  # audio received
        self.stall_durations_s: list[float] = []
        self.is_finished = False

    def on_audio(self, now_s: float, duration_s: float, is_last: bool = False) -> None:
        """`duration_s` seconds of audio arrived at `now_s`."""
        if self.is_finished:
            raise ValueError("audio after the last frame")
        if duration_s < 0:
            raise ValueError(f"duration must be >= 0, got {duration_s}")
        if self.first_audio_s is None:
            self.first_audio_s = now_s
            self.play_end_s = now_s
        elif now_s > self.play_end_s:
            self.stall_durations_s.append(now_s - self.play_end_s)
            self.play_end_s = now_s
        self.play_end_s += duration_s
        self.audio_s += duration_s
        if is_last:
            self.is_finished = True

    def played_s(self, now_s: float) -> float:
        """Audio played by `now_s` (0 before the first audio)."""
        if self.play_end_s is None:
            return 0.0
        return max(0.0, self.audio_s - max(0.0, self.play_end_s - now_s))

    @property
    def ttfa_ms(self) -> float | None:
        return None if self.first_audio_s is None else (self.first_audio_s - self.start_s) * 1000.0

    @property
    def num_stalls(self) -> int:
        return len(self.stall_durations_s)

    @property
    def stall_ms(self) -> float:
        return sum(self.stall_durations_s) * 1000.0
