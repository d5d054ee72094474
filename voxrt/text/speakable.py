"""What of a text is spoken: markdown markup and emoji removed, whitespace collapsed, offsets kept.

Agents' LLMs write markdown and emoji even when asked not to; a TTS model reads `**` or a rocket badly or
aloud. `speakable` keeps the words and drops the markup, and for every character it keeps it reports the
offset of that character in the input, so that audio alignment can point back into the client's text.

Every rule is local (it looks at a line, a link, or a character's neighbours), so cleaning a segment's span
gives the same result however the stream was cut into fragments, and stream.py can clean text as it arrives
(`drop_reasons` and `Collapser` are the two halves it shares with `speakable_span`). The segmenter cleans
a span of the whole context text with `speakable_span`: `^` still means a real line start there, and the
character before the span is still seen as a neighbour (re's `pos`/`endpos` search arguments keep both;
see the `re` docs on `Pattern.search`). Link labels and titles are at most 100 characters.

Kept on purpose: bare URLs (a TTS front end may read or skip them; dropping words is worse), a lone `*`
between spaces or digits (`2 * 3`), underscores inside words (`snake_case`), and symbols that are words
(`°`, `%`, `©`, `™`, arrows, math). Removed: `**bold**` / `*it*` / `_it_` / `~~strike~~` markers, backticks
(code text kept), fence lines, heading / list / quote markers at line starts, thematic breaks, the link
syntax of `[label](url)` (label kept), and emoji: pictographs, dingbats, variation selectors, ZWJ joiners
inside emoji sequences, skin tones, flags, keycaps and tags.
"""

from __future__ import annotations

import re
import unicodedata

# Why each character is dropped; SEPARATOR also stands for a space, so "Great🎉thanks" becomes two words
# while "**bold**text" stays one.
_KEEP, _MARKUP, _SEPARATOR = 0, 1, 2

_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.MULTILINE)  # ```python: the tag is not spoken
_RULE_LINE = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$", re.MULTILINE)  # --- *** ___
# Line-start markers: quotes (`> `, nested), then one heading (`## `) or list marker (`- `, `* `, `+ `,
# `1. `, `1) `). CommonMark needs the space after a marker; "-5 degrees" and "#1" are text.
_LINE_MARKER = re.compile(r"^[ \t]*(?:>[ \t]?)*(?:#{1,6}[ \t]+|(?:[-*+]|\d{1,9}[.)])[ \t]+)?", re.MULTILINE)
# [label](url) and ![alt](url), with an optional "title"; group 1 is the label. Label and title are bounded
# (100 characters, far longer than link text in agent replies) so that a lone "[" in a reply holds the
# incremental stream (stream.py) back for at most that long, never to the end of the line.
LINK = re.compile(r"!?\[([^\]\n]{0,100})\]\([^)\s]*(?:[ \t]+\"[^\"\n]{0,100}\")?\)")
_EMPHASIS = re.compile(r"\*+|_+|~~+")

# For the incremental stream (stream.py), which holds text back while one of these matches all of the text
# from a line start or a "[" / "!" to its end: a line start that may still turn into a fence, a thematic break
# or a block marker (decided by its first character that cannot continue one, or its newline), and a link
# not closed yet. Each accepts every text whose verdict more characters may still change, and is
# prefix-closed (once a text fails, every longer one fails too), so a character once decided stays decided.
LINE_START_PREFIX = re.compile(
    r"[ \t]*(?:`{1,2}|~{1,2})?"  # _FENCE_LINE
    r"|[ \t]*(?:(?P<rule>[-*_])(?:[ \t]*(?P=rule))*[ \t]*)?"  # _RULE_LINE
    r"|[ \t]*(?:>[ \t]?)*(?:#{1,6}[ \t]*|[-*+][ \t]*|\d{1,9}(?:[.)][ \t]*)?)?")  # _LINE_MARKER
