"""Session configuration: defaults, validation once, merging a client's partial objects over the defaults."""

from __future__ import annotations

import dataclasses

import pytest

from voxrt.protocol.config import (CODECS, FRAME_MS, SAMPLE_RATES, SEGMENTATION_MODES, Limits, OutputFormat, Pacing,
                                   SessionConfig, output_from_wire, pacing_from_wire, segmentation_from_wire)
from voxrt.protocol.errors import ProtocolError


def test_defaults_match_protocol():
    assert OutputFormat() == OutputFormat("opus", 48000, 20)
    assert Pacing() == Pacing("realtime", 300)
    assert CODECS == ("opus", "pcm16", "mulaw", "alaw")
    assert SAMPLE_RATES == (8000, 16000, 24000, 48000)
    assert FRAME_MS == (10, 20, 40, 60)
    assert SEGMENTATION_MODES == ("auto", "sentence", "none")
    assert Limits() == Limits(8, 20000, 65536, 60.0, 20)


@pytest.mark.parametrize("rate", SAMPLE_RATES)
@pytest.mark.parametrize("frame_ms", FRAME_MS)
def test_samples_per_frame_is_exact(rate, frame_ms):
    fmt = OutputFormat("pcm16", rate, frame_ms)
    assert fmt.samples_per_frame == rate * frame_ms / 1000
    assert fmt.to_wire() == {"codec": "pcm16", "sample_rate": rate, "frame_ms": frame_ms}


@pytest.mark.parametrize("kwargs", [{"codec": "mp3"}, {"sample_rate": 44100}, {"sample_rate": 48000.0},
                                    {"frame_ms": 25}, {"frame_ms": True}])
def test_output_format_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        OutputFormat(**kwargs)


@pytest.mark.parametrize("kwargs", [{"mode": "fast"}, {"lead_ms": 0}, {"lead_ms": 10001}, {"lead_ms": 1.5}])
def test_pacing_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        Pacing(**kwargs)


def test_pacing_bounds_are_inclusive_of_10000():
    assert Pacing(lead_ms=10000).lead_ms == 10000 and Pacing(lead_ms=1).lead_ms == 1


def test_session_config_checks_segmentation_and_is_frozen():
    config = SessionConfig("v", "m", OutputFormat(), Pacing())
    assert config.segmentation == "auto"
    with pytest.raises(ValueError, match="segmentation"):
        SessionConfig("v", "m", OutputFormat(), Pacing(), "paragraph")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.voice = "x"  # type: ignore[misc]


def test_limits_to_wire_has_exactly_the_protocol_fields():
    assert Limits().to_wire() == {"max_contexts": 8, "max_text_chars": 20000, "max_message_bytes": 65536,
                                  "inactivity_timeout_s": 60.0}


@pytest.mark.parametrize("kwargs", [{"max_contexts": 0}, {"inactivity_timeout_s": -1.0},
                                    {"max_message_bytes": float("nan")}, {"max_invalid_messages": True}])
def test_limits_reject_non_positive(kwargs):
    with pytest.raises(ValueError):
        Limits(**kwargs)


def test_output_from_wire_merges_over_defaults_and_ignores_unknown_keys():
    assert output_from_wire(None) == OutputFormat()
    assert output_from_wire({}) == OutputFormat()
    assert output_from_wire({"codec": "mulaw", "sample_rate": 8000, "extra": 1}) == OutputFormat("mulaw", 8000, 20)
    assert output_from_wire({"sample_rate": 16000.0}).sample_rate == 16000  # JSON numbers may arrive as floats
    assert output_from_wire({"frame_ms": None}) == OutputFormat()


@pytest.mark.parametrize(("value", "field"), [([], "output"), ("opus", "output"), ({"codec": "mp3"}, "output.codec"),
                                              ({"codec": 1}, "output.codec"),
                                              ({"sample_rate": 44100}, "output.sample_rate"),
                                              ({"sample_rate": "48000"}, "output.sample_rate"),
                                              ({"frame_ms": 30}, "output.frame_ms"),
                                              ({"frame_ms": True}, "output.frame_ms")])
def test_output_from_wire_names_the_field_and_allowed_values(value, field):
    with pytest.raises(ProtocolError) as info:
        output_from_wire(value)
    error = info.value
    assert error.code == "invalid_message" and not error.fatal and error.field == field
    assert field in error.message
    if field == "output.sample_rate":
        assert "8000, 16000, 24000, 48000" in error.message


def test_pacing_from_wire():
    assert pacing_from_wire(None) == Pacing()
    assert pacing_from_wire({"mode": "burst"}) == Pacing("burst", 300)
    assert pacing_from_wire({"lead_ms": 120}) == Pacing("realtime", 120)
    for bad, field in [({"mode": "x"}, "pacing.mode"), ({"lead_ms": 0}, "pacing.lead_ms"),
                       ({"lead_ms": "300"}, "pacing.lead_ms"), ({"lead_ms": 20000}, "pacing.lead_ms"), (3, "pacing")]:
        with pytest.raises(ProtocolError) as info:
            pacing_from_wire(bad)
        assert info.value.code == "invalid_message" and info.value.field == field


def test_segmentation_from_wire():
    assert segmentation_from_wire(None) == "auto"
    assert segmentation_from_wire("sentence") == "sentence"
    with pytest.raises(ProtocolError) as info:
        segmentation_from_wire("words")
    assert info.value.field == "segmentation" and "auto, sentence, none" in info.value.message
