"""What a context does with the text it receives: the engine text to append, and the alignment that maps
the engine's chunks back to the client's text. Pure (no I/O): the ContextRunner sends what these return.

Two strategies, picked by `make_text_in` from the session's `segmentation` and the served program:

- WordTextIn, `auto` for programs that read text as it arrives (`ModelInfo.consumes_text_incrementally`:
  Qwen3-TTS's dual track takes one text token per 80 ms frame, `tiny` too). Text is cleaned incrementally
  (voxrt/text/stream.py) and forwarded as soon as it completes a word, never held to a clause or sentence
  end: with LLM tokens (" world") the engine's text feed can tokenize each word when the next token arrives,
  which is the earliest anyone can know the word is complete. A fragment that completes no word is kept
  back until one does (the engine could not tokenize it yet, and one message per word is enough). The
  `auto` Segmenter still runs beside it, only to group words into alignment segments.
- SegmentTextIn, for programs that read their whole text in the prompt (the engine admits them only once
  the text is final), and for the explicit modes `sentence` and `none` on any program: the Segmenter cuts
  speakable segments and each is appended with a trailing space (so the engine tokenizes its last word).

Both keep `flush` and `context.end` as docs/protocol.md says: a flush speaks everything received so far
(word forwarding ends the last word with a space, so it is spoken now), the end speaks the rest.
"""

from __future__ import annotations

from voxrt.gateway.alignment import AlignmentTracker
from voxrt.gateway.word_alignment import WordAlignment
from voxrt.text import Segment, Segmenter, SpeakableStream, Speech


def make_text_in(segmenter: Segmenter, consumes_text_incrementally: bool) -> "WordTextIn | SegmentTextIn":
    """The text path for a context whose `segmenter` runs the session's segmentation mode: word forwarding
    for `auto` on a program that reads text incrementally (the segmenter then only groups alignment),
    segments otherwise."""
    if segmenter.mode == "auto" and consumes_text_incrementally:
        return WordTextIn(segmenter)
    return SegmentTextIn(segmenter)


class SegmentTextIn:
    def __init__(self, segmenter: Segmenter) -> None:
        self.segmenter = segmenter
        self.alignment = AlignmentTracker()
        self.num_engine_chars = 0  # characters appended to the engine request so far

    @property
    def text(self) -> str:
        """All original text received so far."""
        return self.segmenter.text

    def push(self, text: str) -> str:
        return self._feed(self.segmenter.push(text))

    def flush(self) -> str:
        return self._feed(self.segmenter.flush())

    def end(self) -> str:
        return self._feed(self.segmenter.flush())

    def _feed(self, segments: list[Segment]) -> str:
        parts = []
        for segment in segments:
            text = segment.text + " "  # the trailing space lets the engine tokenize the segment's last word
            start = self.num_engine_chars
            self.num_engine_chars += len(text)
            self.alignment.add_segment(segment, start, start + len(segment.text))
            parts.append(text)
        return "".join(parts)


class WordTextIn:
    def __init__(self, segmenter: Segmenter | None = None) -> None:
        self.segmenter = segmenter or Segmenter("auto")  # groups words into alignment segments; forwards nothing
        if self.segmenter.mode != "auto" or self.segmenter.text:
            raise ValueError(f"word forwarding groups alignment with a fresh 'auto' segmenter, got mode "
                             f"{self.segmenter.mode!r} with {len(self.segmenter.text)} characters pushed")
        self.stream = SpeakableStream()
        self.alignment = WordAlignment()
        self.num_engine_chars = 0  # characters returned for the engine request so far
        self._unsent = ""  # cleaned text that completes no word yet

    @property
    def text(self) -> str:
        """All original text received so far."""
        return self.segmenter.text

    def push(self, text: str) -> str:
        self.alignment.add_segments(self.segmenter.push(text))
        speech = self.stream.push(text)
        # a space in the new text completes the word before it: the engine can tokenize that word now
        return self._forward(speech, is_word_complete=" " in speech.text)

    def flush(self) -> str:
        self.alignment.add_segments(self.segmenter.flush())
        return self._forward(self.stream.flush(), is_word_complete=True)

    def end(self) -> str:
        self.alignment.add_segments(self.segmenter.flush())
        text = self._forward(self.stream.end(), is_word_complete=True)
        self.alignment.end_text()
        return text

    def _forward(self, speech: Speech, is_word_complete: bool) -> str:
        self.alignment.add_speech(speech, self.stream.num_decided_chars)
        self._unsent += speech.text
        if not is_word_complete:
            return ""
        text, self._unsent = self._unsent, ""
        self.num_engine_chars += len(text)
        return text