LINK_PREFIX = re.compile(r"!?(?:\[[^\]\n]{0,100}(?:\](?:\([^)\s]*(?:[ \t]+(?:\"[^\"\n]{0,100}\"?)?)?)?)?)?")
EMPHASIS_CHARS = "*_~"  # a run of them at the end of the text waits for its right neighbour

_CLOSING_PUNCTUATION = ",.;:!?…)]}”’»"
_ZWJ = "\u200d"
_KEYCAP = "\u20e3"


def is_emoji(ch: str) -> bool:
    """Pictographic symbols and the invisible parts of emoji sequences (not `°`, `©`, `™`, `→`, `≤`)."""
    cp = ord(ch)
    if 0x1F000 <= cp <= 0x1FAFF:  # pictographs, emoticons, transport, flags (regional indicators), skin tones
        return True
    if 0x2600 <= cp <= 0x27BF:  # Miscellaneous Symbols and Dingbats: ☀ ♥ ✅ ✨ ❤ ➡
        return True
    if 0x2190 <= cp <= 0x2BFF:  # arrows, technical, shapes, misc symbols: only the pictographic ones
        return unicodedata.category(ch) == "So"  # ⌚ ⏰ ▶ ⬆ ⭐ (So); → ≤ are Sm and stay
    return cp in (0x3030, 0x303D, 0x3297, 0x3299) or _is_invisible_emoji_part(cp)


def _is_invisible_emoji_part(cp: int) -> bool:
    return (0xFE00 <= cp <= 0xFE0F          # variation selectors (VS16 asks for emoji presentation)
            or 0xE0100 <= cp <= 0xE01EF     # variation selectors supplement
            or 0xE0020 <= cp <= 0xE007F     # tags (subdivision flags such as Scotland)
            or cp == ord(_KEYCAP))          # "1️⃣" = 1 + VS16 + keycap: the digit is kept and spoken


def speakable(text: str) -> tuple[str, list[int]]:
    """`text` cleaned for speech, and for each character of the result its offset in `text`.

    A collapsed run of whitespace (or of removed emoji) maps to the offset of its first character."""
    return speakable_span(text, 0, len(text))


def speakable_span(text: str, start: int, end: int) -> tuple[str, list[int]]:
    """`speakable` of `text[start:end]` with offsets into `text`; the text before `start` is context only
    (whether `start` is a line start, the neighbour of a marker at `start`)."""
    if not 0 <= start <= end <= len(text):
        raise ValueError(f"span [{start}, {end}) outside text of {len(text)} characters")
    drop = drop_reasons(text, start, start, end, start > 0 and is_emoji(text[start - 1]))
    collapser = Collapser()
    collapser.feed(text, start, end, drop)
    return collapser.take()


def drop_reasons(text: str, start: int, mark_from: int, end: int, previous_is_emoji: bool) -> bytearray:
    """Why each character of `text[mark_from:end]` is dropped (_KEEP, _MARKUP or _SEPARATOR), as
    `speakable_span(text, start, end)` decides it, with `previous_is_emoji` the emoji state before
    `mark_from`. The line patterns are tried at the start of `mark_from`'s line (when that is at or after
    `start`, as "^" would match there) and at every later line start; links and emphasis runs are searched
    from `mark_from`, so `mark_from` must not lie inside one that begins before it. speakable_span passes
    `mark_from == start`; the incremental stream (stream.py) passes its decided offset, which never lies
    inside a link or a run (it decides each whole), and so re-marks only its undecided tail."""
    drop = bytearray(end - mark_from)

    def mark(a: int, b: int, why: int = _MARKUP) -> None:
        for i in range(max(a, mark_from), min(b, end)):
            drop[i - mark_from] = drop[i - mark_from] or why

    line = text.rfind("\n", 0, mark_from) + 1
    if line < start:  # the span starts mid-line: its first line start is after its first newline
        newline = text.find("\n", mark_from, end)
        line = newline + 1 if newline >= 0 else -1
    while line >= 0:
        for pattern in (_FENCE_LINE, _RULE_LINE, _LINE_MARKER):
            if (m := pattern.match(text, line, end)) is not None:
                mark(m.start(), m.end())  # a marker's leading spaces go too: the newline still separates
        newline = text.find("\n", line, end)
        line = newline + 1 if newline >= 0 else -1
    for m in LINK.finditer(text, mark_from, end):
        mark(m.start(), m.start(1))
        mark(m.end(1), m.end())
    for i in range(mark_from, end):
        if text[i] == "`":
            mark(i, i + 1)
    for m in _EMPHASIS.finditer(text, mark_from, end):
        if _is_emphasis_marker(text, m.start(), m.end(), end):
            mark(m.start(), m.end())
    _mark_emoji(text, mark_from, end, mark, previous_is_emoji)
    return drop


