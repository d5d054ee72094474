"""Non-streaming requests (HTTP speech, batch jobs) under the deadline policy: they use what streams leave.
Admitted after waiting streams, held back while a stream would miss its next chunk, never on the urgent lane,
and never starved: their chunks go when the background lane has room or the LM idles."""

from __future__ import annotations

from test_policies import MS, NOW, STARTUP_NS, add, codec_summary, hand_made, make  # noqa: F401
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.plan import BACKGROUND, URGENT
from voxrt.engine.sched.request import PlaybackAnchor, RequestState


def add_batch(sched, rid, num_words=40, arrival_ns=NOW):
    request = add(sched, rid, num_words=None, arrival_ns=arrival_ns)
    request.is_streaming = False
    sched.append_text(rid, " ".join(["word"] * num_words), True)
    return request


def test_streams_are_admitted_before_an_earlier_batch_request():
    sched = make("deadline", max_batch_size=1)
    batch = add_batch(sched, "batch", arrival_ns=NOW - 500 * MS)
    stream = add(sched, "stream", arrival_ns=NOW)
    plan = sched.schedule(NOW)
    assert plan.prefill == [stream] and batch.state is RequestState.WAITING


def test_a_batch_request_waits_while_a_stream_would_miss_and_goes_in_when_none_would():
    costs = CostModel(lm_base_ms=10.0, lm_per_request_ms=1.0, prefill_per_token_ms=1.0, codec_base_ms=5.0,
                      codec_per_frame_ms=0.0)  # admitting one more request (3 prompt tokens) adds 4 ms
    sched = make("deadline", costs=costs)
    # a stream whose next chunk (frames 2-5) is due at NOW + 17 ms: one frame (10 ms) and its codec (5 ms)
    # still to go leave 2 ms of slack, less than the 4 ms an admission adds
    tight = hand_made(sched, "tight", chunks=1, ready=False, first_chunk_ns=NOW - 160 * MS + 17 * MS)
    batch = add_batch(sched, "batch")
    stream = add(sched, "stream2", arrival_ns=NOW)  # a stream in the same spot is deferred within its bound
    plan = sched.schedule(NOW)
    assert not plan.prefill and batch.deferred_since_ns == NOW and stream.deferred_since_ns == NOW
    assert [(job.request, job.is_early) for job in plan.codec] == [(tight, True)]  # 2 of its 3 frames go early
    late = NOW + 150 * MS  # past the streams' 100 ms bound: the batch request still waits while at risk...
    tight.playback = PlaybackAnchor(0, late, False)  # (the first one is safe now)
    hand_made(sched, "tight2", chunks=1, ready=False, first_chunk_ns=late - 160 * MS + 17 * MS)
    plan = sched.schedule(late)
    assert batch not in plan.prefill and stream in plan.prefill
    relaxed = make("deadline", costs=costs)  # ...and goes in at once when no stream is at risk
    hand_made(relaxed, "relaxed", chunks=1, ready=False, first_chunk_ns=NOW, playback=PlaybackAnchor(0, NOW, False))
    batch2 = add_batch(relaxed, "batch2")
    assert batch2 in relaxed.schedule(NOW).prefill and batch2.deferred_since_ns is None


def test_batch_chunks_never_go_urgent_and_do_not_starve():
    sched = make("deadline", has_lanes=True)
    done = hand_made(sched, "batch", chunks=0, generation_done=True)
    done.is_streaming = False
    plan = sched.schedule(NOW)
    assert codec_summary(plan) == [("batch", 0, BACKGROUND)]  # its first chunk too: no deadline, no urgency
    stream = hand_made(sched, "stream", chunks=0, arrival_ns=NOW)
    plan = sched.schedule(NOW + 1 * MS)
    assert ("stream", 0, URGENT) in codec_summary(plan)
    assert all(lane != URGENT for rid, _, lane in codec_summary(plan) if rid == "batch")
    assert stream.is_streaming
