"""SpeakableStream: incremental `speakable`, equal to the offline result however the text is split.

Texts: real utterances (tests/text/data/workload_texts.jsonl), agent replies with markdown, emoji, numbers
and abbreviations, and random texts built from the pieces that trip cleaners. Splits: LLM-like tokens (each
word with the whitespace before it, as `voxrt loadgen` sends them), one character at a time, and seeded
random fragments (empty ones included).
"""

from __future__ import annotations

import random

import pytest

from text_cases import PIECES, REPLIES, WORKLOAD, llm_tokens, random_split  # tests/support
from voxrt.text import SpeakableStream, speakable
from voxrt.text.speakable import speakable_span


def stream_all(fragments: list[str]) -> tuple[str, list[int]]:
    stream = SpeakableStream()
    text, offsets = "", []
    for fragment in fragments:
        speech = stream.push(fragment)
        text += speech.text
        offsets += speech.offsets
    speech = stream.end()
    return text + speech.text, offsets + list(speech.offsets)


def splits(text: str, rng: random.Random, num_random: int) -> list[list[str]]:
    return [[text], llm_tokens(text), list(text)] + [random_split(text, rng) for _ in range(num_random)]


@pytest.mark.parametrize("texts", [WORKLOAD, REPLIES], ids=["workload", "replies"])
def test_streamed_text_is_cleaned_exactly_as_the_whole_text(texts):
    rng = random.Random(21)
    for text in texts:
        expected = speakable(text)
        for fragments in splits(text, rng, num_random=5):
            assert stream_all(fragments) == expected, (text, fragments)


def test_random_texts_of_tricky_pieces_are_cleaned_exactly_as_the_whole_text():
    rng = random.Random(7)
    for _ in range(1500):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
        expected = speakable(text)
        assert stream_all(list(text)) == expected, text
        assert stream_all(random_split(text, rng, max_len=4)) == expected, text


def test_offsets_point_back_at_the_original_text():
    for text in REPLIES + WORKLOAD[:20]:
        out, offsets = stream_all(llm_tokens(text))
        for ch, at in zip(out, offsets):
            assert text[at] == ch or (ch == " " and not text[at].isalnum()), (text, ch, at)


def test_plain_tokens_are_released_at_once_but_for_the_trailing_space():
    # What makes word forwarding fast: after each LLM token, everything it completed is out (the space after
    # the last word waits for the next kept character; a final "!" waits: it may open an image "![").
    for text in WORKLOAD:
        stream = SpeakableStream()
        released = ""
        for token in llm_tokens(text):
            released += stream.push(token).text
            if not stream.text.endswith("!"):
                assert released == speakable(stream.text)[0], (text, stream.text)


@pytest.mark.parametrize(("fragments", "released"), [
    (["Hello ", "world"], ["Hello", " world"]),  # the space travels with the next word
    (["Hello", " ", "😊", ",", " there"], ["Hello", "", "", ",", " there"]),  # the "," drops the emoji's space
    (["1", ". Buy", " milk"], ["", "Buy", " milk"]),  # "1" may be a list marker: decided by ". "
    (["-", "-", "-", "\n", "Next"], ["", "", "", "", "Next"]),  # a thematic break, decided by its newline
    (["see [the", " portal](", "https://x.io", ") now"], ["see", "", "", " the portal now"]),
    (["a **bold", "**", ", b"], ["a bold", "", ", b"]),  # "**" at the end waits for its right neighbour
    (["Wow!", " Nice"], ["Wow", "! Nice"]),
])
def test_what_is_held_back_until_it_is_decided(fragments, released):
    stream = SpeakableStream()
    assert [stream.push(fragment).text for fragment in fragments] == released


def test_a_lone_bracket_holds_at_most_a_link_label_long():
    stream = SpeakableStream()
    assert stream.push("Note [this").text == "Note"
    assert stream.push(" is" * 30).text == ""  # 94 characters of label: it may still be a link
    assert stream.push(" is" * 3).text == " [this" + " is" * 33  # 103: no link label is that long


def test_flush_cleans_as_if_the_text_ended_and_ends_the_last_word_with_a_space():
    stream = SpeakableStream()
    assert stream.push("Hel").text == "Hel"
    flushed = stream.flush()
    assert (flushed.text, flushed.offsets) == (" ", (3,))  # the engine tokenizes "Hel" now
    assert stream.flush().text == ""  # nothing new: no second space
    assert stream.push("lo there").text == "lo there"  # a new span: "lo" is a word of its own
    assert stream.end().text == ""


def test_flushes_give_the_pieces_cleaned_one_by_one_however_each_is_split():
    rng = random.Random(3)
    for _ in range(800):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 25)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(1, 3))))
        bounds = [0, *cuts, len(text)]
        expected, expected_offsets = "", []
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            out, offsets = speakable_span(text, a, b)
            expected += out
            expected_offsets += offsets
            if out and i < len(bounds) - 2:  # a flush after the piece: one space at the flush point
                expected += " "
                expected_offsets.append(b)
        for _ in range(2):
            stream = SpeakableStream()
            got, got_offsets = "", []
            for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
                for fragment in random_split(text[a:b], rng, max_len=4):
                    speech = stream.push(fragment)
                    got, got_offsets = got + speech.text, got_offsets + list(speech.offsets)
                speech = stream.flush() if i < len(bounds) - 2 else stream.end()
                got, got_offsets = got + speech.text, got_offsets + list(speech.offsets)
            assert (got, got_offsets) == (expected, expected_offsets), (text, cuts)


def test_text_after_the_end_is_an_error():
    stream = SpeakableStream()
    stream.push("Done.")
    stream.end()
    with pytest.raises(ValueError, match="after the stream ended"):
        stream.push(" More")
