"""Segmenter: a stream of text fragments (LLM tokens as they arrive) in, speakable segments out.

Sans-I/O: `push(fragment)` returns the segments that became complete, `flush()` forces out the rest. Each
segment carries its speakable text (see speakable.py) and the span of the context's original text it came
from, so alignment and barge-in can point back at what the client sent.

The gateway segments text for programs that read their whole prompt at once, and for the explicit modes; for
programs that read text as it arrives, its `auto` forwards words instead (gateway/text_in.py, stream.py)
and runs an "auto" segmenter only to group the words of alignment messages.

Where cuts go is boundaries.py's job; the segmenter only picks the rules for the next segment:
- "auto" (the default): sentence boundaries, plus an early first segment for a low time to first audio.
  Until the first segment is out, a clause mark (`,` `;` `:` `—`) ends it once it has `first_min_chars`
  speakable characters, and a word boundary ends it once the pending text is longer than
  `first_max_chars`. Later segments end at sentences, or, past `max_chars`, at the last clause mark or
  word boundary that fits.
- "sentence": sentence boundaries and the `max_chars` cut, no early first segment.
- "none": no boundaries; push() returns nothing and flush() releases all pending text as one segment
  (no max_chars cut either: the client segments, or asks for one utterance).

Defaults: first_min_chars=5 makes the first clause of a typical agent reply its own segment ("Sure,",
"Okay,", "Of course,", "Hi there,") while two- to four-letter interjections ("Hi,", "No,", "Yes,") wait
for more: their ~0.2-0.3 s of audio is shorter than the next segment's text and first-chunk latency, and
would be followed by a gap. first_max_chars=80 (about 5 s of speech at ~15 characters/s) bounds the wait
for a first sentence without clause marks; max_chars=400 (about 25 s) bounds any later segment.

The early-first rule applies to the first segment of the segmenter's life only (not again after a flush):
after a flush the listener usually still hears earlier audio. Only emitted segments count: text consumed
without anything speakable (emoji, markup, punctuation) does not use up the early first segment.

Results do not depend on how the text was split into fragments: boundaries.py decides a cut only when the
text that decides it is there, and flush() applies the same rules with the end of the text as final.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxrt.text.boundaries import CutRules, next_cut, skip_space
from voxrt.text.speakable import speakable_span

MODES = ("auto", "sentence", "none")


@dataclass(frozen=True)
class Segment:
    text: str  # what to speak: markup and emoji removed, whitespace collapsed, stripped; never empty
    char_start: int  # offset into the context's original text (all fragments pushed so far)
    char_end: int  # exclusive; the original span, markup included, without surrounding whitespace
    index: int  # 0, 1, 2, ... in order of emission


class Segmenter:
    def __init__(self, mode: str = "auto", first_min_chars: int = 5, first_max_chars: int = 80,
                 max_chars: int = 400) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown segmentation mode {mode!r}; expected one of {', '.join(MODES)}")
        if not 0 <= first_min_chars <= first_max_chars:
            raise ValueError(f"need 0 <= first_min_chars <= first_max_chars, got {first_min_chars}, "
                             f"{first_max_chars}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self.mode = mode
        self._first_rules = CutRules(max_chars=first_max_chars, min_clause_chars=first_min_chars)
        self._rules = CutRules(max_chars=max_chars)
        self._text = ""
        self._pending_start = 0
        self._num_segments = 0

    @property
    def text(self) -> str:
        """All original text pushed so far."""
        return self._text

    @property
    def pending_start(self) -> int:
        """Original offset where unreleased text begins (released text ends here; what follows may start
        with the whitespace after the last segment)."""
        return self._pending_start

    def push(self, text: str) -> list[Segment]:
        """Appends a fragment; returns the segments that became complete."""
        self._text += text
        if self.mode == "none" or not text:
            return []
        return self._cut_all(is_final=False)

    def flush(self) -> list[Segment]:
        """Forces out all pending text (a flush message, or the end of the context)."""
        segments = [] if self.mode == "none" else self._cut_all(is_final=True)
        if self._pending_start < len(self._text):
            segment = self._release(len(self._text))
            if segment is not None:
                segments.append(segment)
        return segments

    def _cut_all(self, is_final: bool) -> list[Segment]:
        segments = []
        while (cut := next_cut(self._text, self._pending_start, self._next_rules(), is_final)) is not None:
            segment = self._release(cut)
            if segment is not None:
                segments.append(segment)
        return segments

    def _next_rules(self) -> CutRules:
        is_first = self.mode == "auto" and self._num_segments == 0
        return self._first_rules if is_first else self._rules

    def _release(self, cut: int) -> Segment | None:
        """Consumes text[pending_start:cut]; returns its segment, or None when nothing in it is spoken."""
        assert self._pending_start < cut <= len(self._text), (self._pending_start, cut, len(self._text))
        start, self._pending_start = self._pending_start, cut
        spoken, _ = speakable_span(self._text, start, cut)
        if not any(ch.isalnum() for ch in spoken):  # only emoji, markup or punctuation: nothing to say
            return None
        char_start = skip_space(self._text, start)
        char_end = cut
        while self._text[char_end - 1].isspace():
            char_end -= 1
        segment = Segment(spoken, char_start, char_end, self._num_segments)
        self._num_segments += 1
        return segment
