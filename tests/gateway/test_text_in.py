"""The gateway's text path, pure: what reaches the engine, and alignment, under arbitrary token splits.

A simulated dual-track engine stands in for the model: the engine's own split-independent text feed
(voxrt/engine/sched/text_feed.py) with a tokenizer like `tiny`'s, one text token per 80 ms frame, chunks of
2, 4, 8, 16, 25 frames, and each chunk's text span computed as the engine core computes it. Texts: real
utterances (tests/text/data) and agent replies with markdown, emoji, numbers and abbreviations.
"""

from __future__ import annotations

import random
import re

import pytest

from text_cases import REPLIES, WORKLOAD, llm_tokens, random_split  # tests/support
from voxrt.engine.sched.text_feed import TextFeed
from voxrt.gateway.text_in import SegmentTextIn, WordTextIn, make_text_in
from voxrt.text import Segmenter, speakable


FRAME_MS = 80.0
CHUNK_FRAMES = (2, 4, 8, 16, 25)


def tokenize(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """As models/tiny: each word with its leading whitespace, cut into pieces of up to 3 characters."""
    ids, spans = [], []
    for m in re.finditer(r"\s*\S+", text):
        for i in range(0, len(m.group()), 3):
            ids.append(m.group()[i:i + 3])
            spans.append((m.start() + i, m.start() + min(i + 3, len(m.group()))))
    return ids, spans


class SimEngine:
    """Frames and chunks of one request. `step()` makes a frame per pending token and cuts the chunks that
    are due (a starved request decodes what it holds, as the scheduler does); `finish()` ends the audio."""

    def __init__(self, text_in) -> None:
        self.text_in = text_in
        self.feed = TextFeed(tokenize)
        self.frame_text_index: list[int] = []  # tokens consumed when each frame was made
        self.num_frames_chunked = 0
        self.num_chunks = 0
        self.messages: list[tuple[list[dict], list[dict]]] = []

    def append(self, text: str, final: bool = False) -> None:
        self.feed.append(text, final)

    def step(self) -> None:
        while len(self.frame_text_index) < len(self.feed.token_ids):
            self.frame_text_index.append(len(self.frame_text_index) + 1)
        while (available := len(self.frame_text_index) - self.num_frames_chunked) > 0:
            need = CHUNK_FRAMES[min(self.num_chunks, len(CHUNK_FRAMES) - 1)]
            self._chunk(min(need, available))

    def finish(self, num_pad_frames: int = 3) -> None:
        self.step()
        self.frame_text_index += [self.frame_text_index[-1] if self.frame_text_index else 0] * num_pad_frames
        total_ms = len(self.frame_text_index) * FRAME_MS
        self._send(self.text_in.alignment.finish(total_ms))

    def _chunk(self, num_frames: int) -> None:
        first, last = self.num_frames_chunked, self.num_frames_chunked + num_frames
        begin = self.frame_text_index[first - 1] if first else 0
        end = self.frame_text_index[last - 1]
        spans = self.feed.token_spans
        span = (spans[begin][0], spans[end - 1][1]) if end > begin else None  # as runtime/core.py's _text_span
        self.num_frames_chunked, self.num_chunks = last, self.num_chunks + 1
        self._send(self.text_in.alignment.on_chunk(span, first * FRAME_MS, last * FRAME_MS))

    def _send(self, ready) -> None:
        if ready:
            self.messages.append(self.text_in.alignment.message_fields(ready, self.text_in.text))


def run_context(fragments: list[str], interleave: bool, flush_after: frozenset[int] = frozenset()):
    """Streams `fragments` through a WordTextIn into the simulated engine, flushing after the fragments
    whose index is in `flush_after`; `interleave`: the engine runs after every fragment (its chunks then
    depend on how the text arrived), else only once it is all in."""
    text_in = WordTextIn()
    engine = SimEngine(text_in)
    for i, fragment in enumerate(fragments):
        engine.append(text_in.push(fragment))
        if i in flush_after:
            engine.append(text_in.flush())
        if interleave:
            engine.step()
    engine.append(text_in.end(), final=True)
    engine.finish()
    assert text_in.num_engine_chars == len(engine.feed.text)
    return text_in, engine


def words_and_segments(engine: SimEngine, with_times: bool) -> tuple[list, list]:
    keys = ("start_ms", "end_ms") if with_times else ()
    words = [(w["word"], w["char_start"], w["char_end"], *(w[k] for k in keys)) for _, ws in engine.messages for w in ws]
    segments = [(s["text"], s["char_start"], s["char_end"], *(s[k] for k in keys)) for ss, _ in engine.messages for s in ss]
    return words, segments


def expected_words(text: str) -> list[tuple[str, int, int]]:
    """The words of the whole text's speakable form, pointed back at the original."""
    out, offsets = speakable(text)
    return [(text[offsets[m.start()]:offsets[m.end() - 1] + 1], offsets[m.start()], offsets[m.end() - 1] + 1)
            for m in re.finditer(r"\S+", out) if any(ch.isalnum() for ch in m.group())]


def expected_segments(text: str) -> list[tuple[str, int, int]]:
    segmenter = Segmenter("auto")
    return [(s.text, s.char_start, s.char_end) for s in segmenter.push(text) + segmenter.flush()]


def test_the_mode_and_the_program_pick_the_text_path():
    assert isinstance(make_text_in(Segmenter("auto"), consumes_text_incrementally=True), WordTextIn)
    assert isinstance(make_text_in(Segmenter("auto"), consumes_text_incrementally=False), SegmentTextIn)
    for mode in ("sentence", "none"):  # explicit modes segment on any program
        segmenter = Segmenter(mode)
        text_in = make_text_in(segmenter, consumes_text_incrementally=True)
        assert isinstance(text_in, SegmentTextIn) and text_in.segmenter is segmenter
    with pytest.raises(ValueError, match="fresh 'auto' segmenter, got mode 'sentence'"):
        WordTextIn(Segmenter("sentence"))


@pytest.mark.parametrize("texts", [WORKLOAD, REPLIES], ids=["workload", "replies"])
def test_engine_text_and_alignment_do_not_depend_on_the_split(texts):
    rng = random.Random(5)
    for text in texts:
        _, reference = run_context([text], interleave=False)
        assert reference.feed.text == speakable(text)[0]
        words, segments = words_and_segments(reference, with_times=True)
        assert all(message_words for _, message_words in reference.messages)  # clients may read words only
        assert [w[:3] for w in words] == expected_words(text)
        assert [s[:3] for s in segments] == expected_segments(text)
        for fragments in (llm_tokens(text), list(text), random_split(text, rng)):
            _, engine = run_context(fragments, interleave=False)
            assert engine.feed.token_ids == reference.feed.token_ids
            assert words_and_segments(engine, with_times=True) == (words, segments), (text, fragments)
            # the engine running while text arrives cuts other chunks: times move, text and offsets do not
            _, live = run_context(fragments, interleave=True)
            assert [x[:3] for x in words_and_segments(live, with_times=True)[0]] == [w[:3] for w in words]
            assert [x[:3] for x in words_and_segments(live, with_times=True)[1]] == [s[:3] for s in segments]


def test_words_point_back_at_the_original_text_and_keep_time_order():
    rng = random.Random(9)
    for text in REPLIES + WORKLOAD[:40]:
        _, engine = run_context(random_split(text, rng), interleave=True)
        assert all(message_words for _, message_words in engine.messages)
        words, segments = words_and_segments(engine, with_times=True)
        for word, start, end, *_ in words:
            assert text[start:end] == word and word.strip() == word
        for items in (words, segments):
            for a, b in zip(items, items[1:]):
                assert a[3] <= a[4] <= b[3] + 1, (text, a, b)  # +1: ms rounding
        total_ms = len(engine.frame_text_index) * FRAME_MS
        assert all(0 <= w[3] <= w[4] <= total_ms for w in words)


def test_spoken_text_is_the_same_whole_word_prefix_however_the_text_was_split():
    rng = random.Random(13)
    for text in REPLIES + WORKLOAD[:20]:
        heard_by_split = []
        for fragments in ([text], llm_tokens(text), random_split(text, rng)):
            text_in, engine = run_context(fragments, interleave=False)
            total_ms = len(engine.frame_text_index) * FRAME_MS
            heard = [text_in.alignment.spoken_text(text, played_ms) for played_ms in range(0, int(total_ms) + 200, 40)]
            word_ends = {end for _, _, end in expected_words(text)}
            for a, b in zip(heard, heard[1:]):
                assert text.startswith(a) and b.startswith(a)  # prefixes, growing with time
            assert all(len(h) in word_ends or h == "" for h in heard)
            assert heard[-1] == text[:max(word_ends, default=0)]  # all of it by the end
            heard_by_split.append(heard)
        assert all(h == heard_by_split[0] for h in heard_by_split), text


def test_flushes_give_the_same_engine_text_and_words_however_the_text_was_split():
    rng = random.Random(17)
    for text in REPLIES + WORKLOAD[:20]:
        cuts = sorted(rng.sample(range(1, len(text)), min(3, len(text) - 1)))  # flush points, in characters
        bounds = [0, *cuts, len(text)]
        results = []
        for split in (llm_tokens, list, lambda piece: random_split(piece, rng)):
            fragments, flush_after = [], set()
            for a, b in zip(bounds, bounds[1:]):
                fragments += split(text[a:b])
                flush_after.add(len(fragments) - 1)
            flush_after.discard(len(fragments) - 1)  # the end, not a flush
            _, engine = run_context(fragments, interleave=False, flush_after=frozenset(flush_after))
            results.append((engine.feed.text, words_and_segments(engine, with_times=True)))
        assert all(r == results[0] for r in results), (text, cuts)
        engine_text, (words, _) = results[0]
        assert engine_text.count(" ") >= speakable(text)[0].count(" ")  # a flush may split a word, never join
        for word, start, end, *_ in words:
            assert text[start:end] == word


def test_the_first_word_reaches_the_engine_with_the_next_token():
    """The measurable effect: with word forwarding the engine's text feed has the first word's tokens as
    soon as the token after it arrives; the segmenter held the first 80 characters (or a clause) back."""
    text = "Once upon a time there lived a king who ruled a quiet land far away beyond the blue mountains and seas."
    tokens = llm_tokens(text)
    for text_in, first_token_at in ((make_text_in(Segmenter("auto"), True), 1),
                                    (make_text_in(Segmenter("auto"), False), None)):
        feed = TextFeed(tokenize)
        arrived_at = None
        for i, token in enumerate(tokens):
            feed.append(text_in.push(token))
            if feed.token_ids and arrived_at is None:
                arrived_at = i
        if first_token_at is None:  # the segment path: nothing until the 80-character cut
            assert arrived_at is not None and sum(map(len, tokens[:arrived_at + 1])) > 80
        else:
            assert arrived_at == first_token_at and feed.text.startswith("Once ")


def test_a_fragment_that_completes_no_word_waits_for_one():
    text_in = WordTextIn()
    assert text_in.push("Hel") == ""  # the engine could not tokenize half a word: no message for it
    assert text_in.push("lo") == ""
    assert text_in.push(" wor") == "Hello wor"  # "Hello" is complete: forwarded with what follows
    assert text_in.push("ld") == ""
    assert text_in.flush() == "ld "  # a flush speaks everything: the last word ends with a space
    assert text_in.push("again") == ""
    assert text_in.end() == "again"
    assert text_in.num_engine_chars == len("Hello world again")
