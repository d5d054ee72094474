"""Segmenter rules: sentence and clause boundaries, what is not a boundary, markup, modes, flush."""

from __future__ import annotations

import pytest

from voxrt.text import MODES, Segment, Segmenter


def run(fragments, mode="auto", **kwargs) -> list[Segment]:
    """Pushes each fragment, then flushes; returns every segment."""
    segmenter = Segmenter(mode, **kwargs)
    out = []
    for fragment in fragments:
        out += segmenter.push(fragment)
    return out + segmenter.flush()


def texts(fragments, mode="sentence", **kwargs) -> list[str]:
    if isinstance(fragments, str):
        fragments = [fragments]
    return [s.text for s in run(fragments, mode, **kwargs)]


# ---- the protocol example ----------------------------------------------------------------------------------


def test_protocol_example_fragments():
    segmenter = Segmenter()
    assert segmenter.push("Sure, Dr. Smith's") == [Segment("Sure,", 0, 5, 0)]
    assert segmenter.push(" balance is $3.50.") == []  # the final "." may still be "3.50.5"
    assert segmenter.flush() == [Segment("Dr. Smith's balance is $3.50.", 6, 35, 1)]
    assert segmenter.pending_start == 35


def test_protocol_example_whole_equals_char_by_char():
    text = "Sure, Dr. Smith's balance is $3.50. Thanks!"
    whole = run([text])
    assert whole == run(list(text))
    assert [s.text for s in whole] == ["Sure,", "Dr. Smith's balance is $3.50.", "Thanks!"]
    assert [(s.char_start, s.char_end) for s in whole] == [(0, 5), (6, 35), (36, 43)]
    assert [text[s.char_start:s.char_end] for s in whole] == [s.text for s in whole]


# ---- sentence boundaries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("One. Two! Three? Four… Five", ["One.", "Two!", "Three?", "Four…", "Five"]),
    ("Really?! Yes... Fine.", ["Really?!", "Yes...", "Fine."]),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    ("(See above.) Next one.", ["(See above.)", "Next one."]),
    ("It is “done.” Good!", ["It is “done.”", "Good!"]),
    ("**Bold end.** Next.", ["Bold end.", "Next."]),
    ("Great job!🎉 Next.", ["Great job!", "Next."]),
    ("One.\nTwo.", ["One.", "Two."]),  # a newline is whitespace after a terminator
    ("你好。我是助手！好吗？", ["你好。", "我是助手！", "好吗？"]),  # CJK: no space between sentences
])
def test_sentence_boundaries(text, expected):
    assert texts(text) == expected


def test_terminator_at_the_end_waits_for_whitespace():
    segmenter = Segmenter("sentence")
    assert segmenter.push("It costs $3.") == []
    assert segmenter.push("50") == []  # "3." was the start of "3.50", not a sentence end
    assert segmenter.push(".") == []
    assert [s.text for s in segmenter.push(" Ok")] == ["It costs $3.50."]
    assert [s.text for s in segmenter.flush()] == ["Ok"]


def test_terminator_at_the_end_is_a_boundary_on_flush():
    segmenter = Segmenter("sentence")
    assert segmenter.push("Done.") == []
    assert [s.text for s in segmenter.flush()] == ["Done."]


def test_closers_at_the_end_wait_too():
    segmenter = Segmenter("sentence")
    assert segmenter.push('He said "no."') == []
    assert [s.text for s in segmenter.push(" Then")] == ['He said "no."']


