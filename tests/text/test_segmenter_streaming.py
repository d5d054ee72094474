"""Streaming equals offline: segments must not depend on how the text was split into fragments.

Every text is pushed whole and then in random fragments (seeded), then flushed; the segments must be
identical. The texts are realistic agent replies with the tricky cases, plus random texts built from the
pieces that trip segmenters (abbreviations, decimals, markup, emoji, newlines, list markers).
"""

from __future__ import annotations

import random

import pytest

from voxrt.text import MODES, Segment, Segmenter, speakable

REPLIES = [
    "Sure, Dr. Smith's balance is $3.50. Thanks!",
    "Of course! Your appointment with Prof. J. K. Lee is on Jan. 5 at 10:30 a.m., in room No. 4. See you then.",
    "Hmm… let me check. Version v1.2.3 (released 2.0.1?) fixed it; e.g. the crash at .5 s. Anything else?!",
    'He said "it costs 3.50." Then he left... and came back. "Really?" she asked.',
    "**Great news:** your order shipped 🎉🎉! Track it at [the portal](https://x.io/t?id=5). Questions? Ask me.",
    "Here are your options:\n\n1. The **basic** plan, $10.\n2. The _pro_ plan — $20.\n- Or `custom`.\n\nWhich one?",
    "## Summary\nAll done 👍🏽 — mostly. The U.S. office opens at 9 a.m. Mr. and Mrs. Smith, etc. will attend.",
    "No. I can't do that. No. 5 is taken, though; try No. 7.\n\n\n   Bye 👋",
    "你好。我可以帮你！还有问题吗？ Okay, bye.",
    "A long one, with commas, clauses; and more: " + "word " * 120 + "end.",
    "First — second – third -- fourth. 1,000,000 people; 10:30:15 sharp.",
    "   Leading space and trailing space.   ",
    "🚀🚀🚀",
]

PIECES = [
    " ", " ", " ", "  ", "\n", "\n\n", "\t", "Hello", "world", "the", "a", "I", "J", "Dr", "Mr", "No", "etc",
    "e.g", "U.S", "a.m", ".", ".", ".", "...", "…", "!", "?", "?!", ",", ",", ";", ":", "—", "–", "-", "3", "50",
    "10", "v1", "*", "**", "_", "`", "#", "- ", "1. ", "> ", "[x](y)", "(", ")", '"', "'", "🎉", "👍🏽", "❤️",
    "你好", "。", "😊",
]

CONFIGS = [
    {"mode": "auto"}, {"mode": "sentence"}, {"mode": "none"},
    {"mode": "auto", "first_min_chars": 0, "first_max_chars": 12, "max_chars": 30},
    {"mode": "sentence", "max_chars": 17},
]


def segments_of(fragments: list[str], **config) -> list[Segment]:
    segmenter = Segmenter(**config)
    out = []
    for fragment in fragments:
        out += segmenter.push(fragment)
    out += segmenter.flush()
    assert segmenter.pending_start == len(segmenter.text) == sum(map(len, fragments))
    assert segmenter.flush() == []
    return out


def random_split(text: str, rng: random.Random, max_len: int = 6) -> list[str]:
    fragments, i = [], 0
    while i < len(text):
        n = rng.randint(0, max_len)  # empty fragments too
        fragments.append(text[i:i + n])
        i += n
    return fragments


def assert_well_formed(segments: list[Segment], text: str) -> None:
    previous_end = 0
    for index, segment in enumerate(segments):
        assert segment.index == index
        assert segment.text and segment.text == segment.text.strip() and "  " not in segment.text
        assert previous_end <= segment.char_start < segment.char_end <= len(text)
        span = text[segment.char_start:segment.char_end]
        assert span == span.strip()
        # every spoken word comes from the span (markup and emoji only ever removed)
        for word in segment.text.split():
            assert all(ch in span for ch in word)
        previous_end = segment.char_end


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("reply_index", range(len(REPLIES)))
def test_replies_split_anyhow_give_the_same_segments(reply_index, config):
    text = REPLIES[reply_index]
    whole = segments_of([text], **config)
    assert_well_formed(whole, text)
    assert segments_of(list(text), **config) == whole
    rng = random.Random(1000 + reply_index)
    for _ in range(20):
        assert segments_of(random_split(text, rng), **config) == whole


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_random_texts_split_anyhow_give_the_same_segments(config):
    rng = random.Random(7)
    for _ in range(150):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40)))
        whole = segments_of([text], **config)
        assert_well_formed(whole, text)
        assert segments_of(list(text), **config) == whole, text
        assert segments_of(random_split(text, rng, max_len=4), **config) == whole, text


def test_reply_sentences_are_kept_together():
    # The tricky periods of REPLIES[1] do not cut: exactly the sentence ends and the early clause do.
    assert [s.text for s in segments_of([REPLIES[1]])] == [
        "Of course!",
        "Your appointment with Prof. J. K. Lee is on Jan. 5 at 10:30 a.m., in room No. 4.",
        "See you then.",
    ]


def test_segments_speak_all_the_speakable_text():
    # Concatenated, the segments say what speakable says of the whole text (cuts lose and add nothing;
    # spaces aside: CJK sentences have none between them).
    for text in REPLIES:
        for mode in MODES:
            spoken = "".join(s.text for s in segments_of([text], mode=mode))
            assert spoken.replace(" ", "") == speakable(text)[0].replace(" ", ""), (mode, text)
