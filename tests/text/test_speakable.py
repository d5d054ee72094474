"""speakable: markdown and emoji are not spoken; every kept character maps back to its input offset."""

from __future__ import annotations

import pytest

from voxrt.text import speakable
from voxrt.text.speakable import is_emoji, speakable_span


def clean(text: str) -> str:
    return speakable(text)[0]


def assert_offsets_point_back(text: str) -> None:
    out, offsets = speakable(text)
    assert len(offsets) == len(out)
    assert offsets == sorted(set(offsets))  # strictly increasing
    for ch, at in zip(out, offsets):
        if ch == " ":  # a collapsed run of whitespace or removed emoji
            assert text[at].isspace() or is_emoji(text[at])
        else:
            assert text[at] == ch


@pytest.mark.parametrize("text, expected", [
    ("**bold** move", "bold move"),
    ("__bold__ move", "bold move"),
    ("an *italic* word", "an italic word"),
    ("an _italic_ word", "an italic word"),
    ("***both*** and **_mixed_**", "both and mixed"),
    ("~~old~~ new", "old new"),
    ("run `pip install voxrt` now", "run pip install voxrt now"),
    ("```python\nprint(1)\n```", "print(1)"),
    ("# Heading", "Heading"),
    ("Intro\n### Sub heading\ntext", "Intro Sub heading text"),
    ("- one\n- two", "one two"),
    ("* one\n+ two", "one two"),
    ("1. one\n2) two\n10. ten", "one two ten"),
    ("  - nested item", "nested item"),
    ("> quoted\n> > twice", "quoted twice"),
    ("above\n---\nbelow", "above below"),
    ("see [the docs](https://example.com/a_b) now", "see the docs now"),
    ('a [link](http://x.y "Title") b', "a link b"),
    ("![a cat](cat.png) here", "a cat here"),
])
def test_markdown_is_removed(text, expected):
    assert clean(text) == expected
    assert_offsets_point_back(text)


@pytest.mark.parametrize("text", [
    "visit https://example.com/path?q=1 today",  # bare URLs are kept (a TTS front end may read them)
    "call my_function in snake_case",  # underscores inside words are text
    "2 * 3 = 6 and 2*3 too",  # a lone star between spaces or digits is text
    "-5 degrees and #1 fan",  # no space after the marker: not a list or heading
    "25°C, 50% off, © 2024, A → B, x ≤ y, ™",  # symbols that are words stay
    "a - b",  # a hyphen mid-line is not a list marker
])
def test_text_that_looks_like_markup_is_kept(text):
    assert clean(text) == text


@pytest.mark.parametrize("text, expected", [
    ("Great job 🎉", "Great job"),
    ("🚀 Launch", "Launch"),
    ("Love it ❤️!", "Love it!"),  # VS16 goes with its heart; no space left before the "!"
    ("Sure 😊, I can", "Sure, I can"),
    ("a , b", "a , b"),  # a writer's own space before punctuation is kept
    ("dev 👩🏽‍💻 team", "dev team"),  # skin tone + ZWJ sequence
    ("family 👨‍👩‍👧‍👦 time", "family time"),
    ("go 🇺🇸 team", "go team"),  # regional indicator flag
    ("go 🏴󠁧󠁢󠁳󠁣󠁴󠁿 team", "go team"),  # tag sequence flag (Scotland)
    ("press 1️⃣ now", "press 1 now"),  # keycap: the digit is spoken
    ("ok ✅ done ✨ ⭐ ☀", "ok done"),
    ("Great🎉thanks", "Great thanks"),  # an emoji between words separates them
    ("🎉🎉🎉", ""),
])
def test_emoji_are_removed(text, expected):
    assert clean(text) == expected
    assert_offsets_point_back(text)


def test_zwj_outside_emoji_is_kept():
    text = "क्‍ष"  # Devanagari with a ZWJ (half form): part of the word
    assert clean(text) == text


def test_whitespace_is_collapsed_and_stripped_with_offsets():
    text = "  Hello \n\t  world  "
    out, offsets = speakable(text)
    assert out == "Hello world"
    assert offsets == [2, 3, 4, 5, 6, 7, 12, 13, 14, 15, 16]  # the space maps to the first of its run


def test_offsets_point_into_the_original_with_markup():
    text = "**Hi** [you](u)"
    out, offsets = speakable(text)
    assert out == "Hi you"
    assert offsets == [2, 3, 6, 8, 9, 10]


def test_link_label_and_title_are_bounded():
    # 100 characters at most, so that the incremental stream never holds a lone "[" to the end of a line
    label = "w" * 100
    assert clean(f"[{label}](u) end") == f"{label} end"
    assert clean(f"[{label}x](u) end") == f"[{label}x](u) end"
    assert clean(f'[a](u "{"t" * 101}") end').startswith("[a](u")


def test_empty_input():
    assert speakable("") == ("", [])
    assert speakable(" \n ") == ("", [])


def test_span_sees_real_line_starts_only():
    text = "Sure, - no wait\n- item"
    # "- no" is mid-line, so its hyphen is text; "- item" starts a line.
    assert speakable_span(text, 5, 15)[0] == "- no wait"
    out, offsets = speakable_span(text, 15, len(text))
    assert out == "item"
    assert offsets == [18, 19, 20, 21]


def test_span_sees_its_neighbours():
    text = "**bold words** end"
    # A span that starts inside the bold run: the closing marker is still markup.
    assert speakable_span(text, 7, 14)[0] == "words"
    assert speakable_span(text, 0, 7)[0] == "bold"


def test_span_bounds_are_checked():
    with pytest.raises(ValueError, match="outside"):
        speakable_span("abc", 2, 5)


def test_unpaired_markers_are_dropped():
    # A segment cut may split a bold run; each half must still be clean.
    assert clean("**very long") == "very long"
    assert clean("bold text**") == "bold text"
