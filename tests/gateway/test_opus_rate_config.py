"""`voxrt serve --opus-rate` and `GatewayConfig.opus_rate`: what libopus is fed (voxrt/audio/encoder.py)."""

from __future__ import annotations

import asyncio

import pytest

from voxrt.cli import build_parser
from voxrt.gateway.config import GatewayConfig


def test_serve_flag_defaults_to_auto_and_takes_wire():
    parser = build_parser()
    assert parser.parse_args(["serve", "--model", "standin"]).opus_rate == "auto"
    assert parser.parse_args(["serve", "--model", "standin", "--opus-rate", "wire"]).opus_rate == "wire"


def test_serve_flag_refuses_other_values(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--model", "standin", "--opus-rate", "24000"])
    assert exc.value.code == 2
    assert "invalid choice: '24000'" in capsys.readouterr().err


def test_config_checks_it():
    assert GatewayConfig().opus_rate == "auto"
    assert GatewayConfig(opus_rate="wire").opus_rate == "wire"
    with pytest.raises(ValueError, match="opus_rate must be auto or wire"):
        GatewayConfig(opus_rate="model")


def test_a_context_codes_opus_at_the_rate_it_is_given():
    from types import SimpleNamespace  # noqa: PLC0415

    from voxrt.gateway.context import ContextRunner  # noqa: PLC0415
    from voxrt.gateway.metrics import GatewayMetrics  # noqa: PLC0415
    from voxrt.protocol.config import OutputFormat, Pacing, SessionConfig  # noqa: PLC0415

    async def noop(*_args) -> None:
        return None

    engine = SimpleNamespace(info=SimpleNamespace(sample_rate=24000, consumes_text_incrementally=True))
    config = SessionConfig("v", "m", OutputFormat("opus", 48000, 20), Pacing("realtime", 300))

    async def codec_rate(**kwargs) -> int:  # a context lives on the event loop (its pacer is the loop's)
        runner = ContextRunner("c1", 0, config, engine, noop, noop, lambda *_: None, GatewayMetrics(), **kwargs)
        return runner.encoder.codec_rate
    assert asyncio.run(codec_rate()) == 24000  # the model's rate, no resampler
    assert asyncio.run(codec_rate(opus_rate="wire")) == 48000
