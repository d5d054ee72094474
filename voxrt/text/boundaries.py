"""Where pending text may be cut into a segment, decided only when no later fragment can change it.

`next_cut(text, start, rules, is_final)` returns the end of the next segment of `text[start:]`, or None.
Every candidate (a terminator, a clause mark, a newline) gets one of three verdicts: CUT, NO, or WAIT when
the characters that decide it have not arrived yet. The scan stops at the first CUT or WAIT, so a cut made
from a prefix of the text is the cut the whole text would give: results do not depend on how the text was
split into fragments. With `is_final` (a flush) nothing waits: the end of the text decides.

Sentence boundaries: a run of `.` `!` `?` `…` (or CJK `。！？`), optional closers (quotes, brackets, closing
markup, emoji), then whitespace; CJK terminators need no whitespace. A terminator at the end of the text
waits: the next fragment may be the "50" of "3.50" or the rest of an abbreviation. A period is no boundary
after an abbreviation (ABBREVIATIONS; dotted acronyms such as U.S. and e.g.), after a single capital
initial (J. K. Rowling; not "I"), or after a list number at a line start ("1. "). Decimals, times and
versions (3.50, .5, 10:30, v1.2.3) never have whitespace after their inner dots, so they need no rule.

Choices (a wrong cut breaks prosody mid-sentence; a missed cut only makes a segment longer, so doubtful
periods are not cut):
- "etc.", "Inc.", "a.m.", "U.S." at a real sentence end are not boundaries ("...at 9 a.m. Monday" is at
  least as common as "...at 9 a.m. Then"); the next boundary or max_chars ends the segment.
- "No." is an abbreviation only before a number ("No. 5", "No. #5"), so it waits for the next word;
  otherwise ("No. I can't") it is a boundary.
- An ellipsis is always a boundary, also before a lowercase word ("Well... maybe"): the pause is
  there anyway, and a trailing-off segment costs nothing.
- "!" and "?" are always boundaries (also "Yahoo! Inc.").

Line breaks: a blank line is a boundary, and so is a single newline next to a heading, list item, quote or
code fence line (so list items are not run together into one breathless segment). Other single newlines
are whitespace.

Clause boundaries (`,` `;` `:` before whitespace, an em dash, a spaced en dash) cut only the early first
segment (`min_clause_chars`) and over-long segments (`max_chars`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from voxrt.text.speakable import is_emoji, speakable_span

# Lowercased, without the final period; dotted acronyms (u.s, e.g, a.m) are caught by _ACRONYM as well.
# Matched case-insensitively, so words that also end sentences as words or state codes (ca, rep, gen, est)
# are left out on purpose: "I live in CA. It's sunny." should cut.
ABBREVIATIONS = frozenset("""
    mr mrs ms mx dr prof sr jr st mt ft rev hon col capt lt sgt gov
    vs etc al cf approx dept fig vol
    inc ltd co corp llc bros
    jan feb mar apr jun jul aug sep sept oct nov dec
    ave blvd rd
    e.g i.e a.m p.m u.s u.k u.s.a ph.d
