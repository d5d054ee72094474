"""When a chunk is due (deadlines.chunk_deadline_ns) and what a codec launch costs (codec_launch_ms), on
hand-made requests and jobs."""

from __future__ import annotations

import pytest

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.deadlines import chunk_deadline_ns, codec_launch_ms, launch_frames, with_deadline
from voxrt.engine.sched.plan import CodecJob, ProgramSpec
from voxrt.engine.sched.request import PlaybackAnchor, Request

MS = 1_000_000
SPEC = ProgramSpec(num_codebooks=1, chunk_frames=25, first_chunk_frames=2, consumes_text_incrementally=True,
                   text_pad_id=0, eos_code=None, frames_per_text_token=None, default_max_frames=1000)
FRAME_NS = 80 * MS  # 1920 samples at 24 kHz
SPF = SPEC.samples_per_frame
STARTUP_NS = 200 * MS
ARRIVAL_NS = 5_000 * MS


def request(first_chunk_ns: int | None = None, playback: PlaybackAnchor | None = None) -> Request:
    r = Request.create("r", "voice", SamplingParams(), lambda text: ([], []), arrival_ns=ARRIVAL_NS)
    r.first_chunk_ns = first_chunk_ns
    r.playback = playback
    return r


def test_frame_time_of_the_spec():
    assert SPEC.frame_ns == FRAME_NS


@pytest.mark.parametrize("r", [
    request(),
    request(first_chunk_ns=ARRIVAL_NS + 50 * MS),
    request(first_chunk_ns=ARRIVAL_NS + 50 * MS, playback=PlaybackAnchor(0, ARRIVAL_NS + 150 * MS, True)),
])
def test_first_chunk_is_due_startup_after_arrival(r):
    assert chunk_deadline_ns(r, 0, SPEC, STARTUP_NS) == ARRIVAL_NS + STARTUP_NS