@pytest.mark.parametrize("text", [
    "Dr. Smith is here.", "Mr. and Mrs. Smith came.", "Ms. Lee and Prof. Chen met.", "Bob Sr. and Bob Jr. left.",
    "It is on Main St. near here.", "Cats vs. dogs today.", "Apples, pears, etc. are fruit.",
    "Fruit, e.g. apples, is good.", "That is, i.e. the best.", "Open at 9 a.m. and closed at 5 p.m. on weekdays.",
    "Made in the U.S. by hand.", "Shipped from the U.K. today.", "Acme Inc. and Foo Ltd. and Bar Co. merged.",
    "Due Jan. 5 or Feb. 6 or Dec. 24 at the latest.", "DR. SMITH IS IN.", "Call dr. smith now.",
    "J. K. Rowling wrote it.", "Written by George R. R. Martin himself.", "It costs $3.50 today.",
    "Take .5 of it.", "Meet at 10:30 or 10.30 p.m. tonight.", "Install v1.2.3 or 2.0.1 now.",
    "Go to example.com now.", "It weighs 1,000 kg.", "Room No. 5 is free.", "Ask for No. #7 please.",
])
def test_not_a_boundary(text):
    assert texts(text) == [text]


def test_state_codes_are_not_abbreviations():
    assert texts("I live in CA. It's sunny.") == ["I live in CA.", "It's sunny."]


def test_i_is_not_an_initial():
    assert texts("So did I. Then we left.") == ["So did I.", "Then we left."]


def test_no_is_an_abbreviation_only_before_a_number():
    assert texts("No. I can't do that.") == ["No.", "I can't do that."]
    segmenter = Segmenter("sentence")
    assert segmenter.push("No. ") == []  # the next word decides
    assert segmenter.push("5 is fine. ") == [Segment("No. 5 is fine.", 0, 14, 0)]
    assert texts("The answer is no.") == ["The answer is no."]


def test_documented_choice_abbreviation_at_a_real_sentence_end_is_not_a_boundary():
    # "etc." / "a.m." / "U.S." followed by a capitalized word: kept together (a missed cut costs less than a
    # wrong one; "at 9 a.m. Monday" is as likely as "at 9 a.m. Then").
    assert texts("Bring pens, paper, etc. Then sit down.") == ["Bring pens, paper, etc. Then sit down."]
    assert texts("We open at 9 a.m. Do come.") == ["We open at 9 a.m. Do come."]


def test_documented_choice_ellipsis_before_lowercase_is_a_boundary():
    assert texts("I was thinking… maybe tomorrow.") == ["I was thinking…", "maybe tomorrow."]
    assert texts("Well... maybe.") == ["Well...", "maybe."]


def test_numbered_list_marker_is_not_a_sentence_end():
    assert texts("1. Apples are red.") == ["Apples are red."]
    assert texts("Step 2. Then rest.") == ["Step 2.", "Then rest."]  # mid-line it is a sentence end


# ---- line breaks -------------------------------------------------------------------------------------------


def test_blank_line_is_a_boundary():
    assert texts("First paragraph\n\nSecond paragraph") == ["First paragraph", "Second paragraph"]
    assert texts("First\n  \r\n  Second") == ["First", "Second"]


def test_single_newline_in_prose_is_whitespace():
    assert texts("a soft\nwrapped line") == ["a soft wrapped line"]


def test_list_items_and_headings_are_their_own_segments():
    text = "## Options\nHere they are:\n- Apple\n* Banana\n1. Cherry\nThat's all"
    assert texts(text) == ["Options", "Here they are:", "Apple", "Banana", "Cherry", "That's all"]


def test_newline_waits_for_what_the_next_line_starts_with():
    segmenter = Segmenter("sentence")
    assert segmenter.push("Fruit\n") == []  # a blank line may come
    assert segmenter.push("-") == []  # "- " would be a list item, "-5" is text
    assert [s.text for s in segmenter.push(" Apple\n")] == ["Fruit"]
    assert [s.text for s in segmenter.push("Cold")] == ["Apple"]  # the line after a list item is cut too
    assert segmenter.push("\n-") == []
    assert segmenter.push("5 degrees") == []  # "-5" is text: no cut
    assert [s.text for s in segmenter.flush()] == ["Cold -5 degrees"]


def test_paragraph_break_in_pieces():
    segmenter = Segmenter("sentence")
    assert segmenter.push("Hello\n") == []
    assert [s.text for s in segmenter.push("\nWorld")] == ["Hello"]


