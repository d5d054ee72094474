"""SpeakableStream: `speakable` applied incrementally, for programs that read text as it arrives.

A dual-track model (Qwen3-TTS, `tiny`) consumes one text token per frame and can start speaking after the
first word, so the gateway forwards text as it comes instead of holding it to a clause or sentence end.
The stream cleans it on the way (markdown and emoji removed, whitespace collapsed, offsets into the
context's original text kept) and releases each character as soon as no later fragment can change how it
is cleaned:

- every rule of speakable.py is local to a line; a finished line (a newline follows) is decided;
- on the last line, text waits while the line start may still become a fence, thematic break or block
  marker (`LINE_START_PREFIX`: "1" may become "1. ", "-" may become "---"), while a `[` may still open a
  link (`LINK_PREFIX`, at most 100 characters of label), and while a run of `*`, `_` or `~` ends the text
  (its right neighbour decides whether it is emphasis);
- a run of whitespace becomes one space only when the next kept character arrives (a "," after an emoji
  drops it), so a word's trailing space travels with the next word. LLM tokens carry their leading space
  (" world"), so this costs nothing there.

Concatenated, what `push` and `end` return is `speakable(text)` of all the text, character for character
and offset for offset, however the text was split (tests/text/test_stream.py). `flush` cuts: what came
before it is cleaned as if the text ended there, then one space is written so that the engine, which
tokenizes a word only once whitespace follows it (engine/sched/text_feed.py), speaks the last word now;
what follows is cleaned like `speakable_span(text, flush_offset, ...)`.

Each push re-cleans only the undecided tail: the decided offset never lies inside a link or an emphasis run
(each is decided whole), so `drop_reasons` can start there, and the cost of a token does not grow with the
length of its line.

The partial word at the end is released too: the engine's text feed holds it back until it is complete, so
the gateway never has to guess where a word ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxrt.text.speakable import (EMPHASIS_CHARS, LINE_START_PREFIX, LINK, LINK_PREFIX, Collapser,
                                  drop_reasons, is_emoji)

_ZWJ = "\u200d"


@dataclass(frozen=True)
class Speech:
    """Cleaned text released by the stream, and for each of its characters the offset in the original text
    (a space: the first character of the whitespace run it stands for, or the flush point)."""
    text: str
    offsets: tuple[int, ...]


class SpeakableStream:
    def __init__(self) -> None:
        self._text = ""
        self._decided = 0  # original characters before this have been fed to the collapser
        self._span_start = 0  # where the current cleaned span began: 0, or the last flush point
        self._collapser = Collapser()
        self._is_ended = False

    @property
    def text(self) -> str:
        """All original text pushed so far."""
        return self._text

    @property
    def num_decided_chars(self) -> int:
        """Original text before this offset is cleaned and released (or is whitespace awaiting the next
        kept character)."""
        return self._decided

    def push(self, fragment: str) -> Speech:
        """Appends a fragment; returns the cleaned text that became certain."""
        if self._is_ended:
            raise ValueError("text pushed after the stream ended")
        self._text += fragment
        return self._release(self._hold_point())

    def flush(self) -> Speech:
        """Releases everything as if the text ended here, then a space that ends the last word (nothing
        when nothing was released since the last flush). Later text starts a new span."""
        speech = self._release(len(self._text))
        if self._collapser.has_output:
            speech = Speech(speech.text + " ", (*speech.offsets, len(self._text)))
        self._span_start = len(self._text)
        self._collapser = Collapser()
        return speech

    def end(self) -> Speech:
        """Releases everything: no more text comes."""
        speech = self._release(len(self._text))
        self._is_ended = True
        return speech

    def _release(self, until: int) -> Speech:
        """Feeds text[decided:until] to the collapser; its drop reasons are final there (see _hold_point)."""
        lo, text = self._decided, self._text
        if until > lo:
            drop = drop_reasons(text, self._pattern_start(lo), lo, len(text), self._previous_is_emoji(lo))
            self._collapser.feed(text, lo, until, drop)
            self._decided = until
        out, offsets = self._collapser.take()
        return Speech(out, tuple(offsets))

    def _pattern_start(self, at: int) -> int:
        """Where the patterns must start matching to decide `at` as one pass over the span would: the start
        of its line (every rule is local to a line), or the span start when that is later."""
        return max(self._span_start, self._text.rfind("\n", 0, at) + 1)

    def _previous_is_emoji(self, at: int) -> bool:
        """The emoji state before `at` (a ZWJ keeps the state of the character before it), as one pass over
        the span from its start would have it."""
        i = at - 1
        while i >= self._span_start and self._text[i] == _ZWJ:
            i -= 1
        if i >= self._span_start:
            return is_emoji(self._text[i])
        start = self._span_start  # speakable_span starts with the character before the span
        return start > 0 and is_emoji(self._text[start - 1])

    def _hold_point(self) -> int:
        """The first offset whose cleaning later text may still change (len(text) when none)."""
        text, end = self._text, len(self._text)
        line_start = text.rfind("\n") + 1  # earlier lines are finished, so decided
        region = max(line_start, self._span_start)
        if line_start >= self._span_start and LINE_START_PREFIX.fullmatch(text, line_start, end):
            hold = line_start  # "^" matches here: the line start is open (fence, rule, marker)
        else:
            hold = _open_link_start(text, region, end)
        if end > region and text[end - 1] in EMPHASIS_CHARS:
            run = end - 1
            while run > region and text[run - 1] == text[end - 1]:
                run -= 1
            hold = min(hold, run)
        # the prefixes are prefix-closed, so nothing released is ever undecided again
        assert hold >= self._decided, (hold, self._decided)
        return hold


def _open_link_start(text: str, start: int, end: int) -> int:
    """Where a link that later text may still complete opens (`end` when none), scanning as
    `LINK.finditer` does: a complete link is skipped whole (a "[" inside its URL opens nothing)."""
    at = start
    while True:
        bracket, bang = text.find("[", at, end), text.find("!", at, end)
        q = min(bracket, bang) if bracket >= 0 and bang >= 0 else max(bracket, bang)
        if q < 0:
            return end
        if (m := LINK.match(text, q, end)) is not None:
            at = m.end()
        elif LINK_PREFIX.fullmatch(text, q, end):
            return q
        else:
            at = q + 1