""".split())

_TERMINATORS = ".!?…。！？"
_CJK_TERMINATORS = "。！？"  # CJK text has no spaces between sentences
_CLOSERS = "\"')]}»”’」』）*_`~"  # may follow a terminator: quotes, brackets, closing markup
_CANDIDATE = re.compile(f"[{re.escape(_TERMINATORS)}]+|[,;:—–\n]")
_ACRONYM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # U.S, e.g, a.m (the final period is not in the word)
_MAX_WORD_LOOKBACK_CHARS = 32  # longer than any abbreviation; bounds the scan back from a period

# A line that is a block of its own: heading, list item, quote, code fence. _BLOCK_PREFIX is what such a
# line can start with before the deciding character has arrived ("1" may become "1. ").
_BLOCK_START = re.compile(r"[ \t]*(?:#{1,6}[ \t]|[-*+][ \t]|\d{1,9}[.)][ \t]|>|```|~~~)")
_BLOCK_PREFIX = re.compile(r"[ \t]*(?:#{1,6}|[-*+]|\d{1,9}[.)]?|`{1,2}|~{1,2})?")


class Verdict(enum.Enum):
    CUT = "cut"
    NO = "no"
    WAIT = "wait"  # the deciding characters have not arrived yet


class Kind(enum.Enum):
    SENTENCE = "sentence"  # also paragraph and block-line breaks
    CLAUSE = "clause"


@dataclass(frozen=True)
class CutRules:
    """What may end the next segment. `min_clause_chars`: clause marks end it once its speakable text is
    that long (the early first segment); None: they do not. `max_chars`: once the pending text, from its
    first non-space character, is longer than this, it is cut at the last clause mark that fits (only when
    `min_clause_chars` is None), else at the last word boundary that fits, else hard."""
    max_chars: int
    min_clause_chars: int | None = None

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {self.max_chars}")
        if self.min_clause_chars is not None and self.min_clause_chars < 0:
            raise ValueError(f"min_clause_chars must be >= 0 or None, got {self.min_clause_chars}")


def next_cut(text: str, start: int, rules: CutRules, is_final: bool) -> int | None:
    """End (exclusive) of the next segment of `text[start:]`; None when there is none yet (or, with
    `is_final`, none before the end of the text). A cut always leaves non-space text before it."""
    content_start = skip_space(text, start)
    if content_start == len(text):
        return None
    limit = content_start + rules.max_chars
    clause_cuts: list[int] = []  # clause boundaries within the limit, for an over-long segment
    for m in _CANDIDATE.finditer(text, content_start):
        if m.start() >= limit:
            break
        kind, verdict, cut = _classify(text, m.start(), m.end(), is_final)
        if verdict is Verdict.WAIT:
            return None
        if verdict is Verdict.NO or cut <= content_start:
            continue
        if kind is Kind.SENTENCE:
            return cut
        if rules.min_clause_chars is not None:
            if spoken_len(text, start, cut) >= rules.min_clause_chars:
                return cut
        elif cut <= limit:
            clause_cuts.append(cut)
    if len(text) <= limit:
        return None
    if clause_cuts:
        return clause_cuts[-1]
    word_end = _last_space(text, content_start + 1, limit)
    return word_end if word_end is not None else limit


def spoken_len(text: str, start: int, end: int) -> int:
    """Characters of speakable text in `text[start:end]`; 0 when none is a letter or digit."""
    spoken, _ = speakable_span(text, start, end)
    return len(spoken) if any(ch.isalnum() for ch in spoken) else 0


def skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _last_space(text: str, lo: int, hi: int) -> int | None:
    """Largest i in [lo, hi] with text[i] whitespace, the first of its run (the end of the word before)."""
    for i in range(min(hi, len(text) - 1), lo - 1, -1):
        if text[i].isspace():
            while i > lo and text[i - 1].isspace():
                i -= 1
            return i
    return None


def _skip_closers(text: str, i: int) -> int:
    while i < len(text) and (text[i] in _CLOSERS or is_emoji(text[i])):
        i += 1
    return i


def _classify(text: str, i: int, j: int, is_final: bool) -> tuple[Kind, Verdict, int]:
    """Verdict on the candidate text[i:j] and the cut position it would give."""
    ch = text[i]
    if ch == "\n":
        return Kind.SENTENCE, _newline(text, i, is_final), i
    if ch == "—":  # em dash, spaced or not; in a run "——" only the last one cuts
        if j == len(text):
            return Kind.CLAUSE, _at_end(is_final), j
        return Kind.CLAUSE, Verdict.NO if text[j] == "—" else Verdict.CUT, j
    if ch == "–":  # en dash: a clause mark only when spaced ("then – later"), a range otherwise (5–10)
        if i == 0 or not text[i - 1].isspace():
            return Kind.CLAUSE, Verdict.NO, j
        if j == len(text):
            return Kind.CLAUSE, _at_end(is_final), j
        return Kind.CLAUSE, Verdict.CUT if text[j].isspace() else Verdict.NO, j
    k = _skip_closers(text, j)
    if k == len(text):  # "3." may become "3.50"; "Dr" + "." + "" may still be followed by " Smith"
        return (Kind.CLAUSE if ch in ",;:" else Kind.SENTENCE), _at_end(is_final), k
    if ch in ",;:":  # not "1,000" or "10:30"
        return Kind.CLAUSE, Verdict.CUT if text[k].isspace() else Verdict.NO, k
    if not text[k].isspace() and text[j - 1] not in _CJK_TERMINATORS:
        return Kind.SENTENCE, Verdict.NO, k  # 3.50, v1.2.3, example.com, e.g
    if text[i:j] == ".":
        return Kind.SENTENCE, _period(text, i, k, is_final), k
    return Kind.SENTENCE, Verdict.CUT, k  # ! ? ?! ... … and CJK terminators


def _at_end(is_final: bool) -> Verdict:
    return Verdict.CUT if is_final else Verdict.WAIT


def _period(text: str, i: int, k: int, is_final: bool) -> Verdict:
    """A single period at text[i] followed (after closers, at k) by whitespace."""
    w = i
    while w > max(0, i - _MAX_WORD_LOOKBACK_CHARS) and (text[w - 1].isalnum() or text[w - 1] == "."):
        w -= 1
    word = text[w:i]
    lowered = word.lower()
    if lowered == "no":  # "No. 5" versus "No. I can't": the next word decides
        n = skip_space(text, k)
        if n == len(text):
            return _at_end(is_final)
        return Verdict.NO if text[n].isdigit() or text[n] == "#" else Verdict.CUT
    if lowered in ABBREVIATIONS or _ACRONYM.fullmatch(word):
        return Verdict.NO
    if len(word) == 1 and word.isupper() and word != "I":  # initials: "J. K. Rowling"
        return Verdict.NO
    if word.isdigit() and _at_line_start(text, w):  # "1. " list marker
        return Verdict.NO
    return Verdict.CUT


def _at_line_start(text: str, i: int) -> bool:
    while i > 0 and text[i - 1] in " \t>":
        i -= 1
    return i == 0 or text[i - 1] == "\n"


def _newline(text: str, i: int, is_final: bool) -> Verdict:
    """A newline at text[i]: a paragraph break (blank line) or the edge of a block line cuts."""
    n = i + 1
    while n < len(text) and text[n] != "\n" and text[n].isspace():
        n += 1
    if n == len(text):  # a blank line may still come
        return _at_end(is_final)
    if text[n] == "\n":
        return Verdict.CUT
    line_start = text.rfind("\n", 0, i) + 1
    if _BLOCK_START.match(text, line_start, i) or _BLOCK_START.match(text, i + 1):
        return Verdict.CUT
    if not is_final and _BLOCK_PREFIX.fullmatch(text, i + 1):
        return Verdict.WAIT
    return Verdict.NO
