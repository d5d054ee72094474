"""Turns appended text fragments into text tokens without depending on how the text was split.

Clients stream text in arbitrary fragments (single LLM tokens, half words). Tokenizing each fragment on its
own would make the tokens depend on the split. So the feed holds back the trailing partial word: it
tokenizes only up to the last whitespace, and everything once the text is final. Each token keeps the
character span of the request's text it came from, for alignment.
"""

from __future__ import annotations

from typing import Callable, Sequence

# A tokenizer maps a string to (token ids, [(char_start, char_end)] relative to that string).
Tokenizer = Callable[[str], tuple[Sequence[int], Sequence[tuple[int, int]]]]


class TextFeed:
    def __init__(self, tokenize: Tokenizer) -> None:
        self._tokenize = tokenize
        self.text = ""
        self.num_chars_tokenized = 0
        self.token_ids: list[int] = []
        self.token_spans: list[tuple[int, int]] = []
        self.is_final = False

    def append(self, text: str, is_final: bool = False) -> int:
        """Adds text; returns how many new tokens became available."""
        if self.is_final and text:
            raise ValueError("text appended after the text was marked final")
        self.text += text
        self.is_final = self.is_final or is_final
        end = len(self.text) if self.is_final else _last_boundary(self.text, self.num_chars_tokenized)
        if end <= self.num_chars_tokenized:
            return 0
        start = self.num_chars_tokenized
        ids, spans = self._tokenize(self.text[start:end])
        self.token_ids.extend(ids)
        self.token_spans.extend((start + a, start + b) for a, b in spans)
        self.num_chars_tokenized = end
        return len(ids)


def _last_boundary(text: str, start: int) -> int:
    """Start of the whitespace run before the trailing partial word (a BPE word keeps its leading
    whitespace, the whole run of it), or `start` when there is none at or after `start`."""
    i = len(text) - 1
    while i >= start and not text[i].isspace():
        i -= 1
    if i < start:
        return start
    while i > start and text[i - 1].isspace():
        i -= 1
    return i