# ---- markup, emoji, whitespace -----------------------------------------------------------------------------


def test_markdown_is_not_spoken_but_spans_cover_it():
    text = "**Hello** _there_. Read [the guide](https://x.io/guide). Run `ls`."
    segments = run([text], "sentence")
    assert [s.text for s in segments] == ["Hello there.", "Read the guide.", "Run ls."]
    assert [text[s.char_start:s.char_end] for s in segments] == [
        "**Hello** _there_.", "Read [the guide](https://x.io/guide).", "Run `ls`."]


def test_bold_sentence_span_includes_closing_markup():
    text = "**Watch out.** Ok"
    first = run([text], "sentence")[0]
    assert (first.text, text[first.char_start:first.char_end]) == ("Watch out.", "**Watch out.**")


def test_emoji_only_segment_is_consumed_not_emitted():
    text = "Hi there! 🎉🎉! Next one."
    segments = run([text], "sentence")
    assert [(s.text, s.index) for s in segments] == [("Hi there!", 0), ("Next one.", 1)]
    assert segments[1].char_start == text.index("Next")


def test_punctuation_only_segment_is_not_emitted():
    assert texts("Hmm. ... Okay.") == ["Hmm.", "Okay."]
    assert texts("🙂") == []


def test_whitespace_is_collapsed_and_segments_are_stripped():
    text = "  Hello \t  big\n world.   Bye  "
    segments = run([text], "sentence")
    assert [s.text for s in segments] == ["Hello big world.", "Bye"]
    for s in segments:
        span = text[s.char_start:s.char_end]
        assert span == span.strip() and span


# ---- auto mode: the early first segment, the max_chars cut -------------------------------------------------


@pytest.mark.parametrize("reply, first", [
    ("Sure, I can help with that.", "Sure,"),
    ("Of course! Let me check that for you.", "Of course!"),
    ("Okay, so your order shipped yesterday.", "Okay,"),
    ("Hi there, I'm Ava from Acme Dental.", "Hi there,"),
    ("Your appointment is on Monday at 10:30 a.m., and we'll text you.", "Your appointment is on Monday at 10:30 a.m.,"),
    ("Good news: the refund went through.", "Good news:"),
    ("Right — let me look.", "Right —"),
    ("Well; that depends.", "Well;"),
])
def test_auto_gives_an_early_first_segment(reply, first):
    segments = run([reply])
    assert segments[0].text == first
    assert len(segments) >= 2


def test_auto_first_clause_must_have_first_min_chars():
    # "Yes," (4 characters) is under the default first_min_chars=5: the whole sentence is the first segment.
    assert texts("Yes, your order shipped.", "auto") == ["Yes, your order shipped."]
    assert texts("Yes, your order, the big one, shipped.", "auto") == ["Yes, your order,", "the big one, shipped."]
    assert texts("Yes, your order shipped.", "auto", first_min_chars=4) == ["Yes,", "your order shipped."]


def test_auto_first_min_counts_speakable_characters():
    # "**Hi**," is 7 characters of text but 3 spoken ones.
    assert texts("**Hi**, what can I do?", "auto") == ["Hi, what can I do?"]


def test_auto_only_the_first_segment_is_cut_early():
    assert texts("Sure, one. Then, two, three.", "auto") == ["Sure,", "one.", "Then, two, three."]


def test_sentence_mode_has_no_early_first_segment():
    assert texts("Sure, I can help with that.", "sentence") == ["Sure, I can help with that."]


def test_auto_first_segment_cut_at_a_word_once_longer_than_first_max_chars():
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho"
    segmenter = Segmenter("auto", first_max_chars=20)
    out = []
    for word in words.split():
        out += segmenter.push(word + " ")
    assert out[0].text == "alpha beta gamma" and out[0].char_end == 16  # 16 chars; "delta" would pass 20
    later = out[1:] + segmenter.flush()
    assert " ".join(s.text for s in later) == words[17:]  # later segments use max_chars (400): one segment
    assert len(later) == 1


