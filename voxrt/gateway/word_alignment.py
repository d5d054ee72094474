"""Alignment of word-forwarded text with its audio: word times from the engine's chunk spans.

With word forwarding (text_in.py) the engine text is the context's cleaned text (voxrt/text/stream.py),
every character of it mapped to its offset in the client's original text. Words are the runs of that text
between spaces that hold a letter or digit; a word's `char_start` / `char_end` run from its first to its
last kept character in the original text (so `text[char_start:char_end]` is what the client sent there,
markup inside included).

Times: the engine reports, per audio chunk, the span of engine text consumed while the chunk's frames were
made. A word is voiced once a chunk's span reaches its end; its times interpolate linearly within the
chunks that consumed its first and last characters (a chunk of 25 frames holds several words, and chunks
follow each other, so times never step back). They are estimates (`estimated: true`): a dual-track model's
audio trails its text by a few frames. Words still unvoiced when the audio ends share what is left of it
by length.

Segments group the words for the `segments` field: the segments the `auto` Segmenter would cut (an early
first clause, then sentences), timed from their words. An `alignment` message goes out per chunk that
voiced words, with those words and the segments that became complete (all their words voiced and no word
can start inside them any more), so captions follow the audio word by word; `segments` may be empty,
`words` never is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from voxrt.gateway.alignment import spoken_prefix
from voxrt.text import Segment, Speech


@dataclass
class _Word:
    engine_start: int
    engine_end: int  # exclusive
    char_start: int
    char_end: int  # exclusive
    has_alnum: bool
    start_ms: float = 0.0
    end_ms: float = 0.0


@dataclass
class Ready:
    """What an alignment message should carry now (truthy when there is anything)."""
    words: list[_Word] = field(default_factory=list)
    segments: list[tuple[Segment, float, float]] = field(default_factory=list)  # (segment, start_ms, end_ms)

    def __bool__(self) -> bool:
        return bool(self.words or self.segments)


class WordAlignment:
    def __init__(self) -> None:
        self._words: list[_Word] = []  # closed words with a letter or digit, in order
        self._open: _Word | None = None  # the word at the end of the engine text, maybe incomplete
        self._num_engine_chars = 0
        self._frontier = 0  # no word can start before this original offset any more
        self._num_voiced = 0  # words [0, _num_voiced) have times
        self._chunks: list[tuple[int, int, float, float]] = []  # (engine start, end, start_ms, end_ms)
        self._chunk_cursor = 0  # first chunk that may hold the next word (words and chunks go in order)
        self._voiced_until = 0  # engine offset up to which the text has been consumed
        self._segments: list[Segment] = []
        self._num_segments_done = 0
        self._segment_word_cursor = 0  # first voiced word that may overlap the next segment
        self._last_word_end_ms = 0.0
        self._last_segment_end_ms = 0.0
        self._spoken: list[tuple[float, int]] = []  # (word end_ms, original char_end) of words sent

    # ---- text side -----------------------------------------------------------------------------------------

    def add_speech(self, speech: Speech, num_decided_chars: int) -> None:
        """Engine text appended, in order; `num_decided_chars`: the stream's decided original offset (later
        kept characters lie at or after it)."""
        for ch, offset in zip(speech.text, speech.offsets):
            at = self._num_engine_chars
            self._num_engine_chars += 1
            if ch == " ":
                self._close_open()
            elif self._open is None:
                self._open = _Word(at, at + 1, offset, offset + 1, ch.isalnum())
            else:
                self._open.engine_end, self._open.char_end = at + 1, offset + 1
                self._open.has_alnum = self._open.has_alnum or ch.isalnum()
        self._frontier = self._open.char_start if self._open is not None else num_decided_chars

    def add_segments(self, segments: list[Segment]) -> None:
        self._segments.extend(segments)

    def end_text(self) -> None:
        """No more text: the last word is complete."""
        self._close_open()
        self._frontier = math.inf

    def _close_open(self) -> None:
        if self._open is not None and self._open.has_alnum:
            self._words.append(self._open)
        self._open = None

    # ---- audio side ----------------------------------------------------------------------------------------

    def on_chunk(self, span: tuple[int, int] | None, start_ms: float, end_ms: float) -> Ready:
        """Records a chunk's audio interval and the engine text consumed for it; returns what became known."""
        if span is None:
            return Ready()
        if span[1] > span[0]:
            self._chunks.append((span[0], span[1], start_ms, end_ms))
        self._voiced_until = max(self._voiced_until, span[1])
        ready = Ready()
        while self._num_voiced < len(self._words) and self._words[self._num_voiced].engine_end <= self._voiced_until:
            word = self._words[self._num_voiced]
            word.start_ms = max(self._time_at(word.engine_start, is_end=False), self._last_word_end_ms)
            word.end_ms = max(self._time_at(word.engine_end, is_end=True), word.start_ms)
            self._last_word_end_ms = word.end_ms
            self._num_voiced += 1
            ready.words.append(word)
        if ready.words:  # a segment goes with words: every message has words (clients read words or segments)
            ready.segments = self._complete_segments(is_final=False)
        return ready

    def finish(self, total_ms: float) -> Ready:
        """At the end of the audio: every word and segment not yet sent, the words sharing what is left of
        the audio by length. An open word (the text did not end: the engine stopped first) is not one."""
        rest = self._words[self._num_voiced:]
        t = self._last_word_end_ms
        if rest and self._chunks:
            t = max(t, self._time_at(rest[0].engine_start, is_end=False))
        t = min(t, total_ms)
        num_chars = sum(w.engine_end - w.engine_start for w in rest) or 1
        span_ms = max(0.0, total_ms - t)
        for word in rest:
            word.start_ms = t
            t = min(total_ms, t + span_ms * (word.engine_end - word.engine_start) / num_chars)
            word.end_ms = t
        if rest:
            rest[-1].end_ms = max(total_ms, rest[-1].start_ms)
            self._last_word_end_ms = rest[-1].end_ms
        self._num_voiced = len(self._words)
        return Ready(rest, self._complete_segments(is_final=True))

    def _time_at(self, engine_offset: int, is_end: bool) -> float:
        """Audio time of an engine offset (a word's start, or a word's exclusive end): linear within the
        first chunk that consumed text past it (reaching it, for an end)."""
        chunks = self._chunks
        while self._chunk_cursor < len(chunks) and not self._covers(chunks[self._chunk_cursor], engine_offset, is_end):
            self._chunk_cursor += 1
        if self._chunk_cursor == len(chunks):  # past every chunk: only at the end of the audio
            return chunks[-1][3] if chunks else 0.0
        start, end, start_ms, end_ms = chunks[self._chunk_cursor]
        if engine_offset <= start:
            return start_ms
        return start_ms + (end_ms - start_ms) * min(1.0, (engine_offset - start) / (end - start))

    @staticmethod
    def _covers(chunk: tuple[int, int, float, float], engine_offset: int, is_end: bool) -> bool:
        return chunk[1] >= engine_offset if is_end else chunk[1] > engine_offset

    def _complete_segments(self, is_final: bool) -> list[tuple[Segment, float, float]]:
        """Segments whose words are all voiced and in which no word can start any more, timed from the
        words that overlap them."""
        done = []
        while self._num_segments_done < len(self._segments):
            segment = self._segments[self._num_segments_done]
            if not is_final and self._frontier < segment.char_end:
                break
            if not is_final and self._num_voiced < len(self._words) \
                    and self._words[self._num_voiced].char_start < segment.char_end:
                break
            words = self._words_in(segment)
            start_ms = max(words[0].start_ms if words else self._last_segment_end_ms, self._last_segment_end_ms)
            end_ms = max(words[-1].end_ms if words else start_ms, start_ms)
            self._last_segment_end_ms = end_ms
            done.append((segment, start_ms, end_ms))
            self._num_segments_done += 1
        return done

    def _words_in(self, segment: Segment) -> list[_Word]:
        """The voiced words that overlap `segment` (one may straddle two segments: "a—b" cut after the dash)."""
        i = self._segment_word_cursor
        while i < self._num_voiced and self._words[i].char_end <= segment.char_start:
            i += 1
        self._segment_word_cursor = i
        j = i
        while j < self._num_voiced and self._words[j].char_start < segment.char_end:
            j += 1
        return self._words[i:j]

    def message_fields(self, ready: Ready, original_text: str) -> tuple[list[dict], list[dict]]:
        """The `segments` and `words` of an alignment message."""
        segments = [{"text": s.text, "char_start": s.char_start, "char_end": s.char_end,
                     "start_ms": round(start_ms), "end_ms": round(end_ms)} for s, start_ms, end_ms in ready.segments]
        words = []
        for w in ready.words:
            words.append({"word": original_text[w.char_start:w.char_end], "char_start": w.char_start,
                          "char_end": w.char_end, "start_ms": round(w.start_ms), "end_ms": round(w.end_ms)})
            self._spoken.append((w.end_ms, w.char_end))
        return segments, words

    def spoken_text(self, original_text: str, played_ms: float) -> str:
        """The prefix of the original text heard by `played_ms` (whole words, best estimate)."""
        return spoken_prefix(self._spoken, original_text, played_ms)