def _is_emphasis_marker(text: str, a: int, b: int, end: int) -> bool:
    """CommonMark's flanking rule, simplified: a run of `*`, `_` or `~~` touching a word on one side is
    markup; a run between spaces (`2 * 3`) or inside a word or number (`snake_case`, `2*3`) is text. Pairs
    are not matched: one segment may hold only the opening `**` of a bold run the next segment closes."""
    before = text[a - 1] if a > 0 else " "
    after = text[b] if b < end else " "
    if before.isspace() and after.isspace():
        return False
    return not (before.isalnum() and after.isalnum())


def _mark_emoji(text: str, start: int, end: int, mark, previous_is_emoji: bool) -> None:
    for i in range(start, end):
        ch = text[i]
        if ch < _ZWJ:  # below every emoji code point and the ZWJ: most text (cleaned once per token)
            previous_is_emoji = False
        elif is_emoji(ch):
            # Pictographs separate words; the invisible parts (VS16, keycap, tags) join them.
            mark(i, i + 1, _MARKUP if _is_invisible_emoji_part(ord(ch)) else _SEPARATOR)
            previous_is_emoji = True
        elif ch == _ZWJ and previous_is_emoji:  # 👩‍💻; a ZWJ in Devanagari or Arabic text is kept
            mark(i, i + 1)
        else:
            previous_is_emoji = False


class Collapser:
    """Whitespace runs (and emoji separators) become one space between kept characters; none leads or
    trails. Fed in pieces, it gives what one pass over the whole span gives: a run's space is written only
    when the next kept character arrives (it may be the "," that drops it), so a trailing run stays
    pending until then, and is dropped by whoever ends the text."""

    def __init__(self) -> None:
        self._out: list[str] = []
        self._offsets: list[int] = []
        self.has_output = False  # something was written since construction: a later run becomes a space
        self._space_at: int | None = None  # offset of the first whitespace of the current run
        self._run_has_emoji = False

    def feed(self, text: str, lo: int, hi: int, drop: bytearray) -> None:
        """Feeds `text[lo:hi]`; `drop[i - lo]` is character i's drop reason (drop_reasons)."""
        for i in range(lo, hi):
            why = drop[i - lo]
            if why == _MARKUP:
                continue
            ch = text[i]
            if why == _SEPARATOR or ch.isspace():
                if self._space_at is None:
                    self._space_at = i
                self._run_has_emoji = self._run_has_emoji or why == _SEPARATOR
                continue
            # "Sure 😊, I can" -> "Sure, I can": the space was the emoji's, not the writer's.
            if self._space_at is not None and self.has_output and not (
                    self._run_has_emoji and ch in _CLOSING_PUNCTUATION):
                self._out.append(" ")
                self._offsets.append(self._space_at)
            self._space_at = None
            self._run_has_emoji = False
            self._out.append(ch)
            self._offsets.append(i)
            self.has_output = True

    def take(self) -> tuple[str, list[int]]:
        """What was written since the last take, and its offsets."""
        out, offsets = "".join(self._out), self._offsets
        self._out, self._offsets = [], []
        return out, offsets
