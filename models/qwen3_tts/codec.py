"""The Qwen3-TTS 12 Hz codec decoder ("speech tokenizer" decoder) as a streaming, batched codec.

Reference: Qwen3TTSTokenizerV2Decoder in qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py
(qwen-tts 0.1.1). Codes [B, T, K] (K = 16: 1 semantic + 15 acoustic codebooks) go through
  split RVQ dequantization (codec_quantizer.py)              -> [B, codebook_dim, T]
  pre_conv: causal conv 3                                    -> [B, latent, T]
  pre_transformer: sliding-window transformer                -> [B, latent, T]       (codec_transformer.py)
  upsample: per ratio, transposed conv (k = s) + ConvNeXt    -> [B, latent, T * 4]   (codec_layers.py)
  decoder: causal conv 7, DAC-style blocks (SnakeBeta, transposed conv 2r/r, dilated residual units),
           SnakeBeta, causal conv 7 -> 1 channel             -> [B, 1, T * 1920]
and the waveform is clamped to [-1, 1]. Parameter names equal the reference decoder's state_dict keys (they
sit under `decoder.` in the codec checkpoint).

Streaming. Every layer is causal: a frame's samples depend only on its own and earlier codes, so decoding
chunk by chunk with carried state equals decoding the whole sequence (`decode_offline`, i.e. the reference
forward) and each frame's 1920 samples are final as soon as its codes are in; nothing is held back. The
state is one row per slot in device tensors (see codec_layers.py and codec_transformer.py for what each
layer carries): every causal conv's last (k-1)*d inputs, every transposed conv's overlap tail (K - s
samples), each attention layer's rotated keys and values of the last W - 1 frames, and the frames seen.
`decode_stream` gathers the rows of the batch's slots, runs, and scatters the advanced rows back; its shapes
depend only on (B, F) and it never synchronizes with the host, so it can be captured in a CUDA graph.
Slots in one call must be distinct, except that padding rows may all share a scratch slot (whatever lands
there is garbage by design). The reference's own `chunked_decode` (300-frame chunks re-decoded with 25
frames of context, positions restarting per chunk) is an approximation of the forward; we match the forward.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from voxrt.engine.errors import CheckpointError
from voxrt.engine.runtime.kernels.conv_out import mono_conv_clamp
from voxrt.engine.runtime.knobs import codec_channels_last, codec_conv, codec_fused_unit
from voxrt.models.common.checkpoint import key_listing
from voxrt.models.qwen3_tts.codec_layers import (Carry, CausalConv, CausalTransConv, DecoderBlock, ResidualUnit,
                                                 SnakeBeta, StatefulLayer, UpsampleStage)
from voxrt.models.qwen3_tts.codec_quantizer import SplitResidualVectorQuantizer
from voxrt.models.qwen3_tts.codec_transformer import FRAMES_KEY, CodecTransformer

CHECKPOINT_PREFIX = "decoder."  # the decoder's keys in the codec checkpoint (Qwen3TTSTokenizerV2Model.decoder)


@dataclass(frozen=True)
class CodecConfig:
    """The `decoder_config` section of the codec's config.json (Qwen3TTSTokenizerV2DecoderConfig). Defaults
    are the reference class's, NOT the released sizes (hidden 512, latent 1024, codebook_dim 512 there)."""

    codebook_dim: int
    codebook_size: int = 2048
    hidden_size: int = 1024
    latent_dim: int = 1024
    rope_theta: float = 10000.0
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int | None = None  # the reference falls back to hidden_size // num_attention_heads
    attention_bias: bool = False
    sliding_window: int = 72
    intermediate_size: int = 3072
    hidden_act: str = "silu"
    layer_scale_initial_scale: float = 0.01
    rms_norm_eps: float = 1e-5
    num_hidden_layers: int = 8
    num_quantizers: int = 16
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536

    @classmethod
    def from_dict(cls, cfg: dict) -> CodecConfig:
        if "codebook_dim" not in cfg:
            raise CheckpointError("codec decoder_config lacks 'codebook_dim'")
        if cfg.get("rope_scaling"):
            raise CheckpointError(f"codec rope_scaling {cfg['rope_scaling']!r} is not supported (default rotary only)")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in cfg.items() if k in known}  # transformers' bookkeeping keys are ignored
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in values:
                values[key] = tuple(values[key])
        config = cls(**values)
        config.validate()
        return config

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        if self.hidden_act != "silu":
            raise CheckpointError(f"codec hidden_act {self.hidden_act!r} is not supported (silu only)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError("codec num_attention_heads must be a multiple of num_key_value_heads")
        if self.decoder_dim % 2 ** len(self.upsample_rates):
            raise CheckpointError("codec decoder_dim must halve once per upsample rate")
        if self.sliding_window < 1 or self.num_quantizers < 2 or self.codebook_dim % 2:
            raise CheckpointError("codec sliding_window >= 1, num_quantizers >= 2 and an even codebook_dim expected")


class Qwen3TTSCodec(nn.Module):
    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.pre_transformer = CodecTransformer(
            cfg.latent_dim, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.attention_head_dim, cfg.sliding_window, cfg.attention_bias,
            cfg.rms_norm_eps, cfg.layer_scale_initial_scale, cfg.rope_theta)
        self.quantizer = SplitResidualVectorQuantizer(cfg.num_quantizers, cfg.codebook_dim // 2, cfg.codebook_dim,
                                                      cfg.codebook_size)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.upsample = nn.ModuleList(UpsampleStage(cfg.latent_dim, r) for r in cfg.upsampling_ratios)
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [CausalConv(cfg.latent_dim, cfg.decoder_dim, 7)]
            + [DecoderBlock(dims[i], dims[i + 1], rate) for i, rate in enumerate(cfg.upsample_rates)]
            + [SnakeBeta(dims[-1]), CausalConv(dims[-1], 1, 7)])
        # Name each stateful layer by its module path; its state tensors are keyed by that path.
        self._state_shapes: dict[str, tuple[int, ...]] = {}
        for name, module in self.named_modules():
            if isinstance(module, StatefulLayer) and module.state_shapes():
                module.state_key = name
                for suffix, shape in module.state_shapes().items():
                    self._state_shapes[name + suffix] = shape

    @classmethod
    def from_config(cls, cfg: dict) -> Qwen3TTSCodec:
        """From the `decoder_config` dict of the codec's config.json."""
        return cls(CodecConfig.from_dict(cfg))

    @property
    def samples_per_frame(self) -> int:  # 1920 released: 24 kHz at 12.5 frames/s
        return math.prod(self.cfg.upsample_rates) * math.prod(self.cfg.upsampling_ratios)

    @property
    def num_quantizers(self) -> int:
        return self.cfg.num_quantizers

    # ---- weights -----------------------------------------------------------------------------------------

    def load_decoder_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load strictly from a full codec checkpoint state dict (keys `decoder.*`; others are ignored)."""
        own = {k[len(CHECKPOINT_PREFIX):]: v for k, v in state.items() if k.startswith(CHECKPOINT_PREFIX)}
        expected = set(self.state_dict())
        missing = sorted(CHECKPOINT_PREFIX + k for k in expected - own.keys())
        unexpected = sorted(CHECKPOINT_PREFIX + k for k in own.keys() - expected)
        if missing or unexpected:
            raise CheckpointError("codec checkpoint does not match the decoder config: "
                                  f"{key_listing('missing', missing)}; {key_listing('unexpected', unexpected)}")
        try:
            self.load_state_dict(own, strict=True)
        except RuntimeError as exc:  # shape mismatches
            raise CheckpointError(f"codec checkpoint does not match the decoder config: {exc}") from exc

    # ---- decoding ----------------------------------------------------------------------------------------

    @torch.no_grad()
    def decode_offline(self, codes: torch.Tensor) -> torch.Tensor:
        """Whole sequences, no state: [B, T, K] -> [B, T * samples_per_frame], the reference forward's output
        (which takes codes as [B, K, T])."""
        return self._decode(codes, None)

    def new_state(self, num_rows: int, device: torch.device | str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Zeroed streaming state, one row per slot (a zero row is a fresh request). Every tensor but the frame
        counts is a view of one [num_rows, total] buffer (CodecState.flat), so a call gathers a batch's rows
        in one kernel instead of one per layer (~36 fewer launches a call)."""
        return CodecState(self._state_shapes, num_rows, device, dtype)

    def reset_slots(self, state: dict[str, torch.Tensor], slots: torch.Tensor) -> None:
        """Make `slots` fresh: zero conv contexts and tails (= the offline zero padding) and zero frames seen
        (so their K/V rows are masked)."""
        values = [state.flat, state[FRAMES_KEY]] if isinstance(state, CodecState) else state.values()
        for value in values:
            value.index_fill_(0, slots, 0)

    @torch.no_grad()
    def decode_stream(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The next F frames of B requests: codes [B, F, K], slots [B] -> audio [B, F * samples_per_frame];
        reads and advances the slots' state rows."""
        if isinstance(state, CodecState):
            rows = state.gather(slots)
        else:  # a plain dict of tensors (any layout): one gather per tensor
            rows = {key: value.index_select(0, slots) for key, value in state.items()}
        carry = Carry(rows)  # rows [B, ...]
        audio = self._decode(codes, carry)
        assert carry.updated.keys() == state.keys(), "every state tensor must advance once per call"
        for key, value in carry.updated.items():
            state[key].index_copy_(0, slots, value.to(state[key].dtype))
        return audio

    def _decode(self, codes: torch.Tensor, carry: Carry | None) -> torch.Tensor:
        if codes.dim() != 3 or codes.shape[-1] != self.cfg.num_quantizers:
            raise ValueError(f"codes must be [B, T, {self.cfg.num_quantizers}], got {tuple(codes.shape)}")
        # Negative ids (the reference's -1 padding) decode as 0, like Qwen3TTSTokenizerV2Model.decode; ids past
        # the codebook are clamped too: an out-of-range gather is a device-side assert, which would take the
        # whole CUDA context (every request) down instead of one bad chunk.
        x = self.quantizer.decode(codes.clamp(min=0, max=self.cfg.codebook_size - 1))  # [B, codebook_dim, T]
        x = self.pre_conv(x, carry)  # [B, latent, T]
        x = self.pre_transformer(x.transpose(1, 2), carry).transpose(1, 2)  # [B, latent, T]
        for stage in self.upsample:
            x = stage(x, carry)  # [B, latent, T * r]
        *blocks, act, conv = self.decoder
        if self._channels_last:  # the decoder on [B, T, C] memory from here on (every layer keeps its input's layout)
            x = x.transpose(1, 2).contiguous().transpose(1, 2)
        for layer in blocks:
            x = layer(x, carry)
        # the last SnakeBeta into the last conv's padded input, then the conv to one channel, clamp, float32
        padded = conv.padded_input(x, carry, act=act)  # [B, C, context + T * spf]
        if self._out_impl == "torch":
            return mono_conv_clamp(padded, conv.conv.weight, conv.conv.bias)
        return mono_conv_clamp(padded, conv.conv.weight, conv.conv.bias, self._out_impl, self.out_weight_f32,
                               self.out_bias_f32)

    _out_impl = "torch"
    _channels_last = False

    def set_kernel_impl(self, impl: str, output_kernel: bool = False, conv_products: str = "auto",
                        fold: bool | None = None, conv_kernel: str | None = None,
                        channels_last: bool | None = None, fused_units: str | None = None) -> None:
        """"triton": SnakeBeta as one kernel each (on CUDA; voxrt/engine/runtime/kernels/snake.py); "torch": the
        reference's ops. `output_kernel` (with "triton"): the output conv (one channel, clamp, float32) as one
        kernel too (kernels/conv_out.py); off by default: on the H200 it bought 0.18 ms of a 20 ms chunk and
        cost 0.03 ms at the small shapes (bench/results/2026-12-02-codec).
        `fold` (default: on unless impl is "torch"): the decoder blocks' biases folded into the activations
        that read them, and each residual unit's 1x1 conv, its bias and the residual add as one product
        (codec_layers.ResidualUnit.set_folded); the pre-transformer's packed, scale-folded layers
        (CodecTransformer.set_fused); the codebook entries computed once (cache_table). `conv_products`:
        which convs run as cuBLAS products instead of cuDNN (CausalConv / CausalTransConv.set_products):
        "auto" (unless impl is "torch") every plain conv chooses per input shape by timing both once on
        CUDA (cuDNN hits a fallback kernel for one released shape and pays layout conversions at small
        shapes; it is faster for the narrow convs of big chunks); "all" every one (tests); "off" none.
        `conv_kernel`: the dilated convs as one Triton kernel each (CausalConv.set_tap_kernel: "off", "timed":
        a third candidate of the "auto" products' timed choice, "all"); default `VOXRT_CODEC_CONV` with impl
        "triton" (off unless set), "off" with "torch". `channels_last`: the decoder blocks on channels-last
        activations ([B, C, T] views of [B, T, C] memory: cuDNN's channels-last conv kernels, products over the
        samples' rows, the channels-last SnakeBeta kernel); default `VOXRT_CODEC_CHANNELS_LAST` with impl
        "triton" (on unless set off: 11% less chunk time on an H100, bench/results/2026-12-06-h100-codec-cl),
        off with "torch". `fused_units`: each folded residual unit of at most 256 channels as one Triton kernel
        (ResidualUnit.set_fused: "off", "timed": where it times faster than the unfused unit, "all"); default
        `VOXRT_CODEC_FUSED_UNIT` with impl "triton" (off unless set), "off" with "torch" or unfolded."""
        if conv_products not in ("auto", "all", "off"):
            raise ValueError(f"conv_products must be auto, all or off, got {conv_products!r}")
        for module in self.modules():
            if isinstance(module, SnakeBeta):
                module.set_impl(impl)
        fold = impl != "torch" if fold is None else fold
        for module in self.modules():
            if isinstance(module, DecoderBlock):
                module.set_folded(fold)
        self.pre_transformer.set_fused(fold)
        self.quantizer.rvq_first.cache_table(fold)
        self.quantizer.rvq_rest.cache_table(fold)
        products = {"all": True, "auto": "timed" if impl != "torch" else False, "off": False}[conv_products]
        if conv_kernel is None:
            conv_kernel = codec_conv() if impl == "triton" else "off"
        if channels_last is None:
            channels_last = codec_channels_last() if impl == "triton" else False
        self._channels_last = bool(channels_last)
        decoder_layers = set(self.decoder.modules())  # channels-last weights only where channels-last data runs
        for module in self.modules():
            if isinstance(module, (CausalConv, CausalTransConv)):
                module.set_products(products)
                module.set_channels_last(self._channels_last and module in decoder_layers)
            if isinstance(module, CausalConv):
                module.set_tap_kernel(conv_kernel)
        if fused_units is None:
            fused_units = codec_fused_unit() if impl == "triton" else "off"
        for module in self.modules():
            if isinstance(module, ResidualUnit):
                module.set_fused(fused_units if fold and impl != "torch" else "off")
        self._out_impl = impl if output_kernel else "torch"
        if self._out_impl != "torch":  # the output conv's weight and bias in float32, once (buffers: they move)
            out_conv = self.decoder[-1].conv
            with torch.no_grad():
                self.register_buffer("out_weight_f32", out_conv.weight.detach().float().reshape(
                    out_conv.in_channels, -1).contiguous(), persistent=False)
                self.register_buffer("out_bias_f32", out_conv.bias.detach().float().contiguous(), persistent=False)


class CodecState(dict):
    """The codec's streaming state: {key: [rows, *shape]} like a plain dict, where every tensor but the frame
    counts (int64) is a view of one buffer `flat` [rows, total] of the state's dtype (each row's tensors side
    by side), so the rows of a batch's slots are gathered by one index_select. Written back per key (the
    advanced values are views of each layer's own buffers; index_copy_ into a view writes the flat buffer)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], num_rows: int, device: torch.device | str,
                 dtype: torch.dtype) -> None:
        super().__init__()
        sizes = {key: math.prod(shape) for key, shape in shapes.items()}
        self.flat = torch.zeros(num_rows, sum(sizes.values()), device=device, dtype=dtype)
        self.layout: list[tuple[str, int, int, tuple[int, ...]]] = []
        offset = 0
        for key, shape in shapes.items():
            self.layout.append((key, offset, sizes[key], shape))
            self[key] = self.flat[:, offset:offset + sizes[key]].view(num_rows, *shape)
            offset += sizes[key]
        self[FRAMES_KEY] = torch.zeros(num_rows, dtype=torch.int64, device=device)

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rows of `slots`, {key: [B, *shape]}: two gathers (the flat buffer, the frame counts)."""
        picked = self.flat.index_select(0, slots)
        rows = {key: picked[:, offset:offset + size].view(len(slots), *shape)
                for key, offset, size, shape in self.layout}
        rows[FRAMES_KEY] = self[FRAMES_KEY].index_select(0, slots)
        return rows


def load_codec(directory: str | Path, device: torch.device | str = "cpu") -> Qwen3TTSCodec:
    """The codec from a directory in the released layout (`Qwen/Qwen3-TTS-Tokenizer-12Hz`, or a model's
    `speech_tokenizer/`): config.json with `decoder_config`, and model.safetensors (or an index of shards).
    Only the `decoder.*` tensors are read."""
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"codec config.json not found in {directory}")
    config = json.loads(config_path.read_text())
    if "decoder_config" not in config:
        raise CheckpointError(f"{config_path} has no 'decoder_config' (is it the 12 Hz codec's config?)")
    codec = Qwen3TTSCodec.from_config(config["decoder_config"])
    index_path = directory / "model.safetensors.index.json"
    if (directory / "model.safetensors").is_file():
        files = [directory / "model.safetensors"]
    elif index_path.is_file():
        files = sorted({directory / f for f in json.loads(index_path.read_text())["weight_map"].values()})
    else:
        raise CheckpointError(f"codec weights (model.safetensors) not found in {directory}")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            state.update({k: f.get_tensor(k) for k in f.keys() if k.startswith(CHECKPOINT_PREFIX)})
    codec.load_decoder_weights(state)
    return codec.to(device).eval()
