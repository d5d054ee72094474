"""The playback report's direct parse (events.parse_playback_report, Session.receive_report) against the full
path (parse_client_message, Session.receive_text): wherever the direct parse answers, it is the full path's
answer with the same state changes; everywhere else it declines and changes nothing, so the full path still
gives every error it gave."""

from __future__ import annotations

import json
import random

import pytest

from voxrt.protocol.actions import ReportPlayback
from voxrt.protocol.config import Limits
from voxrt.protocol.events import MAX_CONTEXT_ID_CHARS, PlaybackEvent, parse_client_message, parse_playback_report
from voxrt.protocol.errors import ProtocolError
from voxrt.protocol.session import Session, SessionState

CANONICAL = [
    '{"type": "playback", "context_id": "c1", "played_ms": 1234.5}',  # json.dumps (the Python clients)
    '{"type":"playback","context_id":"c1","played_ms":1234.5}',  # JSON.stringify (the browser page)
    '{"type":"playback","context_id":"c1","played_ms":0}',
    '{"type":"playback","context_id":"c1","played_ms":100}',
    ' \t\r\n{ "type" :\n"playback" ,"context_id":"c1" , "played_ms" : 7.25 }\n',
    '{"type":"playback","context_id":"c1","played_ms":123456789012345}',
    '{"type":"playback","context_id":"c1","played_ms":0.12345678901234567}',
    '{"type":"playback","context_id":"c1","played_ms":1.0}',
    '{"type":"playback","context_id":"héllo ☃ 🎵","played_ms":5}',
    '{"type":"playback","context_id":"' + "x" * MAX_CONTEXT_ID_CHARS + '","played_ms":5}',
    '{"type":"playback","context_id":"\x7f","played_ms":5}',
]
# each of these parses to an error, another event, or a report the direct parse leaves to the full parser
OTHERS = [
    '{"type":"playback","context_id":"c1","played_ms":-1}',
    '{"type":"playback","context_id":"c1","played_ms":-0}',
    '{"type":"playback","context_id":"c1","played_ms":1e3}',
    '{"type":"playback","context_id":"c1","played_ms":1E400}',
    '{"type":"playback","context_id":"c1","played_ms":NaN}',
    '{"type":"playback","context_id":"c1","played_ms":Infinity}',
    '{"type":"playback","context_id":"c1","played_ms":true}',
    '{"type":"playback","context_id":"c1","played_ms":null}',
    '{"type":"playback","context_id":"c1","played_ms":"5"}',
    '{"type":"playback","context_id":"c1","played_ms":01}',
    '{"type":"playback","context_id":"c1","played_ms":1.}',
    '{"type":"playback","context_id":"c1","played_ms":' + "9" * 400 + '}',
    '{"type":"playback","context_id":"c1","played_ms":1234567890123456}',
    '{"type":"playback","context_id":"c1"}',
    '{"type":"playback","played_ms":5}',
    '{"type":"playback","context_id":"","played_ms":5}',
    '{"type":"playback","context_id":"*","played_ms":5}',
    '{"type":"playback","context_id":"' + "x" * (MAX_CONTEXT_ID_CHARS + 1) + '","played_ms":5}',
    '{"type":"playback","context_id":"a\\"b","played_ms":5}',
    '{"type":"playback","context_id":"c\\u0031","played_ms":5}',
    '{"type":"playback","context_id":"\\ud800","played_ms":5}',
    '{"type":"playback","context_id":"\ud800","played_ms":5}',
    '{"type":"playback","context_id":"a\tb","played_ms":5}',
    '{"type":"playback","context_id":5,"played_ms":5}',
    '{"type":"playback","context_id":"c1","played_ms":5,"extra":1}',
    '{"type":"playback","context_id":"c1","played_ms":5,"played_ms":6}',
    '{"type":"playback","type":"ping","context_id":"c1","played_ms":5}',
    '{"context_id":"c1","type":"playback","played_ms":5}',
    '{"type":"playback","context_id":"c1","played_ms":5}}',
    '{"type":"playback","context_id":"c1","played_ms":5',
    '[{"type":"playback","context_id":"c1","played_ms":5}]',
    '{"type":"Playback","context_id":"c1","played_ms":5}',
    '{"type":"playback","context_id":"c2","played_ms":5}',  # unknown context (an error)
    '{"type":"playback","context_id":"done","played_ms":5}',  # a finished one ([])
    '{"type":"ping","id":1}',
    '{"type":"text","context_id":"c1","text":"more"}',
    "not json",
    "",
]


def _session(limits: Limits = Limits()) -> Session:
    session = Session("s", limits, ["v"], "v", ["m"], "m", 0.0)
    session.receive_text('{"type":"session.start"}', 0.0)
    for cid in ("c1", "done", "héllo ☃ 🎵", "x" * MAX_CONTEXT_ID_CHARS, "\x7f"):
        session.receive_text(json.dumps({"type": "text", "context_id": cid, "text": "hi"}), 0.0)
    session.on_context_done("done", "completed", 0.0, {"ttfa_ms": None})
    session.receive_text("garbage", 0.5)  # a run of invalid messages under way: a report ends it
    return session


