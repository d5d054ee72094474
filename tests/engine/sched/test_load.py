"""The load report's least stream slack (sched/load.py) on hand-made requests."""

from __future__ import annotations

from voxrt.engine.params import SamplingParams
from voxrt.engine.sched.costs import CostModel
from voxrt.engine.sched.load import least_slack_ms
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import Request, RequestState

MS = 1_000_000
SPEC = ProgramSpec(num_codebooks=1, chunk_frames=25, first_chunk_frames=2, consumes_text_incrementally=True,
                   text_pad_id=0, eos_code=None, frames_per_text_token=None, default_max_frames=1000)
COSTS = CostModel(lm_base_ms=10, lm_per_request_ms=0, codec_base_ms=5, codec_per_frame_ms=0)


def request(rid: str, arrival_ms: int, state: RequestState = RequestState.RUNNING, streaming: bool = True) -> Request:
    r = Request.create(rid, "voice", SamplingParams(), lambda text: ([], []), arrival_ns=arrival_ms * MS)
    r.is_streaming = streaming
    if state is not RequestState.WAITING:
        r.transition(RequestState.RUNNING)
    if state is RequestState.STARVED:
        r.transition(RequestState.STARVED)
    return r


def test_no_generating_stream_has_no_slack():
    assert least_slack_ms([], 0, SPEC, COSTS, 200, 0) is None
    idle = [request("w", 0, RequestState.WAITING), request("s", 0, RequestState.STARVED),
            request("batch", 0, streaming=False)]
    assert least_slack_ms(idle, 0, SPEC, COSTS, 200, 0) is None


def test_least_slack_is_the_most_urgent_streams_first_chunk():
    # first chunk due at arrival + 200 ms; 2 frames missing at 10 ms each and a 5 ms codec launch: 175 ms left
    # for the one that arrived at 0, at now = 0; the one that arrived 100 ms later has 100 ms more
    requests = [request("late", 100), request("early", 0)]
    assert least_slack_ms(requests, 0, SPEC, COSTS, 200, 0) == 175
    assert least_slack_ms(requests, 50 * MS, SPEC, COSTS, 200, 0) == 125
    assert least_slack_ms(requests, 0, SPEC, COSTS, 200, 50) == 125  # the delivery margin comes off too
    assert least_slack_ms(requests, 300 * MS, SPEC, COSTS, 200, 0) == -125  # late: negative
