"""A context's playback clock: where the listener is in the audio we sent, in milliseconds of that audio.

It is an anchor (at time `anchor_time_ms` the listener had played `anchor_played_ms`) plus the assumption
that playback runs in real time from there and never passes what was sent. Without client reports the
anchor is (time the first audio was sent, 0): protocol.md, `playback`: "the server assumes playback started
when the first frame was sent and runs in real time". A `playback` report moves the anchor to what the
client says. When the listener runs dry (a stall) and audio arrives, playback resumes from then.

Times are monotonic milliseconds passed in; nothing here reads a clock. One clock per context.
"""

from __future__ import annotations


class PlaybackClock:
    def __init__(self) -> None:
        self.sent_ms = 0.0  # audio sent so far
        self.num_stalls = 0
        self.stall_ms = 0.0  # total stalled time, counted when playback resumes
        self._anchor_time_ms: float | None = None  # None: no audio sent yet
        self._anchor_played_ms = 0.0
        self._is_finished = False

    @property
    def is_started(self) -> bool:
        return self._anchor_time_ms is not None

    @property
    def is_finished(self) -> bool:
        return self._is_finished

    def on_audio_sent(self, duration_ms: float, now_ms: float) -> None:
        """`duration_ms` more audio was sent at `now_ms`."""
        if duration_ms < 0:
            raise ValueError(f"duration_ms must be >= 0, got {duration_ms}")
        if self._anchor_time_ms is None:
            self._anchor_time_ms, self._anchor_played_ms = now_ms, 0.0
        else:
            dry_at_ms = self._dry_at_ms()
            if now_ms > dry_at_ms:
                # The listener ran out at dry_at_ms and waited until now: resume from the end of what it had.
                self.num_stalls += 1
                self.stall_ms += now_ms - dry_at_ms
                self._anchor_time_ms, self._anchor_played_ms = now_ms, self.sent_ms
        self.sent_ms += duration_ms

    def on_audio_sent_until(self, duration_ms: float, now_ms: float) -> float:
        """`on_audio_sent(duration_ms, now_ms)`, then `play_time_ms(sent_ms)`: when the audio sent so far, this
        included, finishes playing. The gateway's pacing does both once a frame (audio_out.py); here in one call
        and without the two method calls inside them, with the same result."""
        anchor_ms = self._anchor_time_ms
        if anchor_ms is None or duration_ms < 0:  # the first audio (or the error): the plain calls
            self.on_audio_sent(duration_ms, now_ms)
            return self._anchor_time_ms + (self.sent_ms - self._anchor_played_ms)
        sent_ms = self.sent_ms
        dry_at_ms = anchor_ms + (sent_ms - self._anchor_played_ms)  # `_dry_at_ms`
        if now_ms > dry_at_ms:
            self.num_stalls += 1
            self.stall_ms += now_ms - dry_at_ms
            self._anchor_time_ms = anchor_ms = now_ms
            self._anchor_played_ms = sent_ms
        self.sent_ms = sent_ms = sent_ms + duration_ms
        return anchor_ms + (sent_ms - self._anchor_played_ms)

    def on_report(self, played_ms: float, now_ms: float) -> None:
        """The client says it has played `played_ms` at `now_ms` (its own clock is not ours: we take the
        position and stamp it with our arrival time). Clamped to what was sent. Ignored before any audio
        was sent: there is nothing to have played, and the first audio starts the clock."""
        if self._anchor_time_ms is None:
            return
        self._anchor_time_ms = now_ms
        self._anchor_played_ms = min(max(played_ms, 0.0), self.sent_ms)

    def mark_finished(self) -> None:
        """The last audio was sent: running dry after it is the end, not a stall. (Audio sent after this call,
        e.g. a padding frame, is still counted; only `is_stalled` changes.)"""
        self._is_finished = True

    def played_ms(self, now_ms: float) -> float:
        if self._anchor_time_ms is None:
            return 0.0
        elapsed_ms = max(now_ms - self._anchor_time_ms, 0.0)
        # A listener never plays audio that was not sent yet.
        return min(self._anchor_played_ms + elapsed_ms, self.sent_ms)

    def buffered_ms(self, now_ms: float) -> float:
        return self.sent_ms - self.played_ms(now_ms)

    def is_stalled(self, now_ms: float) -> bool:
        return self.is_started and not self._is_finished and self.played_ms(now_ms) >= self.sent_ms

    def play_time_ms(self, audio_ms: float) -> float | None:
        """When audio position `audio_ms` plays, by the current anchor: the deadline for the chunk that starts
        there. In the past when the listener is already late (stalled). None before any audio was sent."""
        if self._anchor_time_ms is None:
            return None
        return self._anchor_time_ms + (audio_ms - self._anchor_played_ms)

    def _dry_at_ms(self) -> float:
        """When the listener runs out of the audio sent so far, by the current anchor."""
        assert self._anchor_time_ms is not None
        return self._anchor_time_ms + (self.sent_ms - self._anchor_played_ms)
