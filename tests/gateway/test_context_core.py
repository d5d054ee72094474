"""The sans-I/O core of a context's audio path (gateway/context_core.py): no server, no event loop, no clock.
Chunks, text, flushes, cancels and playback reports go in with explicit times; events and decisions come out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from voxrt.engine.errors import EngineError
from voxrt.gateway.context_core import PLAYBACK_TOLERANCE_MS, ContextCore, PacingRule
from voxrt.gateway.text_in import SegmentTextIn, WordTextIn
from voxrt.protocol.clock import PlaybackClock
from voxrt.protocol.config import Pacing
from voxrt.protocol.server_events import Alignment, Flushed
from voxrt.text import Segmenter

RATE = 24000  # model-rate samples a second: 480 samples are 20 ms


def core_for(text_in=None) -> ContextCore:
    return ContextCore("c1", text_in or SegmentTextIn(Segmenter("sentence")), PlaybackClock(), RATE)


def test_chunks_are_placed_in_the_contexts_audio_and_text():
    core = core_for()
    core.push("Hello there. ")
    first = core.on_chunk((0, 5), 480, False, None)
    second = core.on_chunk((5, 13), 960, True, "stop")
    assert (first.start_ms, first.end_ms, first.span, first.is_last) == (0, 20, (0, 5), False)
    assert (second.start_ms, second.end_ms, second.is_last, second.is_capped) == (20, 60, True, False)


def test_alignment_follows_the_chunk_that_voiced_its_text_and_the_last_chunk_ends_the_clock():
    core = core_for()
    assert core.push("Hello there. How are you?") == "Hello there. "
    assert core.end() == "How are you? "
    events = core.on_chunk_sent(core.on_chunk((0, 12), 4800, False, None))
    assert [type(e) for e in events] == [Alignment]
    assert events[0].segments[0]["text"] == "Hello there." and events[0].to_wire()["estimated"] is True
    assert not core.clock.is_finished
    events = core.on_chunk_sent(core.on_chunk((12, 25), 4800, True, "stop"))
    assert events[0].segments[0]["text"] == "How are you?" and events[0].segments[0]["end_ms"] == 400
    assert core.clock.is_finished


def test_flushed_at_once_when_everything_fed_is_voiced_else_when_the_audio_reaches_it():
    core = core_for()
    core.push("One two")
    assert core.flush_text() == "One two "
    assert core.add_flush_point() == []  # its audio is still to come
    assert core.owes_audio_text
    assert Flushed("c1") not in core.on_chunk_sent(core.on_chunk((0, 3), 480, False, None))
    assert Flushed("c1") in core.on_chunk_sent(core.on_chunk((3, 8), 480, False, None))
    assert not core.owes_audio_text
    core.flush_text()
    assert core.add_flush_point() == [Flushed("c1")]  # nothing new: answered at once


def test_a_pending_flush_is_answered_by_the_last_chunk():
    core = core_for()
    core.push("Never voiced in full")
    core.flush_text()
    assert core.add_flush_point() == []
    events = core.on_chunk_sent(core.on_chunk((0, 4), 480, True, "stop"))
    assert events[-1] == Flushed("c1")


def test_long_form_goes_on_from_the_last_word_the_capped_request_consumed():
    core = core_for()
    core.on_request_opened()
    core.push("Alpha beta gamma. ")
    core.end()
    plan = core.on_chunk((0, 8), 480, True, "max_frames")  # consumed "Alpha be": text is left
    assert plan.is_capped and not plan.is_last
    resume_at, text = core.next_request()
    assert (resume_at, text) == (6, "beta gamma. ")  # "beta" may be said twice; nothing is lost
    core.on_request_opened()
    plan = core.on_chunk((0, 11), 480, True, "stop")  # offsets of the new request
    assert plan.span == (6, 17) and plan.is_last


def test_long_form_without_spans_ends_with_length_limit():
    core = core_for()
    core.on_request_opened()
    core.push("Alpha beta. ")
    core.end()
    assert core.on_chunk(None, 480, True, "max_frames").is_capped
    with pytest.raises(EngineError) as exc:
        core.next_request()
    assert exc.value.code == "length_limit"


def test_a_capped_request_with_nothing_left_is_the_end():
    core = core_for()
    core.push("Done. ")
    core.end()
    plan = core.on_chunk((0, 6), 480, True, "max_frames")
    assert plan.is_last and not plan.is_capped


def test_playback_is_forwarded_only_when_it_moves_the_engines_deadlines():
    core = core_for()
    assert core.playback_to_forward(0, 1000, 0, None) is None  # no request yet
    core.clock.on_audio_sent(5000, 1000)
    assert core.playback_to_forward(100, 1100, 7.5, "r1") == (107.5, False)  # held audio counts as played
    assert core.playback_to_forward(200, 1200, 7.5, "r1") is None  # agrees with real time
    lag = PLAYBACK_TOLERANCE_MS * 2
    assert core.playback_to_forward(300 - lag, 1300, 7.5, "r1") == (307.5 - lag, False)
    assert core.playback_to_forward(400 - lag, 1400, 7.5, "r2") is not None  # a new request: always


def test_cancel_reports_what_was_heard():
    core = core_for(WordTextIn())
    core.push("Sure, Dr. Smith's balance is due")
    core.clock.on_audio_sent(2000, 0)
    for event in core.on_chunk_sent(core.on_chunk((0, 26), 24000, False, None)):
        assert isinstance(event, Alignment)
    played, spoken = core.cancelled(700)
    assert played == 700 and spoken and "Sure".startswith(spoken[:4]) and len(spoken) < len(core.text_in.text)


def test_pacing_rule_realtime_and_burst():
    clock = PlaybackClock()
    realtime, burst = PacingRule(Pacing("realtime", 300), clock), PacingRule(Pacing("burst", 300), clock)
    assert realtime.due_ms(5.0) == 5.0  # nothing sent: due when it arrived
    clock.on_audio_sent(500, 1000)
    assert realtime.wait_ms(1000) == 200 and burst.wait_ms(1000) == 0
    assert realtime.wait_ms(1300) == -100  # the buffer is below lead_ms: due
    assert realtime.due_ms(1000) == 1200  # the buffer falls to lead_ms at 1200
    assert burst.due_ms(1000) == 1000


def test_pacing_rule_with_writes_in_pairs_keeps_the_protocols_lead_bound():
    """A write that may take one frame along early goes once the buffer is down to lead_ms - one frame, so the
    frame taken along leaves at lead_ms (the protocol: at most lead_ms ahead); a lead under two frames takes none
    early; burst pacing has no lead."""
    clock = PlaybackClock()
    paired = PacingRule(Pacing("realtime", 300), clock, frame_ms=20, early_frames=1)
    assert (paired.early_frames, paired.send_lead_ms, paired.lead_ms) == (1, 280, 300)
    clock.on_audio_sent(500, 1000)
    assert paired.wait_ms(1000) == 220 and paired.due_ms(1000) == 1220
    short = PacingRule(Pacing("realtime", 30), PlaybackClock(), frame_ms=20, early_frames=1)
    assert (short.early_frames, short.send_lead_ms) == (0, 30)
    two = PacingRule(Pacing("realtime", 40), PlaybackClock(), frame_ms=20, early_frames=1)
    assert (two.early_frames, two.send_lead_ms) == (1, 20)
    assert PacingRule(Pacing("burst", 300), clock, frame_ms=20, early_frames=1).early_frames == 0


def test_the_core_does_no_io():
    path = Path(__file__).resolve().parents[2] / "voxrt" / "gateway" / "context_core.py"
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or "").split(".")[0])
    assert not modules & {"asyncio", "time", "socket", "starlette", "uvicorn", "threading", "numpy", "torch"}


def test_resume_point_is_the_start_of_the_last_word_consumed_and_shared_with_http():
    """One long-form rule for the realtime contexts and the HTTP synthesis (gateway/http.py)."""
    from voxrt.gateway import http  # noqa: PLC0415
    from voxrt.gateway.context_core import CAPPED_REASONS, resume_point  # noqa: PLC0415

    text = "one two three four"
    assert resume_point(text, 0, None) == 0  # the engine did not say how far it got
    assert resume_point(text, 0, 11) == 8  # inside "three": again from "three"
    assert resume_point(text, 0, 13) == 8  # just past "three"
    assert resume_point(text, 9, 11) == 9  # never before where the request began
    assert http.CAPPED_REASONS is CAPPED_REASONS and http.resume_point is resume_point


def test_a_segments_own_request_spans_its_whole_audio_and_only_its_last_chunk_is_the_contexts():
    """A prompt-at-once program: each segment is a request (`start_generation`), which the engine says
    consumed all its text at the first chunk and nothing after; its text counts as spoken from the first
    chunk to the last, and a request's last chunk ends the context only when no request may follow."""
    core = core_for()
    assert core.push("Hello there. How are you? ") == "Hello there. How are you? "
    core.start_generation(0, 13)
    core.on_request_opened()
    first = core.on_chunk((0, 13), 4800, False, None)
    assert first.span == (0, 1)  # under way, not done: no alignment and no flush yet
    assert core.on_chunk_sent(first) == []
    last = core.on_chunk(None, 4800, True, "stop", more_follows=True)
    assert last.span == (0, 13) and not last.is_last  # the next segment's request comes after it
    events = core.on_chunk_sent(last)
    assert events[0].segments[0]["text"] == "Hello there." and events[0].segments[0]["end_ms"] == 400
    core.start_generation(13, 26)
    core.on_request_opened()
    core.end()
    plan = core.on_chunk((0, 13), 4800, True, "stop", more_follows=False)
    assert plan.span == (13, 26) and plan.is_last