def test_audio_ahead_of_a_request_moves_its_first_chunk_and_the_rest_after_it():
    """A request whose audio follows other audio of its stream (a prompt-at-once program's next segment) is
    reported with played_samples < 0: its first chunk is due when the audio ahead has played, later or sooner
    than the TTFA target, and its later chunks follow from there."""
    anchor_ns = ARRIVAL_NS + 10 * MS
    later = request(playback=PlaybackAnchor(-3 * SPF, anchor_ns, False))  # 3 frames (240 ms) still ahead
    assert chunk_deadline_ns(later, 0, SPEC, STARTUP_NS) == anchor_ns + 3 * FRAME_NS
    assert chunk_deadline_ns(later, 2, SPEC, STARTUP_NS) == anchor_ns + 5 * FRAME_NS
    sooner = request(playback=PlaybackAnchor(-SPF // 2, anchor_ns, False))  # 40 ms ahead: due before 200 ms
    assert chunk_deadline_ns(sooner, 0, SPEC, STARTUP_NS, margin_ns=5 * MS) == anchor_ns + FRAME_NS // 2 - 5 * MS


def test_without_a_report_playback_starts_when_the_first_chunk_completed():
    first_ns = ARRIVAL_NS + 70 * MS
    r = request(first_chunk_ns=first_ns)
    assert chunk_deadline_ns(r, 2, SPEC, STARTUP_NS) == first_ns + 2 * FRAME_NS
    assert chunk_deadline_ns(r, 30, SPEC, STARTUP_NS) == first_ns + 30 * FRAME_NS


def test_while_the_first_chunk_is_in_flight_playback_is_assumed_to_start_at_its_deadline():
    r = request()
    assert chunk_deadline_ns(r, 2, SPEC, STARTUP_NS) == ARRIVAL_NS + STARTUP_NS + 2 * FRAME_NS


def test_a_playback_report_anchors_the_deadline():
    anchor_ns = ARRIVAL_NS + 1_000 * MS
    # 5.5 frames heard at the anchor: frame 14 is reached 8.5 frames later
    r = request(first_chunk_ns=ARRIVAL_NS + 60 * MS, playback=PlaybackAnchor(int(5.5 * SPF), anchor_ns, False))
    assert chunk_deadline_ns(r, 14, SPEC, STARTUP_NS) == anchor_ns + round(8.5 * FRAME_NS)
    # the report wins over the first-chunk assumption (the listener may have stalled before it)
    assert chunk_deadline_ns(r, 14, SPEC, STARTUP_NS) != r.first_chunk_ns + 14 * FRAME_NS


def test_a_report_that_the_listener_is_stalled_makes_the_chunk_overdue():
    anchor_ns = ARRIVAL_NS + 1_000 * MS
    r = request(first_chunk_ns=ARRIVAL_NS + 60 * MS, playback=PlaybackAnchor(6 * SPF, anchor_ns, True))
    assert chunk_deadline_ns(r, 6, SPEC, STARTUP_NS) == anchor_ns
    assert chunk_deadline_ns(r, 14, SPEC, STARTUP_NS) == anchor_ns


# Orpheus's shape: 2048-sample frames, a codec that lags 4757 samples, a 3-frame first chunk (58 ms of audio)
LAGGING = ProgramSpec(num_codebooks=7, chunk_frames=12, first_chunk_frames=3, consumes_text_incrementally=False,
                      text_pad_id=0, eos_code=None, frames_per_text_token=None, default_max_frames=1000,
                      samples_per_frame=2048, codec_delay_samples=4757)


def test_behind_a_lagging_codec_later_chunks_are_due_the_lag_earlier():
    """The first chunk of a codec that lags releases its frames' audio less the lag, so the chunk at frame f
    starts f frames less the lag into the audio, and is due that much sooner."""
    lag_ns = 4757 * 1e9 / 24000  # 198.2 ms
    first_ns = ARRIVAL_NS + 70 * MS
    r = request(first_chunk_ns=first_ns)
    assert chunk_deadline_ns(r, 3, LAGGING, STARTUP_NS) == first_ns + round(3 * LAGGING.frame_ns - lag_ns)
    assert chunk_deadline_ns(r, 3, LAGGING, STARTUP_NS) - first_ns == pytest.approx(57.8 * MS, abs=0.1 * MS)
    in_flight = request()
    assert chunk_deadline_ns(in_flight, 6, LAGGING, STARTUP_NS) == (ARRIVAL_NS + STARTUP_NS
                                                                    + round(6 * LAGGING.frame_ns - lag_ns))
    # a report counts played samples of the audio released: 1000 samples heard, frame 3 starts at 1387
    anchor_ns = ARRIVAL_NS + 400 * MS
    heard = request(first_chunk_ns=first_ns, playback=PlaybackAnchor(1000, anchor_ns, False))
    assert chunk_deadline_ns(heard, 3, LAGGING, STARTUP_NS) == anchor_ns + round(387 / 24000 * 1e9)
    # the first chunk is unaffected
    assert chunk_deadline_ns(r, 0, LAGGING, STARTUP_NS) == ARRIVAL_NS + STARTUP_NS


def test_behind_a_lagging_codec_chunks_add_up_to_their_frames_and_the_schedule_counts_the_audio():
    assert LAGGING.chunk_samples(0, 3, False) == 3 * 2048 - 4757
    assert LAGGING.chunk_samples(3, 3, False) == 3 * 2048
    assert LAGGING.chunk_samples(6, 2, True) == 2 * 2048 + 4757
    assert LAGGING.chunk_samples(0, 5, True) == 5 * 2048  # one chunk: the whole request
    # a first chunk cut at 2 frames (short of the lag) releases nothing; the next one the rest
    assert LAGGING.samples_before(2) == 0 and LAGGING.chunk_samples(0, 2, False) == 0
    assert LAGGING.chunk_samples(2, 3, False) == 5 * 2048 - 4757
    sizes, cut = [], 0
    for _ in range(5):
        sizes.append(LAGGING.next_chunk_size(cut))
        cut += sizes[-1]
    # counting frames would give 3, 6, 12: 6 frames to make in the 58 ms the first chunk plays
    assert sizes == [3, 3, 6, 12, 12]
    assert [SPEC.next_chunk_size(c) for c in (0, 2, 6, 14)] == [2, 4, 8, 16]  # no lag: the doubling schedule


def test_with_deadline_sets_the_job_deadline_and_nothing_else():
    r = request(first_chunk_ns=ARRIVAL_NS + 60 * MS)
    job = CodecJob(r, first_frame=6, num_frames=8, chunk_index=2, is_last=False)
    dated = with_deadline(job, SPEC, STARTUP_NS)
    assert dated.deadline_ns == ARRIVAL_NS + 60 * MS + 6 * FRAME_NS
    assert (dated.request, dated.first_frame, dated.num_frames, dated.chunk_index, dated.is_last, dated.lane) == (
        job.request, job.first_frame, job.num_frames, job.chunk_index, job.is_last, job.lane)


def job(frames: int, is_last: bool = False) -> CodecJob:
    return CodecJob(request(), first_frame=0, num_frames=frames, chunk_index=1, is_last=is_last)


@pytest.mark.parametrize(("frames", "is_last", "launched"), [
    (0, True, 0), (2, False, 2), (4, False, 4), (3, True, 4), (5, True, 8), (17, True, 25), (25, True, 25),
    (1, False, 1),  # a starved cut is always a codec size already
])
def test_launch_frames_pads_an_odd_last_chunk_to_the_next_size(frames, is_last, launched):
    assert launch_frames(job(frames, is_last), SPEC) == launched


def test_codec_launch_cost_groups_by_size_and_splits_at_the_batch_limit():
    costs = CostModel(codec_base_ms=2.0, codec_per_frame_ms=0.1)
    assert codec_launch_ms(costs, [], SPEC, 16) == 0.0
    assert codec_launch_ms(costs, [job(0, True)], SPEC, 16) == 0.0
    assert codec_launch_ms(costs, [job(2)], SPEC, 16) == pytest.approx(2.0 + 0.1 * 2)
    # two sizes: two launches; the odd last chunk of 3 runs with the chunks of 4
    jobs = [job(2), job(2), job(4), job(3, True)]
    assert codec_launch_ms(costs, jobs, SPEC, 16) == pytest.approx((2.0 + 0.1 * 2 * 2) + (2.0 + 0.1 * 2 * 4))
    # 20 chunks of 25 frames with at most 16 a launch: 16 + 4
    assert codec_launch_ms(costs, [job(25)] * 20, SPEC, 16) == pytest.approx(
        costs.codec_ms(16, 25) + costs.codec_ms(4, 25))