def _state(session: Session) -> tuple:
    return (session.state, session._last_activity_ms, session._num_invalid_in_row,
            {cid: c.state for cid, c in session._contexts.items()})


def _both_ways(message: str, session_a: Session, session_b: Session, now_ms: float) -> bool:
    full = session_a.receive_text(message, now_ms)
    report = session_b.receive_report(message, now_ms)
    if report is None:
        direct = session_b.receive_text(message, now_ms)
    else:
        direct = [ReportPlayback(*report)]
    assert direct == full, message
    assert _state(session_a) == _state(session_b), message
    return report is not None


@pytest.mark.parametrize("message", CANONICAL)
def test_canonical_reports_are_parsed_directly_as_the_full_parser_parses_them(message):
    report = parse_playback_report(message)
    assert report is not None
    event = parse_client_message(message)
    assert isinstance(event, PlaybackEvent) and (event.context_id, event.played_ms) == report
    assert type(report[1]) is float
    a, b = _session(), _session()
    before = _state(b)
    assert b.receive_report(message, 7.0) == report
    assert _state(b) != before  # the activity time moved and the run of invalid messages ended
    _both_ways(message, a, _session(), 7.0)


@pytest.mark.parametrize("message", OTHERS)
def test_every_other_message_is_declined_unchanged_and_the_full_path_answers_it(message):
    report = parse_playback_report(message)
    if report is not None:  # only reports the session declines (an unknown or finished context)
        event = parse_client_message(message)
        assert isinstance(event, PlaybackEvent) and (event.context_id, event.played_ms) == report
    session = _session()
    before = _state(session)
    assert session.receive_report(message, 7.0) is None
    assert _state(session) == before
    _both_ways(message, _session(), _session(), 7.0)


def test_a_played_ms_past_floats_range_is_an_invalid_message_not_an_exception():
    # found by the list above: json.loads reads 400 digits as an int, and math.isfinite raised OverflowError
    # out of receive_text (which must not raise for anything a client sends) before round 12
    with pytest.raises(ProtocolError, match="finite number") as error:
        parse_client_message('{"type":"playback","context_id":"c1","played_ms":' + "9" * 400 + "}")
    assert error.value.code == "invalid_message"


def test_declined_outside_an_active_session_and_when_too_large():
    message = CANONICAL[0]
    fresh = Session("s", Limits(), ["v"], "v", ["m"], "m", 0.0)
    assert fresh.receive_report(message, 1.0) is None  # before session.start: the full path's error
    _both_ways(message, Session("s", Limits(), ["v"], "v", ["m"], "m", 0.0),
               Session("s", Limits(), ["v"], "v", ["m"], "m", 0.0), 1.0)
    small = Limits(max_message_bytes=40)
    a, b = _session(Limits(max_message_bytes=60)), _session(Limits(max_message_bytes=60))
    for s in (a, b):
        s.limits = small
    assert b.receive_report(message, 1.0) is None
    _both_ways(message, a, b, 1.0)  # message_too_large, fatal, from both
    assert a.state is SessionState.CLOSED
    ending_a, ending_b = _session(), _session()
    for s in (ending_a, ending_b):
        s.receive_text('{"type":"session.end"}', 2.0)
    assert ending_b.state is SessionState.ENDING
    _both_ways(CANONICAL[1], ending_a, ending_b, 3.0)
    closed = _session()
    closed.close()
    assert closed.receive_report(message, 1.0) is None and closed.receive_text(message, 1.0) == []


def test_random_reports_agree_with_the_full_path():
    rng = random.Random(21)
    pieces = ["{", "}", '"type"', '"playback"', '"context_id"', '"c1"', '"played_ms"', ":", ",", " ", "5", "0.5",
              "-", "e", "1", '"', "\\", "\n", "x"]
    a, b = _session(), _session()
    num_direct = 0
    for i in range(3000):
        if rng.random() < 0.5:  # a near miss of the canonical shape
            message = list(CANONICAL[1])
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(len(message) + 1)
                if rng.random() < 0.5 and message:
                    del message[min(pos, len(message) - 1)]
                else:
                    message.insert(pos, rng.choice(pieces))
            message = "".join(message)
        else:
            message = json.dumps({"type": "playback", "context_id": rng.choice(["c1", "c2", "done", "*", ""]),
                                  "played_ms": rng.choice([0, 1, 2.5, -1, 1e20, 1e-7, 123456.789, True, None])},
                                 separators=rng.choice([(",", ":"), (", ", ": ")]))
        num_direct += _both_ways(message, a, b, float(i))
        if a.state is SessionState.CLOSED:  # too many invalid messages in a row: start over
            a, b = _session(), _session()
    assert 100 < num_direct < 2000  # both ways taken often