def test_a_capped_segment_request_ends_with_length_limit_not_a_resume_mid_segment():
    """Where a segment's request stopped inside its text is unknown (it read it all in the prompt): a clear
    length_limit, never a resume from the segment's last word."""
    core = core_for()
    core.push("Alpha beta gamma. Delta epsilon. ")
    core.start_generation(0, 18)
    core.on_request_opened()
    plan = core.on_chunk((0, 18), 480, True, "max_frames", more_follows=True)
    assert plan.is_capped
    with pytest.raises(EngineError) as exc:
        core.next_request()
    assert exc.value.code == "length_limit" and "segment of 18 characters" in exc.value.message


def test_playback_is_forwarded_in_the_current_requests_audio_and_a_queued_one_learns_its_lead():
    """The engine counts in each request's own audio: after 400 ms of a first segment's audio, the next
    segment's request hears of the listener as 400 ms short of its start, less what has played."""
    core = core_for()
    core.push("Hello there. How are you? ")
    core.start_generation(0, 13)
    core.on_request_opened()
    core.clock.on_audio_sent(400, 1000.0)  # the first segment's 400 ms all sent at t = 1000 ms
    core.on_chunk_sent(core.on_chunk((0, 13), 9600, True, "stop", more_follows=True))
    assert core.lead_of_next_request_ms(1100.0) == 300  # 100 ms played: 300 ms before the next one's audio
    assert core.playback_to_forward(100, 1100.0, 0.0, "r1") == (100, False)  # the first request: its own audio
    core.start_generation(13, 26)
    core.on_request_opened()
    played, is_stalled = core.playback_to_forward(150, 1150.0, 0.0, "r2")
    assert played == 150 - 400 and not is_stalled  # 250 ms before the second request's first sample
