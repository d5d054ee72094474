"""SamplingParams: validated once, a typed error naming the field, unknown keys rejected."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest

from voxrt.engine.errors import EngineError, InvalidParamsError
from voxrt.engine.params import SamplingParams


def test_defaults_are_valid():
    p = SamplingParams()
    assert p.temperature > 0
    assert p.top_k >= 0
    assert 0 < p.top_p <= 1
    assert p.repetition_penalty > 0
    assert p.greedy is False
    assert p.num_frames is None
    assert p.max_frames is None


def test_valid_non_default_values():
    p = SamplingParams(temperature=0.01, top_k=0, top_p=1.0, repetition_penalty=1, greedy=True, num_frames=1,
                       max_frames=100)
    assert p.top_k == 0 and p.greedy and p.num_frames == 1 and p.max_frames == 100
    SamplingParams(temperature=2, top_p=1e-6, repetition_penalty=0.5)  # ints and small floats are fine


def test_params_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SamplingParams().temperature = 1.0  # type: ignore[misc]


INVALID = [
    ("temperature", 0.0),
    ("temperature", -1.0),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", "0.7"),
    ("temperature", True),
    ("top_k", -1),
    ("top_k", True),
    ("top_k", False),
    ("top_k", 5.0),
    ("top_k", "5"),
    ("top_p", 0.0),
    ("top_p", 1.0000001),
    ("top_p", 2),
    ("top_p", -0.5),
    ("top_p", math.nan),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -1.05),
    ("repetition_penalty", math.nan),
    ("repetition_penalty", math.inf),
    ("greedy", 1),
    ("greedy", "true"),
    ("greedy", None),
    ("num_frames", 0),
    ("num_frames", -3),
    ("num_frames", True),
    ("num_frames", 2.0),
    ("max_frames", 0),
    ("max_frames", False),
]


@pytest.mark.parametrize(("field", "value"), INVALID, ids=[f"{f}={v!r}" for f, v in INVALID])
def test_invalid_value_raises_error_naming_the_field(field, value):
    with pytest.raises(InvalidParamsError) as info:
        SamplingParams(**{field: value})
    err = info.value
    assert field in str(err)
    assert field in err.message
    assert err.code == "invalid_params"
    assert isinstance(err, EngineError)
    # Only the offending field is named (the other, default, fields are valid).
    others = {f.name for f in dataclasses.fields(SamplingParams)} - {field}
    assert not [o for o in others if f"{o} must" in str(err)]


def test_several_problems_are_all_reported():
    with pytest.raises(InvalidParamsError) as info:
        SamplingParams(temperature=0, top_k=-1, top_p=0, repetition_penalty=0, greedy="no", num_frames=0)
    msg = str(info.value)
    for field in ("temperature", "top_k", "top_p", "repetition_penalty", "greedy", "num_frames"):
        assert field in msg


def test_from_dict_builds_valid_params():
    p = SamplingParams.from_dict({"temperature": 0.5, "top_k": 10, "greedy": True})
    assert p == SamplingParams(temperature=0.5, top_k=10, greedy=True)
    assert SamplingParams.from_dict({}) == SamplingParams()


def test_from_dict_rejects_unknown_keys_and_names_them():
    with pytest.raises(InvalidParamsError) as info:
        SamplingParams.from_dict({"temperature": 0.5, "topk": 3, "beam_width": 2})
    msg = str(info.value)
    assert "topk" in msg and "beam_width" in msg
    assert "top_k" in msg  # the known keys are listed as a hint


def test_from_dict_still_validates_values():
    with pytest.raises(InvalidParamsError, match="top_p"):
        SamplingParams.from_dict({"top_p": 0})


def test_invalid_params_error_survives_pickling():
    with pytest.raises(InvalidParamsError) as info:
        SamplingParams(top_k=-2)
    clone = pickle.loads(pickle.dumps(info.value))
    assert type(clone) is InvalidParamsError
    assert clone.message == info.value.message
    assert clone.code == "invalid_params"
