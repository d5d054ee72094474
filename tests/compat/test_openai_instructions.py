"""`instructions` of POST /v1/audio/speech as the adapter parses them (compat/openai_speech.py), against the
served model's ModelInfo; no server. The SDK end to end: tests/models/qwen3_tts/test_instructions.py (a model
that takes them) and test_openai_sdk.py (one that does not)."""

from __future__ import annotations

import pytest

from voxrt.engine.messages import ModelInfo
from voxrt.gateway.compat.aliases import Aliases
from voxrt.gateway.compat.openai_speech import parse_speech_request
from voxrt.gateway.http import HTTPError


def info(accepts: bool, max_bytes: int = 256) -> ModelInfo:
    return ModelInfo(name="qwen3-tts", sample_rate=24000, frame_rate_hz=12.5, samples_per_frame=1920,
                     num_codebooks=16, chunk_frames=25, first_chunk_frames=2, voices=("vivian", "ryan"),
                     default_voice="vivian", consumes_text_incrementally=True, device="cpu",
                     attention_backend="torch", use_cuda_graphs=False, accepts_instructions=accepts,
                     max_instructions_bytes=max_bytes if accepts else 0)


def parse(instructions, model: ModelInfo):
    body = {"model": "tts-1", "voice": "vivian", "input": "Hi."}
    if instructions is not ...:
        body["instructions"] = instructions
    return parse_speech_request(body, model, Aliases.parse())


def refusal(instructions, model: ModelInfo) -> HTTPError:
    with pytest.raises(HTTPError) as caught:
        parse(instructions, model)
    assert caught.value.status == 400
    return caught.value


def test_a_model_that_takes_them_gets_them():
    assert parse("Speak slowly.", info(True)).instructions == "Speak slowly."
    assert parse("  Whisper. ", info(True)).instructions == "  Whisper. "  # passed as sent (the reference's form)


@pytest.mark.parametrize("blank", [..., None, "", "   ", "\n"])
def test_absent_null_empty_and_blank_are_none_for_every_model(blank):
    for model in (info(True), info(False)):
        assert parse(blank, model).instructions is None


def test_a_model_that_does_not_take_them_refuses_them():
    error = refusal("Speak like a pirate.", info(False))
    assert error.code == "unsupported_parameter" and "'instructions'" in error.message and "qwen3-tts" in error.message


@pytest.mark.parametrize("bad", [42, 1.5, True, ["a"], {"text": "a"}])
def test_non_strings_are_refused_naming_the_field(bad):
    error = refusal(bad, info(True))
    assert error.code == "invalid_request" and error.message == "'instructions' must be a string"


def test_overlong_ones_are_refused_with_the_limit_in_utf8_bytes():
    assert parse("a" * 256, info(True)).instructions == "a" * 256
    for too_long in ("a" * 257, "好" * 86):  # 86 x 3 bytes = 258
        error = refusal(too_long, info(True))
        assert error.code == "instructions_too_long" and "at most 256" in error.message
    assert parse("好" * 85, info(True)).instructions == "好" * 85  # 255 bytes


def test_lone_surrogates_become_replacement_characters():
    assert parse("a\ud800b", info(True)).instructions == "a\ufffdb"