def test_first_max_does_not_cut_before_the_text_is_longer():
    segmenter = Segmenter("auto", first_max_chars=20)
    assert segmenter.push("alpha beta gamma del") == []  # 20 characters: not longer than first_max_chars


def test_max_chars_cuts_at_the_last_clause_that_fits():
    text = "one two, three four, five six seven eight nine ten."
    assert texts(text, "sentence", max_chars=25) == ["one two, three four,", "five six seven eight nine", "ten."]


def test_max_chars_cuts_at_a_word_then_hard():
    assert texts("aaaa bbbb cccc dddd", "sentence", max_chars=10) == ["aaaa bbbb", "cccc dddd"]
    assert texts("abcdefghijklmnop", "sentence", max_chars=5) == ["abcde", "fghij", "klmno", "p"]


def test_max_chars_in_auto_applies_after_the_first_segment():
    text = "Sure, " + "word " * 30 + "end."
    segments = run([text], "auto", max_chars=50)
    assert segments[0].text == "Sure,"
    assert all(s.char_end - s.char_start <= 50 for s in segments)
    assert " ".join(s.text for s in segments) == " ".join(text.split())


# ---- modes, flush, state ------------------------------------------------------------------------------------


def test_unknown_mode_names_the_allowed_modes():
    with pytest.raises(ValueError) as info:
        Segmenter("words")
    message = str(info.value)
    assert "'words'" in message and all(mode in message for mode in MODES)


@pytest.mark.parametrize("kwargs", [
    {"first_min_chars": -1}, {"first_min_chars": 90, "first_max_chars": 80}, {"max_chars": 0},
])
def test_bad_limits_are_refused(kwargs):
    with pytest.raises(ValueError):
        Segmenter(**kwargs)


def test_none_mode_releases_only_on_flush_as_one_segment():
    segmenter = Segmenter("none")
    assert segmenter.push("Sure, Dr. Smith. ") == []
    assert segmenter.push("**Thanks!**\n\nBye 👋") == []
    assert segmenter.flush() == [Segment("Sure, Dr. Smith. Thanks! Bye", 0, 35, 0)]  # the span ends after the 👋


def test_flush_on_nothing_pending_is_empty():
    segmenter = Segmenter()
    assert segmenter.flush() == []
    segmenter.push("Hi.")
    assert len(segmenter.flush()) == 1
    assert segmenter.flush() == []
    segmenter.push("   ")
    assert segmenter.flush() == []
    assert segmenter.pending_start == len(segmenter.text) == 6


def test_push_after_flush_continues_offsets_and_indices():
    segmenter = Segmenter("sentence")
    segmenter.push("First one")
    assert segmenter.flush() == [Segment("First one", 0, 9, 0)]
    assert segmenter.push(" and more. Then") == [Segment("and more.", 10, 19, 1)]
    assert segmenter.flush() == [Segment("Then", 20, 24, 2)]
    assert segmenter.text == "First one and more. Then"


def test_flush_splits_pending_text_at_its_boundaries():
    segmenter = Segmenter("sentence")
    assert segmenter.push("One. Two.") == [Segment("One.", 0, 4, 0)]
    assert segmenter.flush() == [Segment("Two.", 5, 9, 1)]


def test_text_and_pending_start():
    segmenter = Segmenter("sentence")
    segmenter.push("Hello there. How")
    assert segmenter.text == "Hello there. How"
    assert segmenter.pending_start == 12  # right after "there."; the space starts the pending text
    segmenter.push(" are you")
    assert segmenter.pending_start == 12
    segmenter.flush()
    assert segmenter.pending_start == len(segmenter.text)


def test_empty_push_is_a_no_op():
    segmenter = Segmenter()
    assert segmenter.push("") == []
    assert segmenter.text == "" and segmenter.pending_start == 0


def test_segment_is_frozen():
    segment = Segment("Hi.", 0, 3, 0)
    with pytest.raises(AttributeError):
        segment.text = "Bye."  # type: ignore[misc]
