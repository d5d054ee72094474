"""Alignment of a context's text with its audio: segment times from the engine, word times estimated.

The engine reports, per audio chunk, the span of the text it consumed while that chunk's frames were made
(engine offsets into the text the gateway fed it). Segments map those offsets back to the client's
original text. A segment's times run from the first to the last chunk that consumed its text; words share
their segment's time in proportion to their length. Both are estimates (`estimated: true`): a dual-track
model's audio trails its text by a few frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from voxrt.text import Segment


@dataclass
class _Track:
    segment: Segment
    engine_start: int
    engine_end: int  # exclusive
    start_ms: float | None = None
    end_ms: float | None = None
    words: list[dict] = field(default_factory=list)
    is_sent: bool = False


class AlignmentTracker:
    def __init__(self) -> None:
        self._tracks: list[_Track] = []
        self._spoken: list[tuple[float, int]] = []  # (word end_ms, original char_end), in order
        self._last_end_ms = 0.0  # segments are spoken in order: none starts before the previous one ends

    def add_segment(self, segment: Segment, engine_start: int, engine_end: int) -> None:
        self._tracks.append(_Track(segment, engine_start, engine_end))

    def on_chunk(self, span: tuple[int, int] | None, start_ms: float, end_ms: float) -> list[_Track]:
        """Records a chunk's audio interval; returns the segments whose text is now fully consumed."""
        if span is None:
            return []
        done = []
        for track in self._tracks:
            if track.is_sent or span[1] <= track.engine_start or span[0] >= track.engine_end:
                continue
            track.start_ms = start_ms if track.start_ms is None else track.start_ms
            track.end_ms = end_ms
            if span[1] >= track.engine_end - 1:
                done.append(track)
        return done

    def finish(self, total_ms: float) -> list[_Track]:
        """At the end of the audio: every segment not yet sent, closed at the end of the audio."""
        rest = [t for t in self._tracks if not t.is_sent]
        for track in rest:
            track.start_ms = total_ms if track.start_ms is None else track.start_ms
            track.end_ms = total_ms
        return rest

    def message_fields(self, tracks: list[_Track], original_text: str) -> tuple[list[dict], list[dict]]:
        """The `segments` and `words` of an alignment message; marks the tracks sent."""
        segments, words = [], []
        for track in tracks:
            # the engine reads text ahead of the audio, so a chunk's span may already reach the next segment
            track.start_ms = max(track.start_ms, self._last_end_ms)
            track.end_ms = max(track.end_ms, track.start_ms)
            self._last_end_ms = track.end_ms
            seg = track.segment
            segments.append({"text": seg.text, "char_start": seg.char_start, "char_end": seg.char_end,
                             "start_ms": round(track.start_ms), "end_ms": round(track.end_ms)})
            words.extend(self._words(track, original_text))
            track.is_sent = True
        return segments, words

    def _words(self, track: _Track, original_text: str) -> list[dict]:
        seg = track.segment
        matches = [m for m in re.finditer(r"\S+", original_text[seg.char_start:seg.char_end]) if re.search(r"\w", m.group())]
        total = sum(len(m.group()) for m in matches) or 1
        t, span_ms = track.start_ms, max(0.0, track.end_ms - track.start_ms)
        out = []
        for m in matches:
            dur = span_ms * len(m.group()) / total
            word = {"word": m.group(), "char_start": seg.char_start + m.start(), "char_end": seg.char_start + m.end(),
                    "start_ms": round(t), "end_ms": round(t + dur)}
            out.append(word)
            self._spoken.append((t + dur, word["char_end"]))
            t += dur
        return out

    def spoken_text(self, original_text: str, played_ms: float) -> str:
        """The prefix of the original text heard by `played_ms` (whole words, best estimate)."""
        return spoken_prefix(self._spoken, original_text, played_ms)


def spoken_prefix(spoken: list[tuple[float, int]], original_text: str, played_ms: float) -> str:
    """`spoken`: (end_ms, char_end) of each aligned word, in order -> the original text up to the end of the
    last word whose audio ended by `played_ms` (barge-in's `spoken_text`)."""
    end = 0
    for word_end_ms, char_end in spoken:
        if word_end_ms <= played_ms:
            end = char_end
    return original_text[:end]
