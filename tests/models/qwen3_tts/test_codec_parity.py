"""Qwen3-TTS 12 Hz codec decoder: equal to the reference decoder, streaming equal to offline, strict loading.

The reference (qwen-tts 0.1.1, Qwen3TTSTokenizerV2Decoder) is built at a tiny random config that keeps the
released structure (1 semantic + 3 acoustic codebooks, pre-conv, sliding-window transformer with GQA and
head_dim * heads != hidden like the released 16 x 64 vs 512, two transposed-conv + ConvNeXt stages, two DAC
blocks) with a window of 8 frames so streams cross it several times.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from reference import T, TC
from safetensors.torch import load_file

from voxrt.engine.errors import CheckpointError
from voxrt.models.qwen3_tts import codec as codec_module
from voxrt.models.qwen3_tts.codec import Qwen3TTSCodec, load_codec

RELEASED_CONFIG = Path(codec_module.__file__).parent / "configs" / "qwen3-tts-tokenizer-12hz.json"

DECODER = dict(codebook_size=32, codebook_dim=16, latent_dim=24, hidden_size=32, intermediate_size=40,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=8,
               num_quantizers=4, upsample_rates=[3, 2], upsampling_ratios=[2, 2], decoder_dim=32,
               layer_scale_initial_scale=0.01, rms_norm_eps=1e-5, rope_theta=10000)
SAMPLES_PER_FRAME = 3 * 2 * 2 * 2
# A tiny Mimi encoder, only so that the saved checkpoint has the real codec layout (encoder.* + decoder.*).
ENCODER = dict(hidden_size=16, num_filters=4, upsampling_ratios=[3, 2], num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=2, head_dim=8, intermediate_size=32, codebook_size=32, codebook_dim=8,
               num_quantizers=4, num_semantic_quantizers=1, vector_quantization_hidden_dimension=8,
               sliding_window=8, num_residual_layers=1, upsample_groups=16)
ATOL = 1e-5


def _randomize(module: torch.nn.Module, seed: int) -> None:
    """Non-trivial values on every parameter: SnakeBeta, layer scales and norms away from their inits,
    codebook usage counts positive, output mostly inside the clamp."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("cluster_usage"):
                p.copy_(torch.rand(p.shape, generator=gen) * 1.5 + 0.5)
            elif name.endswith("embedding_sum"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("scale.scale"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith(("alpha", "beta")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.1)
            elif "q_proj" in name or "k_proj" in name:  # sharper attention, so the window matters
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def _codes(batch: int, frames: int, seed: int) -> torch.Tensor:  # [B, T, K]
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, DECODER["codebook_size"], (batch, frames, DECODER["num_quantizers"]), generator=gen)


@pytest.fixture(scope="module")
def ref():
    torch.manual_seed(0)
    decoder = T.Qwen3TTSTokenizerV2Decoder(TC.Qwen3TTSTokenizerV2DecoderConfig(**DECODER)).eval()
    _randomize(decoder, seed=1)
    return decoder


@pytest.fixture(scope="module")
def codec(ref):
    ours = Qwen3TTSCodec.from_config(ref.config.to_dict()).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ours


def _ref_decode(ref, codes: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return ref(codes.transpose(1, 2)).squeeze(1)  # the reference takes [B, K, T], returns [B, 1, samples]


def test_state_dict_keys_and_shapes_equal_the_reference(ref, codec):
    ours = {k: tuple(v.shape) for k, v in codec.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    assert ours.keys() == theirs.keys()
    assert ours == theirs
    assert codec.samples_per_frame == SAMPLES_PER_FRAME == int(ref.total_upsample)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_offline_equals_reference_forward(ref, codec, attn):
    ref.set_attn_implementation(attn)
    codes = _codes(2, 30, seed=2)  # 30 frames: almost 4 windows
    expected = _ref_decode(ref, codes)
    got = codec.decode_offline(codes)
    assert got.shape == (2, 30 * SAMPLES_PER_FRAME)
    assert (expected.abs() < 1).float().mean() > 0.9  # a signal, not a clamped square wave
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    ref.set_attn_implementation("sdpa")


def test_the_window_matters(codec):
    """Guards the parity tests' sensitivity: a window one frame wider changes the audio far beyond ATOL."""
    codes = _codes(1, 30, seed=3)
    base = codec.decode_offline(codes)
    attns = [layer.self_attn for layer in codec.pre_transformer.layers]
    for attn in attns:
        attn.window += 1
    try:
        assert (codec.decode_offline(codes) - base).abs().max() > 1e3 * ATOL
    finally:
        for attn in attns:
            attn.window -= 1


def _stream(codec, codes, chunks, slot, state) -> torch.Tensor:
    out, start = [], 0
    for size in chunks:
        out.append(codec.decode_stream(codes[:, start : start + size], torch.tensor([slot]), state))
        assert out[-1].shape == (1, size * SAMPLES_PER_FRAME)
        start += size
    assert start == codes.shape[1]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("chunks", [(1, 2, 25, 2), (1,) * 30, (3, 7, 4, 9, 7), (30,)])
def test_streaming_equals_offline(codec, chunks):
    codes = _codes(1, 30, seed=4)
    state = codec.new_state(4, "cpu", torch.float32)
    for value in state.values():  # other slots hold garbage; a reset slot must not see any of it
        value.copy_(torch.randint_like(value, 0, 50) if value.dtype == torch.int64 else torch.randn_like(value))
    codec.reset_slots(state, torch.tensor([2]))
    torch.testing.assert_close(_stream(codec, codes, chunks, 2, state), codec.decode_offline(codes),
                               atol=ATOL, rtol=0)


def test_interleaved_requests_padding_rows_and_slot_reuse(codec):
    scratch = 4  # the last row is scratch for padding rows
    state = codec.new_state(scratch + 1, "cpu", torch.float32)
    a, b, c = _codes(1, 30, seed=5), _codes(1, 22, seed=6), _codes(1, 15, seed=7)
    pad = _codes(2, 30, seed=8)
    out = {"a": [], "b": []}
    # (rows as (name, start), frames): A in slot 0, B in slot 3, None = a padding row on the scratch slot.
    schedule = [([("a", 0), None], 1), ([("a", 1), ("b", 0)], 2), ([None, ("b", 2), None], 1),
                ([("b", 3), ("a", 3)], 7), ([("a", 10), ("b", 10)], 12), ([("a", 22), None], 8)]
    seqs, slot_of = {"a": a, "b": b}, {"a": 0, "b": 3}
    for rows, frames in schedule:
        codes = torch.cat([seqs[r[0]][:, r[1] : r[1] + frames] if r else pad[:1, :frames] for r in rows])
        slots = torch.tensor([slot_of[r[0]] if r else scratch for r in rows])
        audio = codec.decode_stream(codes, slots, state)
        for row, r in enumerate(rows):
            if r:
                out[r[0]].append(audio[row])
    for name, seq in seqs.items():
        torch.testing.assert_close(torch.cat(out[name])[None], codec.decode_offline(seq), atol=ATOL, rtol=0)
    assert state["frames"].tolist()[:4] == [30, 0, 0, 22]

    codec.reset_slots(state, torch.tensor([0]))  # A finished; C reuses its slot next to B's stale state
    got = [codec.decode_stream(c[:, :2], torch.tensor([0]), state),
           codec.decode_stream(torch.cat([c[:, 2:], pad[1:, :13]]), torch.tensor([0, scratch]), state)[:1]]
    torch.testing.assert_close(torch.cat(got, dim=1), codec.decode_offline(c), atol=ATOL, rtol=0)


def test_state_is_one_buffer_gathered_at_once_and_a_plain_dict_streams_the_same(codec):
    """The per-layer state tensors are views of CodecState.flat (one gather a call); a plain dict of the same
    tensors (any layout) takes the per-tensor path and decodes the same."""
    from voxrt.models.qwen3_tts.codec import CodecState

    state = codec.new_state(3, "cpu", torch.float32)
    assert isinstance(state, CodecState) and len(state.layout) == len(state) - 1
    for key, offset, size, _ in state.layout:  # views of the flat buffer, side by side
        assert state[key].data_ptr() == state.flat[:, offset:].data_ptr() and state[key][0].numel() == size
    codes = _codes(2, 9, seed=11)
    plain = {key: value.clone() for key, value in state.items()}
    slots = torch.tensor([2, 0])
    for start, size in ((0, 2), (2, 7)):
        torch.testing.assert_close(codec.decode_stream(codes[:, start:start + size], slots, state),
                                   codec.decode_stream(codes[:, start:start + size], slots, plain), atol=0, rtol=0)
    for key in plain:
        torch.testing.assert_close(state[key], plain[key], atol=0, rtol=0)
    assert state.flat[1].abs().sum() == 0 and state.flat[2].abs().sum() > 0  # untouched row, advanced row
    codec.reset_slots(state, torch.tensor([2]))
    assert state.flat[2].abs().sum() == 0 and state["frames"].tolist() == [9, 0, 0]


def test_load_decoder_weights_is_strict_and_names_keys(ref):
    full = {f"decoder.{k}": v for k, v in ref.state_dict().items()}
    full["encoder.some.weight"] = torch.zeros(3)  # other parts of the codec checkpoint are ignored
    codec = Qwen3TTSCodec.from_config(ref.config.to_dict())
    codec.load_decoder_weights(full)
    codes = _codes(1, 12, seed=9)
    torch.testing.assert_close(codec.decode_offline(codes), _ref_decode(ref, codes), atol=ATOL, rtol=0)

    missing = dict(full)
    del missing["decoder.decoder.1.block.1.conv.weight"]
    with pytest.raises(CheckpointError, match=r"1 missing keys: decoder\.decoder\.1\.block\.1\.conv\.weight"):
        codec.load_decoder_weights(missing)
    extra = dict(full, **{"decoder.pre_transformer.bogus": torch.zeros(1)})
    with pytest.raises(CheckpointError, match=r"unexpected keys: decoder\.pre_transformer\.bogus"):
        codec.load_decoder_weights(extra)
    wrong = dict(full, **{"decoder.pre_conv.conv.bias": torch.zeros(5)})
    with pytest.raises(CheckpointError, match="pre_conv.conv.bias"):
        codec.load_decoder_weights(wrong)


def test_load_codec_from_a_checkpoint_in_the_released_layout(tmp_path):
    torch.manual_seed(0)
    config = TC.Qwen3TTSTokenizerV2Config(
        encoder_config=ENCODER, decoder_config=DECODER, encoder_valid_num_quantizers=4,
        decode_upsample_rate=SAMPLES_PER_FRAME, encode_downsample_rate=SAMPLES_PER_FRAME)
    model = T.Qwen3TTSTokenizerV2Model(config).eval()
    _randomize(model.decoder, seed=10)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["decoder_config"]["sliding_window"] == 8
    keys = load_file(str(tmp_path / "model.safetensors")).keys()
    assert any(k.startswith("encoder.") for k in keys) and any(k.startswith("decoder.") for k in keys)

    codec = load_codec(tmp_path)
    codes = _codes(2, 20, seed=11)
    codes[1, 15:] = -1  # the reference's padding: model.decode trims it, and decodes -1 as code 0
    with torch.no_grad():
        expected = model.decode(codes).audio_values  # list of [samples], codes given as [B, T, K]
    got = codec.decode_offline(codes)
    torch.testing.assert_close(got[0], expected[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(got[1, : 15 * SAMPLES_PER_FRAME], expected[1], atol=ATOL, rtol=0)

    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_codec(tmp_path)


def test_released_config_streams_without_host_syncs():
    """The released geometry on the meta device: any `.item()` or data-dependent shape would raise here."""
    cfg = json.loads(RELEASED_CONFIG.read_text())["decoder_config"]
    with torch.device("meta"):
        codec = Qwen3TTSCodec.from_config(cfg).to(torch.bfloat16)
    assert codec.samples_per_frame == 1920
    state = codec.new_state(9, "meta", torch.bfloat16)
    assert state["pre_transformer.layers.7.self_attn.k"].shape == (9, 16, 71, 64)  # W - 1 = 71 past frames
    assert state["decoder.6"].shape == (9, 96, 6) and state["decoder.1.block.1"].shape == (9, 768, 8)
    codes = torch.zeros(3, 4, 16, dtype=torch.long, device="meta")
    audio = codec.decode_stream(codes, torch.tensor([0, 8, 8], device="meta"), state)
    assert audio.shape == (3, 4 * 1920) and audio.dtype == torch.float32


@pytest.fixture
def triton_codec(codec):
    """The same codec with its SnakeBeta and output conv as Triton kernels (Triton's interpreter on the CPU),
    the biases folded and every conv with taps as products (what runs on CUDA, all of it on this tiny one)."""
    codec.set_kernel_impl("triton", output_kernel=True, conv_products="all")
    try:
        yield codec
    finally:
        codec.set_kernel_impl("torch")


@pytest.fixture
def folded_codec(codec):
    """The torch ops with the CUDA path's formulations: biases folded into the activations, 1x1 conv + bias +
    residual as one product, every conv with taps as products over channels-last rows."""
    codec.set_kernel_impl("torch", conv_products="all", fold=True)
    try:
        yield codec
    finally:
        codec.set_kernel_impl("torch")


def test_folded_products_offline_equal_reference_forward(ref, folded_codec):
    assert all(m.folded for m in folded_codec.modules() if type(m).__name__ in ("ResidualUnit", "DecoderBlock"))
    assert folded_codec.pre_transformer.fused  # packed, scale-folded transformer layers
    assert "table_cache" in folded_codec.quantizer.rvq_rest._buffers  # codebook entries computed once
    products = [m for m in folded_codec.modules() if type(m).__name__ == "CausalConv" and m.products]
    assert len(products) >= 8  # pre_conv, decoder[0], every residual unit's conv1, the output conv
    codes = _codes(2, 12, seed=7)
    torch.testing.assert_close(folded_codec.decode_offline(codes), _ref_decode(ref, codes), atol=ATOL, rtol=0)


@pytest.mark.parametrize("chunks", [(1, 2, 25, 2), (3, 7, 4, 9, 7)])
def test_folded_products_stream_equal_to_offline(folded_codec, chunks):
    codes = _codes(1, 30, seed=8)
    state = folded_codec.new_state(3, "cpu", torch.float32)
    torch.testing.assert_close(_stream(folded_codec, codes, chunks, 1, state), folded_codec.decode_offline(codes),
                               atol=ATOL, rtol=0)


def test_conv_products_rule(codec):
    """auto: every plain conv and transposed conv times cuDNN against products per shape ("timed"), never a
    depthwise one; "torch" keeps the reference ops; a bad value is a clear error."""
    layers = [m for m in codec.modules() if type(m).__name__ in ("CausalConv", "CausalTransConv")]
    try:
        codec.set_kernel_impl("triton")
        for m in layers:
            plain = type(m).__name__ == "CausalTransConv" or (m.conv.groups == 1 and m.context > 0)
            assert m.products == ("timed" if plain else False), m
        codec.set_kernel_impl("triton", conv_products="all")
        assert not any(m.products for m in layers if m.conv.groups != 1)
        assert all(m.products is True for m in layers if type(m).__name__ == "CausalTransConv")
        with pytest.raises(ValueError, match="conv_products"):
            codec.set_kernel_impl("triton", conv_products="some")
    finally:
        codec.set_kernel_impl("torch")
    assert not any(m.products for m in layers) and not any(
        m.folded for m in codec.modules() if type(m).__name__ == "ResidualUnit")


@pytest.mark.parametrize("kernel, stride", [(6, 3), (4, 4), (10, 5)])
def test_transposed_conv_products_equal_cudnn_offline_and_streaming(kernel, stride):
    from voxrt.models.qwen3_tts.codec_layers import Carry, CausalTransConv  # noqa: PLC0415

    torch.manual_seed(kernel)
    layer = CausalTransConv(6, 5, kernel, stride).eval()
    x = torch.randn(2, 6, 9)
    with torch.no_grad():
        expected = layer(x)
        tail = torch.randn(2, 5, kernel - stride)
        layer.state_key = ""
        carry = Carry({"": tail.clone()}) if kernel > stride else None
        streamed = layer(x, carry)
        handed = carry.updated[""].clone() if carry is not None else None
        layer.set_products(True)
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(layer(x, bias=False), expected - layer.conv.bias[:, None], atol=1e-5, rtol=0)
        if carry is not None:
            carry = Carry({"": tail.clone()})
            torch.testing.assert_close(layer(x, carry), streamed, atol=1e-5, rtol=0)
            torch.testing.assert_close(carry.updated[""], handed, atol=1e-5, rtol=0)


def test_triton_snake_codec_offline_equals_reference_forward(ref, triton_codec):
    codes = _codes(2, 12, seed=5)
    assert all(m.impl == "triton" for m in triton_codec.modules() if type(m).__name__ == "SnakeBeta")
    assert triton_codec._out_impl == "triton"  # the output conv through kernels/conv_out.py too
    torch.testing.assert_close(triton_codec.decode_offline(codes), _ref_decode(ref, codes), atol=ATOL, rtol=0)


def test_triton_snake_codec_streams_equal_to_offline(triton_codec):
    codes = _codes(1, 12, seed=6)
    state = triton_codec.new_state(3, "cpu", torch.float32)
    torch.testing.assert_close(_stream(triton_codec, codes, (2, 4, 1, 5), 1, state),
                               triton_codec.decode_offline(codes), atol=ATOL, rtol=0)


def test_tap_kernel_codec_equals_reference_offline_and_streaming(ref, codec, monkeypatch):
    """Every conv with taps as one Triton kernel (kernels/tap_conv.py; `VOXRT_CODEC_CONV=all`, Triton's interpreter
    here): the reference decoder's output offline, and streaming equal to offline."""
    monkeypatch.setenv("VOXRT_CODEC_CONV", "all")
    codec.set_kernel_impl("triton")
    try:
        convs = [m for m in codec.modules() if type(m).__name__ == "CausalConv"]
        assert any(m.tap_kernel == "all" for m in convs)
        assert all(m.tap_kernel == "off" for m in convs if m.context == 0 or m.conv.groups != 1)
        codes = _codes(2, 10, seed=8)
        offline = codec.decode_offline(codes)
        torch.testing.assert_close(offline, _ref_decode(ref, codes), atol=1e-4, rtol=0)
        state = codec.new_state(2, "cpu", torch.float32)
        torch.testing.assert_close(_stream(codec, codes[:1], (2, 3, 5), 0, state), offline[:1], atol=1e-4, rtol=0)
    finally:
        codec.set_kernel_impl("torch")
    assert all(m.tap_kernel == "off" for m in codec.modules() if type(m).__name__ == "CausalConv")


def _fake_cuda_input(time: int, batch: int = 2):
    """What `_timed_choice` reads of its input, as if a [batch, 8, time] bf16 tensor on CUDA (plain layout)."""
    from types import SimpleNamespace  # noqa: PLC0415

    return SimpleNamespace(shape=(batch, 8, time), dtype=torch.bfloat16, device=SimpleNamespace(type="cuda"),
                           dim=lambda: 3, stride=lambda i: (8 * time, time, 1)[i])


def test_the_timed_choice_takes_the_fastest_and_leaves_out_a_candidate_that_fails(monkeypatch, caplog):
    """On CUDA (faked here: the input's device and the timer) the choice is the fastest candidate, cached per
    shape; a candidate whose timing raises (a kernel that does not compile for the GPU) is left out with a
    warning instead of failing the engine's warm-up."""
    from types import SimpleNamespace  # noqa: PLC0415

    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    monkeypatch.setattr(codec_layers, "_time_ms", lambda fn, give_up_ms=None: fn())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    layer = SimpleNamespace(_choices={}, _losers=set())
    x = _fake_cuda_input(29)

    def broken():
        raise RuntimeError("out of resource: shared memory")
    candidates = {"cudnn": lambda: 2.0, "products": lambda: 1.0, "tap-kernel": broken}
    with caplog.at_level("WARNING", logger="voxrt.models.qwen3_tts"):
        assert codec_layers._timed_choice(layer, x, False, candidates) == "products"
    assert "tap-kernel failed (RuntimeError: out of resource" in caplog.text
    assert layer._choices == {((2, 8, 29), torch.bfloat16, False, False): "products"}
    candidates["tap-kernel"] = lambda: 0.5  # cached: not timed again
    assert codec_layers._timed_choice(layer, x, False, candidates) == "products"
    assert codec_layers._timed_choice(layer, x, True, candidates) == "tap-kernel"


def test_timed_products_route_by_the_cached_choice_and_fall_back_to_cudnn_on_cpu():
    """A "timed" conv runs cuDNN's op on the CPU (nothing timed or cached there), and follows a cached choice
    per input shape where one was measured (on CUDA); both give the plain conv's output."""
    from voxrt.models.qwen3_tts.codec_layers import CausalConv  # noqa: PLC0415

    torch.manual_seed(3)
    conv = CausalConv(8, 6, 7, dilation=3).eval()
    x = torch.randn(2, 8, 11)
    with torch.no_grad():
        expected = conv(x)
        conv.set_products("timed")
        torch.testing.assert_close(conv(x), expected, atol=1e-5, rtol=0)
        assert conv._choices == {}  # the CPU never times
        calls = []
        conv._products = lambda padded, bias: calls.append(padded.shape) or CausalConv._products(conv, padded, bias)
        conv._choices[((2, 8, 18 + 11), torch.float32, False, False)] = "products"
        torch.testing.assert_close(conv(x), expected, atol=1e-5, rtol=0)
        assert calls == [(2, 8, 29)]
        with pytest.raises(ValueError, match="set_products"):
            conv.set_products("sometimes")
        depthwise = CausalConv(8, 8, 7, groups=8)
        depthwise.set_products(True)
        assert depthwise.products is False  # grouped convs stay on cuDNN


def test_the_tap_kernel_is_a_third_timed_candidate_and_runs_every_call_when_forced():
    """`set_tap_kernel("timed")` adds the one-kernel conv (kernels/tap_conv.py) to the timed choice: the CPU still
    runs cuDNN's op (nothing timed), a cached choice of it routes there; "all" runs it every call (Triton's
    interpreter here). Every route gives the plain conv's output; grouped convs and bad modes are refused."""
    from voxrt.models.qwen3_tts.codec_layers import CausalConv  # noqa: PLC0415

    torch.manual_seed(4)
    conv = CausalConv(16, 24, 7, dilation=3).eval()
    x = torch.randn(2, 16, 13)
    with torch.no_grad():
        expected = conv(x)
        conv.set_products("timed")
        conv.set_tap_kernel("timed")
        calls = []
        conv._tap_kernel = lambda padded, bias: calls.append(padded.shape) or CausalConv._tap_kernel(conv, padded, bias)
        torch.testing.assert_close(conv(x), expected, atol=1e-5, rtol=0)
        assert calls == [] and conv._choices == {}  # the CPU never times: cuDNN's op
        conv._choices[((2, 16, 18 + 13), torch.float32, False, False)] = "tap-kernel"
        torch.testing.assert_close(conv(x), expected, atol=1e-4, rtol=1e-4)
        assert calls == [(2, 16, 31)]
        conv.set_tap_kernel("all")
        assert conv._choices == {}
        torch.testing.assert_close(conv(x), expected, atol=1e-4, rtol=1e-4)
        assert len(calls) == 2
        conv.set_tap_kernel("off")
        torch.testing.assert_close(conv(x), expected, atol=1e-5, rtol=0)
        assert len(calls) == 2
        with pytest.raises(ValueError, match="set_tap_kernel"):
            conv.set_tap_kernel("on")
        depthwise = CausalConv(8, 8, 7, groups=8)
        depthwise.set_tap_kernel("all")
        assert depthwise.tap_kernel == "off"  # grouped convs stay on cuDNN
        pointwise = CausalConv(8, 8, 1)
        pointwise.set_tap_kernel("all")
        assert pointwise.tap_kernel == "off"  # no taps, no context: a plain product


@pytest.mark.parametrize("setting", [dict(impl="torch", fold=False, conv_products="off"),
                                     dict(impl="torch", fold=True, conv_products="all"),
                                     dict(impl="triton", output_kernel=True, conv_products="all"),
                                     dict(impl="triton", conv_products="off", conv_kernel="all")])
def test_channels_last_decoder_equals_reference_offline_and_streaming(ref, codec, setting):
    """`channels_last=True`: the decoder blocks on [B, T, C] memory (cuDNN's channels-last convs, products over
    the samples' rows, the channels-last SnakeBeta kernel in Triton's interpreter, the tap kernel through its
    strides): the reference decoder's output offline, and streaming equal to offline, for the reference ops,
    the folded products and the Triton paths; the activations inside really are channels-last."""
    from voxrt.engine.runtime.kernels.snake import channels_last  # noqa: PLC0415

    codec.set_kernel_impl(channels_last=True, **setting)
    try:
        seen = []
        hooks = [m.register_forward_hook(lambda m, args, out: seen.append(channels_last(out)))
                 for m in codec.decoder.modules() if type(m).__name__ in ("ResidualUnit", "DecoderBlock")]
        codes = _codes(2, 10, seed=9)
        offline = codec.decode_offline(codes)
        for hook in hooks:
            hook.remove()
        assert seen and all(seen), seen
        torch.testing.assert_close(offline, _ref_decode(ref, codes), atol=1e-4, rtol=0)
        state = codec.new_state(2, "cpu", torch.float32)
        torch.testing.assert_close(_stream(codec, codes[:1], (2, 3, 5), 1, state), offline[:1], atol=1e-4, rtol=0)
    finally:
        codec.set_kernel_impl("torch")
    assert not codec._channels_last
    assert not any("weight_cl" in m._buffers for m in codec.modules())


def test_channels_last_layers_keep_the_layout_and_the_result():
    """Each layer alone on channels-last input (a [B, C, T] view of [B, T, C] memory): the same output as on
    plain input, channels-last again, through cuDNN's op, the products and (conv) the tap kernel, streaming
    state included."""
    from voxrt.engine.runtime.kernels.snake import channels_last  # noqa: PLC0415
    from voxrt.models.qwen3_tts.codec_layers import Carry, CausalConv, CausalTransConv  # noqa: PLC0415

    def cl(x):
        return x.transpose(1, 2).contiguous().transpose(1, 2)

    torch.manual_seed(6)
    with torch.no_grad():
        conv = CausalConv(16, 12, 7, dilation=3).eval()
        conv.state_key = "c"
        x, ctx = torch.randn(2, 16, 13), torch.randn(2, 16, 18)
        carry = Carry({"c": ctx.clone()})
        expected = conv(x, carry)
        handed = carry.updated["c"].clone()
        for products, tap in ((False, "off"), (True, "off"), (False, "all")):
            conv.set_products(products)
            conv.set_tap_kernel(tap)
            conv.set_channels_last(True)
            carry = Carry({"c": ctx.clone()})
            out = conv(cl(x), carry)
            assert channels_last(out), (products, tap)
            torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(carry.updated["c"], handed, atol=0, rtol=0)
        conv.set_channels_last(False)
        assert "weight_cl" not in conv._buffers
        pointwise = CausalConv(16, 12, 1).eval()
        assert not channels_last(pointwise(cl(x)))  # off: the plain formulation whatever the input's strides
        pointwise.set_channels_last(True)
        out = pointwise(cl(x))
        assert channels_last(out)
        torch.testing.assert_close(out, pointwise(x), atol=1e-5, rtol=1e-5)
        for kernel, stride in ((6, 3), (4, 4)):
            trans = CausalTransConv(16, 10, kernel, stride).eval()
            trans.state_key = "t"
            tail = torch.randn(2, 10, kernel - stride)
            carry = Carry({"t": tail.clone()}) if kernel > stride else None
            expected = trans(x, carry)
            handed = carry.updated["t"].clone() if carry is not None else None
            for products in (False, True):
                trans.set_products(products)
                trans.set_channels_last(True)
                carry = Carry({"t": tail.clone()}) if kernel > stride else None
                out = trans(cl(x), carry)
                assert channels_last(out), (kernel, products)
                torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
                if carry is not None:
                    torch.testing.assert_close(carry.updated["t"], handed, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("channels_last", [False, True])
def test_fused_residual_units_equal_reference_offline_and_streaming(ref, codec, channels_last, monkeypatch):
    """`fused_units="all"`: every folded residual unit as one kernel (kernels/residual_unit.py, Triton's
    interpreter here), in either layout: the reference decoder's output offline, streaming equal to offline;
    every unit really ran the kernel."""
    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    calls = []
    real = codec_layers.residual_unit
    monkeypatch.setattr(codec_layers, "residual_unit", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    codec.set_kernel_impl("triton", conv_kernel="off", fused_units="all", channels_last=channels_last)
    try:
        units = [m for m in codec.modules() if type(m).__name__ == "ResidualUnit"]
        assert units and all(m.fused == "all" for m in units)
        codes = _codes(2, 10, seed=10)
        offline = codec.decode_offline(codes)
        assert len(calls) == len(units)
        torch.testing.assert_close(offline, _ref_decode(ref, codes), atol=1e-4, rtol=0)
        state = codec.new_state(2, "cpu", torch.float32)
        torch.testing.assert_close(_stream(codec, codes[:1], (2, 3, 5), 0, state), offline[:1], atol=1e-4, rtol=0)
        assert len(calls) == 4 * len(units)
    finally:
        codec.set_kernel_impl("torch")
    assert all(m.fused == "off" for m in codec.modules() if type(m).__name__ == "ResidualUnit")


def test_a_timed_residual_unit_routes_by_its_cached_choice():
    """`set_fused("timed")`: the CPU runs the unfused folded unit (nothing timed), a cached "fused" choice for
    the input shape routes to the kernel; both give the reference composition's output, and the unfused path
    still writes x in place. Units wider than the kernel's 256 channels, unfolded ones, or ones whose Snake
    is not the kernel, stay "off"; a bad mode is refused."""
    from voxrt.models.qwen3_tts.codec_layers import ResidualUnit  # noqa: PLC0415

    torch.manual_seed(5)
    unit = ResidualUnit(16, 3).eval()
    with torch.no_grad():
        for p in unit.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
        x = torch.randn(2, 16, 21)
        expected = unit(x.clone())  # the reference composition
        unit.set_fused("all")
        assert unit.fused == "off"  # not folded yet
        for act in (unit.act1, unit.act2):
            act.set_impl("triton")
        unit.set_folded(True)
        unit.set_fused("timed")
        assert unit.fused == "timed"
        calls = []
        unit._fused = lambda padded, x, w: calls.append(1) or ResidualUnit._fused(unit, padded, x, w)
        torch.testing.assert_close(unit(x.clone()), expected, atol=1e-4, rtol=1e-4)
        assert calls == [] and unit._choices == {}
        unit._choices[((2, 16, 18 + 21), torch.float32, True, False)] = "fused"
        torch.testing.assert_close(unit(x.clone()), expected, atol=1e-4, rtol=1e-4)
        assert calls == [1]
        with pytest.raises(ValueError, match="set_fused"):
            unit.set_fused("on")
        wide = ResidualUnit(264, 1)
        for act in (wide.act1, wide.act2):
            act.set_impl("triton")
        wide.set_folded(True)
        wide.set_fused("all")
        assert wide.fused == "off"


def test_the_codec_defaults_by_implementation(codec, monkeypatch):
    """With the kernels ("triton", what CUDA runs) the decoder is channels-last unless VOXRT_CODEC_CHANNELS_LAST=off,
    the fused units follow VOXRT_CODEC_FUSED_UNIT (off by default); the reference ops ("torch", the CPU's path)
    keep the plain layout and no fused unit whatever the knobs say."""
    for name in ("VOXRT_CODEC_CONV", "VOXRT_CODEC_CHANNELS_LAST", "VOXRT_CODEC_FUSED_UNIT"):
        monkeypatch.delenv(name, raising=False)
    units = [m for m in codec.modules() if type(m).__name__ == "ResidualUnit"]
    try:
        codec.set_kernel_impl("triton")
        assert codec._channels_last and all(m.fused == "off" for m in units)
        assert all(m.cl for m in codec.decoder.modules() if type(m).__name__ in ("CausalConv", "CausalTransConv"))
        assert not any(m.cl for m in codec.upsample.modules() if type(m).__name__ in ("CausalConv", "CausalTransConv"))
        monkeypatch.setenv("VOXRT_CODEC_CHANNELS_LAST", "off")
        monkeypatch.setenv("VOXRT_CODEC_FUSED_UNIT", "timed")
        codec.set_kernel_impl("triton")
        assert not codec._channels_last and all(m.fused == "timed" for m in units)
        monkeypatch.setenv("VOXRT_CODEC_CHANNELS_LAST", "on")
        codec.set_kernel_impl("torch")
        assert not codec._channels_last and all(m.fused == "off" for m in units)
    finally:
        codec.set_kernel_impl("torch")


def test_the_give_up_judges_a_call_after_the_first():
    """A first eager call pays lazy initialisation (cuDNN built its plan for a new shape in 20-144 ms on an H100,
    for kernels that then ran in under a millisecond): the give-up judges the second call, so one slow first call
    no longer cuts a fast kernel; a kernel slow on every call is still cut short, on its second call."""
    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    def calls(*ms):
        made = []
        times = iter(ms)

        def call_ms():
            made.append(1)
            return next(times)
        return call_ms, made

    call_ms, made = calls(46.0, 0.9)  # a plan built on the first call, then the kernel itself
    assert codec_layers._eager_past(call_ms, give_up_ms=20.0) is None and len(made) == 2  # timed in full
    call_ms, made = calls(1100.0, 1080.0)  # slow on every call
    assert codec_layers._eager_past(call_ms, give_up_ms=20.0) == 1080.0 and len(made) == 2
    call_ms, made = calls(46.0)  # the first candidate has no bound: one warm-up call, then the graph
    assert codec_layers._eager_past(call_ms, give_up_ms=None) is None and len(made) == 1


def test_the_engine_log_line_says_what_the_timed_choices_picked_and_left_out():
    """After the graphs are captured the engine logs the program's `warmup_note`: for Qwen3-TTS what the codec's
    timed choices picked per shape and which layers cut a candidate short. A start-up that judged cuDNN by its
    first call (its plan built then) left it out of whole layers; this line shows it without debug logging."""
    from tiny_talker import cached_checkpoint, load_program  # noqa: PLC0415

    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    program = load_program(cached_checkpoint(seed=0).directory)  # its own codec: the choices set here stay here
    assert program.warmup_note() is None  # nothing timed (the CPU)
    convs = [m for m in program.codec.modules() if isinstance(m, codec_layers.CausalConv)]
    assert len(convs) >= 3
    for conv, picked, left_out in zip(convs, ({("a",): "cudnn", ("b",): "products"}, {("a",): "products"},
                                              {("c",): "cudnn"}),
                                   (set(), {("cudnn", 658), ("cudnn", 694)},
                                    {("cudnn", None), ("tap-kernel", 646)})):
        conv._choices, conv._losers = picked, left_out  # as set_products leaves them after timing
    assert program.warmup_note() == ("codec convs, 4 shapes timed: cudnn 2, products 2; cut short (20x slower) "
                                     "and left out of a layer's other batch sizes at that length: cudnn in 2 "
                                     "layers (2 lengths, every length in 1), tap-kernel in 1 layer (1 length)")
    assert codec_layers.timed_choices(torch.nn.Linear(2, 2)) is None


def test_a_candidate_far_slower_than_the_best_is_cut_short_and_not_timed_again(monkeypatch):
    """The fallback (cuDNN) is timed last, told to give up past 20x the best so far (and 20 ms); one that lost
    by 20x at a shape of a layer is not timed at the layer's other batch sizes of that length (cuDNN's 1.1 s
    channels-last kernel for one released conv cost the start-up tens of seconds) but is at another length
    (cuDNN took 44 ms a call at one length of a 192-channel conv and won at another), unless its call took over
    250 ms; a re-set layer times everything again."""
    from types import SimpleNamespace  # noqa: PLC0415

    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    timed = []

    def fake_time(fn, give_up_ms=None):
        name, ms = fn()
        timed.append((name, give_up_ms))
        return ms if give_up_ms is None else min(ms, give_up_ms + 1)
    monkeypatch.setattr(codec_layers, "_time_ms", fake_time)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    layer = SimpleNamespace(_choices={}, _losers=set())

    x = _fake_cuda_input
    candidates = {"cudnn": lambda: ("cudnn", 1100.0), "products": lambda: ("products", 1.4),
                  "tap-kernel": lambda: ("tap-kernel", 1.2)}
    assert codec_layers._timed_choice(layer, x(29), False, candidates) == "tap-kernel"
    assert timed == [("products", None), ("tap-kernel", 28.0), ("cudnn", 24.0)]  # max(20 x best, 20 ms)
    assert layer._losers == {("cudnn", 29)}
    timed.clear()
    assert codec_layers._timed_choice(layer, x(29, batch=1), False, candidates) == "tap-kernel"
    assert [name for name, _ in timed] == ["products", "tap-kernel"]  # not timed again at this length
    timed.clear()
    candidates["cudnn"] = lambda: ("cudnn", 0.9)  # at another length it wins
    assert codec_layers._timed_choice(layer, x(31), False, candidates) == "cudnn"
    assert [name for name, _ in timed] == ["products", "tap-kernel", "cudnn"]
    assert layer._losers == {("cudnn", 29)}
    layer._losers = set()  # what set_products / set_tap_kernel / set_fused do
    timed.clear()
    codec_layers._timed_choice(layer, x(29, batch=4), False, candidates)
    assert [name for name, _ in timed] == ["products", "tap-kernel", "cudnn"]

    # a call past LAYER_GIVE_UP_MS (250 ms) leaves the candidate out of every length of the layer: seconds of
    # start-up a length for a kernel that never won (cuDNN's 355-1,110 ms calls at the 384-channel dilation-9 conv)
    layer = SimpleNamespace(_choices={}, _losers=set())
    slow = {"cudnn": lambda: ("cudnn", 1100.0), "products": lambda: ("products", 14.0)}
    assert codec_layers._timed_choice(layer, x(40), False, slow) == "products"
    assert layer._losers == {("cudnn", None)}  # its call: min(1100, 280 + 1) = 281 ms
    timed.clear()
    slow["cudnn"] = lambda: ("cudnn", 0.5)
    assert codec_layers._timed_choice(layer, x(50), False, slow) == "products"
    assert [name for name, _ in timed] == ["products"]


def test_timed_choices_saved_and_restored_route_a_later_codec_the_same_way(codec, monkeypatch):
    """What the timed convs chose (`saved_choices`, as JSON) goes back into a codec whose choices were reset
    (`restore_choices`, runtime/tuning_cache.py's restore at the next start): those shapes follow it without timing,
    and the audio is the reference's. Entries for a missing layer, another formulation, a bad dtype or a malformed
    row are left out; a layer that does not time takes none."""
    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    layers = [m for m in codec.modules() if isinstance(m, (codec_layers.CausalConv, codec_layers.CausalTransConv))]
    codes = _codes(1, 12, seed=11)
    reference = codec.decode_offline(codes)

    def picks_products(layer, x, flag, candidates):  # a GPU's timing that found products fastest at every shape
        key = (tuple(x.shape), x.dtype, flag, codec_layers.channels_last(x))
        return layer._choices.setdefault(key, "products")

    try:
        for m in layers:
            m.set_products("timed")
        timed = [m for m in layers if m.products == "timed"]
        assert timed
        with monkeypatch.context() as patch:
            patch.setattr(codec_layers, "_timed_choice", picks_products)
            with torch.no_grad():
                _stream(codec, codes, (2, 10), 0, codec.new_state(1, "cpu", torch.float32))
        saved = json.loads(json.dumps(codec_layers.saved_choices(codec)))
        total = sum(len(m._choices) for m in timed)
        assert total > 0 and sum(len(v) for v in saved.values()) == total
        for m in layers:
            m.set_products("timed")  # a new start: nothing chosen
        assert codec_layers.saved_choices(codec) == {}
        name, entries = next(iter(saved.items()))
        noisy = dict(saved, **{"no.such.layer": entries,
                               name: entries + [[[1, 2, 3], "float32", False, False, "tap-kernel"],
                                                [[1, 2, 3], "not_a_dtype", False, False, "products"],
                                                [[1, 2, 3], "nn", False, False, "products"], ["short"], "junk"]})
        assert codec_layers.restore_choices(codec, noisy) == total
        assert codec_layers.restore_choices(codec, saved) == 0  # already there: nothing taken twice
        assert codec_layers.restore_choices(codec, "junk") == 0
        assert codec_layers.saved_choices(codec) == saved
        products = []
        for cls in (codec_layers.CausalConv, codec_layers.CausalTransConv):
            real = cls._products
            monkeypatch.setattr(cls, "_products", lambda self, *a, real=real: products.append(1) or real(self, *a))
        with torch.no_grad():
            out = _stream(codec, codes, (2, 10), 0, codec.new_state(1, "cpu", torch.float32))
        assert len(products) == total  # every restored shape ran its choice, as the timing had it
        torch.testing.assert_close(out, reference, atol=ATOL, rtol=0)
        for m in layers:
            m.set_products(False)
        assert codec_layers.restore_choices(codec, saved) == 0  # layers that do not time take no choice
    finally:
        codec.set_kernel_impl("torch")


def test_the_program_keys_saves_and_restores_its_codec_choices(monkeypatch, tmp_path):
    """Qwen3-TTS's tuning hooks (runtime/tuning_cache.py): its key names the codec's code and the VOXRT_CODEC_*
    settings (another setting: another file), its state is the codec's timed choices, and a second program takes
    them back through the cache file as the runner does around its graph capture."""
    from tiny_talker import cached_checkpoint, load_program  # noqa: PLC0415

    from voxrt.engine.runtime.tuning_cache import TuningCache  # noqa: PLC0415
    from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

    for name in [k for k in os.environ if k.startswith("VOXRT_CODEC_")]:
        monkeypatch.delenv(name)
    directory = cached_checkpoint(seed=0).directory
    first, second = load_program(directory), load_program(directory)
    key = first.tuning_key()
    assert key["name"] == "qwen3-tts" and len(key["codec_code"]) == 16 and key["settings"] == {}
    monkeypatch.setenv("VOXRT_CODEC_CONV", "timed")
    assert first.tuning_key()["settings"] == {"VOXRT_CODEC_CONV": "timed"}
    monkeypatch.delenv("VOXRT_CODEC_CONV")
    assert first.tuning_state() == {}  # nothing timed (the CPU)
    conv = next(m for m in first.codec.modules() if isinstance(m, codec_layers.CausalConv) and m.context > 0)
    name = next(n for n, m in first.codec.named_modules() if m is conv)
    for program in (first, second):
        for m in program.codec.modules():
            if isinstance(m, (codec_layers.CausalConv, codec_layers.CausalTransConv)):
                m.set_products("timed")
    conv._choices[((2, conv.conv.in_channels, 40), torch.float32, False, False)] = "products"  # as a GPU's timing
    env = {"VOXRT_TUNING_CACHE": str(tmp_path)}
    assert TuningCache.for_program(first, torch.device("cpu"), "lanes off", environ=env).save() is not None
    cache = TuningCache.for_program(second, torch.device("cpu"), "lanes off", environ=env)
    assert cache.restore() == 1
    twin = dict(second.codec.named_modules())[name]
    assert twin._choices == {((2, conv.conv.in_channels, 40), torch.float32, False, False): "products"}
    assert second.tuning_state() == first.tuning_state() == {"codec": {name: [[[2, conv.conv.in_channels, 40],
                                                                                "float32", False, False, "products"]]}}
    assert second.restore_tuning("junk") == 0
