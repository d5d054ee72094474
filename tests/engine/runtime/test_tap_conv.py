"""The dilated causal conv as one kernel (kernels/tap_conv.py): Triton's interpreter on the CPU against the
reference op (F.conv1d over the padded input), the shapes the codec runs in miniature (dilations 1, 3, 9;
output channels not a power of two; one sample; strided rows), bad input refused; and its knob."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels.tap_conv import tap_conv, tap_conv_config


def _case(batch, c_in, c_out, time, kernel, dilation, dtype, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    padded = torch.randn(batch, c_in, (kernel - 1) * dilation + time, generator=g).to(dtype)
    taps = (torch.randn(kernel, c_out, c_in, generator=g) / (c_in * kernel) ** 0.5).to(dtype)
    b = (torch.randn(c_out, generator=g) * 0.1).to(dtype) if bias else None
    return padded, taps, b


def _reference(padded, taps, bias, dilation):  # float32, one rounding at the end where the kernel has none
    return F.conv1d(padded.float(), taps.permute(1, 2, 0).float(), None if bias is None else bias.float(),
                    dilation=dilation)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 32, 48, 37, 7, 3, True), (1, 16, 16, 1, 7, 9, False),
                                   (2, 40, 24, 70, 3, 1, True), (3, 96, 96, 150, 7, 9, True),
                                   (1, 24, 200, 20, 7, 1, False)])
def test_triton_equals_the_reference_conv(dtype, shape):
    batch, c_in, c_out, time, kernel, dilation, bias = shape
    padded, taps, b = _case(batch, c_in, c_out, time, kernel, dilation, dtype, bias)
    got = tap_conv(padded, taps, b, dilation, "triton")
    assert got.shape == (batch, c_out, time) and got.dtype == dtype
    want = _reference(padded, taps, b, dilation)
    # float32: the same sums in another order; bf16: float32 sums rounded once (the interpreter truncates
    # where the GPU rounds to nearest: within one bf16 step)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=4e-2, rtol=1.6e-2)
    torch.testing.assert_close(got.float(), want, **tol)
    torch.testing.assert_close(tap_conv(padded, taps, b, dilation, "torch").float(), want, **tol)


def test_block_sizes_from_the_config_or_the_call():
    padded, taps, b = _case(2, 48, 40, 90, 7, 3, torch.float32)
    want = tap_conv(padded, taps, b, 3, "triton")
    for config in ({"BLOCK_O": 16, "BLOCK_T": 32, "BLOCK_I": 16, "num_warps": 2},
                   {"BLOCK_O": 64, "BLOCK_T": 16, "BLOCK_I": 64}):
        torch.testing.assert_close(tap_conv(padded, taps, b, 3, "triton", config=config), want, atol=1e-4, rtol=1e-4)
    cfg = tap_conv_config(96, 96, 48000)
    assert (cfg["BLOCK_O"], cfg["BLOCK_T"], cfg["BLOCK_I"], cfg["num_warps"]) == (128, 64, 32, 4)  # one masked block
    assert tap_conv_config(768, 768, 800)["BLOCK_T"] == 64
    assert tap_conv_config(16, 16, 1)["BLOCK_T"] == 16


def test_strided_rows_equal_contiguous_ones():
    padded, taps, b = _case(2, 32, 32, 40, 7, 1, torch.float32)
    wide = torch.zeros(2, 40, padded.shape[2])
    wide[:, 4:36] = padded
    torch.testing.assert_close(tap_conv(wide[:, 4:36], taps, b, 1, "triton"), tap_conv(padded, taps, b, 1, "triton"),
                               atol=0, rtol=0)


def test_channels_last_in_gives_channels_last_out():
    """[B, C, L] over [B, L, C] memory (the codec's channels-last decoder): read and written through the strides,
    the same numbers as the plain layout, the output channels-last too."""
    from voxrt.engine.runtime.kernels.snake import channels_last

    padded, taps, b = _case(2, 24, 40, 30, 7, 3, torch.float32)
    cl = padded.transpose(1, 2).contiguous().transpose(1, 2)
    out = tap_conv(cl, taps, b, 3, "triton")
    assert channels_last(out) and out.shape == (2, 40, 30)
    torch.testing.assert_close(out, tap_conv(padded, taps, b, 3, "triton"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_bad_input_is_refused(impl):
    padded, taps, b = _case(1, 16, 16, 10, 7, 3, torch.float32)
    with pytest.raises(ValueError, match="tap_conv wants"):
        tap_conv(padded[:, :8], taps, b, 3, impl)  # input channels differ
    with pytest.raises(ValueError, match="tap_conv wants"):
        tap_conv(padded, taps, b[:8], 3, impl)  # bias of the wrong size
    with pytest.raises(ValueError, match="tap_conv wants"):
        tap_conv(padded, taps, b, 0, impl)
    with pytest.raises(ValueError, match="shorter than the conv's reach"):
        tap_conv(padded[..., :18], taps, b, 3, impl)
    with pytest.raises(ValueError, match="unknown kernel implementation"):
        tap_conv(padded, taps, b, 3, "cuda")


def test_the_codec_conv_knob(monkeypatch):
    """VOXRT_CODEC_CONV: off by default, timed / all, anything else an error `voxrt serve` reports first."""
    from voxrt.engine.runtime import knobs

    monkeypatch.delenv("VOXRT_CODEC_CONV", raising=False)
    assert knobs.codec_conv() == "off"
    for raw, mode in (("timed", "timed"), (" ALL ", "all"), ("0", "off"), ("", "off")):
        monkeypatch.setenv("VOXRT_CODEC_CONV", raw)
        assert knobs.codec_conv() == mode
    monkeypatch.setenv("VOXRT_CODEC_CONV", "on")
    with pytest.raises(ValueError, match="VOXRT_CODEC_CONV='on'; expected off, timed or all"):
        knobs.check_env()


def test_the_codec_channels_last_and_fused_unit_knobs(monkeypatch):
    """VOXRT_CODEC_CHANNELS_LAST: on by default, off (0, no, false); VOXRT_CODEC_FUSED_UNIT: off by default, timed,
    all; anything else an error `voxrt serve` reports first."""
    from voxrt.engine.runtime import knobs

    for name in ("VOXRT_CODEC_CONV", "VOXRT_CODEC_CHANNELS_LAST", "VOXRT_CODEC_FUSED_UNIT"):
        monkeypatch.delenv(name, raising=False)
    assert knobs.codec_channels_last() is True and knobs.codec_fused_unit() == "off"
    for raw, on in (("on", True), (" ON ", True), ("off", False), ("0", False), ("false", False), ("", True)):
        monkeypatch.setenv("VOXRT_CODEC_CHANNELS_LAST", raw)
        assert knobs.codec_channels_last() is on
    for raw, mode in (("timed", "timed"), ("all", "all"), ("no", "off")):
        monkeypatch.setenv("VOXRT_CODEC_FUSED_UNIT", raw)
        assert knobs.codec_fused_unit() == mode
    monkeypatch.setenv("VOXRT_CODEC_CHANNELS_LAST", "yes")
    with pytest.raises(ValueError, match="VOXRT_CODEC_CHANNELS_LAST='yes'; expected on or off"):
        knobs.check_env()
    monkeypatch.setenv("VOXRT_CODEC_CHANNELS_LAST", "on")
    monkeypatch.setenv("VOXRT_CODEC_FUSED_UNIT", "on")
    with pytest.raises(ValueError, match="VOXRT_CODEC_FUSED_UNIT='on'; expected off, timed or all"):
        knobs.check_env()
