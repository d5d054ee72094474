"""The SNAC decoder (codes -> 24 kHz waveform), our module for the released `hubertsiuzdak/snac_24khz`.

Reference: `SNAC.decode` in the `snac` package 1.2.1 (snac/snac.py, layers.py, vq.py):

    quantizer.from_codes: per codebook i, embedding -> out_proj (1x1 conv, codebook_dim -> latent) ->
                          repeat_interleave(vq_strides[i]); summed          -> [B, latent, T]  (T latent frames)
    decoder.model:        depthwise conv 7 + 1x1 conv (or one conv 7), then per rate r a DecoderBlock
                          (Snake, transposed conv 2r / r, NoiseBlock, residual units with dilations 1, 3, 9),
                          Snake, conv 7 -> 1 channel, tanh                  -> [B, 1, T * prod(rates)]

Released 24 kHz config: latent 768 (48 * 2^4), decoder_dim 1024, rates 8 8 4 2 (512 samples a latent frame),
vq_strides 4 2 1 (codebook 0 holds one code per 4 latent frames: 2048 samples), no attention, noise on,
depthwise; 19.8 M parameters of which the decoder path read here has ~13 M.

Parameter names equal the reference's state_dict keys: the module is built with the same weight-normed convs
(torch.nn.utils.parametrizations.weight_norm), loaded strictly, then the norm is folded into plain weights
(`fold_weight_norm`, the same `_weight_norm(v, g, 0)` the reference computes on every call). The checkpoint's
encoder and the quantizers' in_proj (encoding only) are not read. Older exports that name the pair
weight_g / weight_v load too.

Noise. `NoiseBlock` adds `randn(B, 1, T) * linear(x)` on every call, also in eval mode: the reference decode
is random. `noise="random"` (the default) draws it as the reference does, in the same order and shapes, so
the same seed gives the same audio; `noise="off"` leaves it out (deterministic: the parity tests of
streaming, and a choice for serving).

Not causal: every conv pads both sides, so one latent frame moves the waveform up to `reach_samples` (4,757,
~9.3 latent frames) either way: snac_stream.py streams by the reference's window rule, snac_exact.py with
carried state and that lookahead (equal to this whole decode).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from voxrt.engine.errors import CheckpointError
from voxrt.models.common.checkpoint import key_listing

NOISE_MODES = ("random", "off")
_WN = ".parametrizations.weight.original"  # + "0" (g) / "1" (v)


@dataclass(frozen=True)
class SnacConfig:
    """config.json of a SNAC checkpoint (the `SNAC.__init__` arguments; defaults are the class's, the 32 kHz
    model's, NOT the 24 kHz release's)."""

    sampling_rate: int = 44100
    encoder_dim: int = 64
    encoder_rates: tuple[int, ...] = (3, 3, 7, 7)
    latent_dim: int | None = None
    decoder_dim: int = 1536
    decoder_rates: tuple[int, ...] = (7, 7, 3, 3)
    attn_window_size: int | None = 32
    codebook_size: int = 4096
    codebook_dim: int = 8
    vq_strides: tuple[int, ...] = (8, 4, 2, 1)
    noise: bool = True
    depthwise: bool = True

    @classmethod
    def from_dict(cls, cfg: dict) -> SnacConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:  # SNAC(**config) would refuse them too
            raise CheckpointError(f"SNAC config has unknown keys {unknown}; expected a subset of {sorted(known)}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()}
        config = cls(**values)
        config.validate()
        return config

    @property
    def latent(self) -> int:
        return self.latent_dim or self.encoder_dim * 2 ** len(self.encoder_rates)

    @property
    def samples_per_latent_frame(self) -> int:
        return math.prod(self.decoder_rates)

    @property
    def reach_samples(self) -> int:
        """How far (in output samples, either way) one latent frame's codes can move the waveform: the first
        conv's 3 latent frames, per block the transposed conv's r/2 and the residual units' 3 + 9 + 27 at that
        block's rate, and the last conv's 3 samples. 4,757 for the 24 kHz release."""
        spl = self.samples_per_latent_frame
        reach, rate = 3 * spl, 1
        for stride in self.decoder_rates:
            rate *= stride
            reach += (math.ceil(stride / 2) + 3 + 9 + 27) * spl // rate
        return reach + 3

    def validate(self) -> None:
        if self.attn_window_size is not None:
            raise CheckpointError(f"SNAC attn_window_size={self.attn_window_size}: decoders with local attention (the "
                                  "32 and 44 kHz models) are not supported; the 24 kHz model has none")
        if self.decoder_dim % 2 ** len(self.decoder_rates):
            raise CheckpointError("SNAC decoder_dim must halve once per decoder rate")
        if not self.vq_strides or any(s < 1 for s in self.vq_strides) or self.vq_strides[-1] != 1:
            raise CheckpointError(f"SNAC vq_strides {self.vq_strides}: the finest codebook must have stride 1")


class Snake1d(nn.Module):
    """x + 1 / (alpha + 1e-9) * sin(alpha * x)^2 per channel (snac/layers.py `snake`)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


def wn_conv(*args, **kwargs) -> nn.Module:
    return weight_norm(nn.Conv1d(*args, **kwargs))


def wn_trans_conv(*args, **kwargs) -> nn.Module:
    return weight_norm(nn.ConvTranspose1d(*args, **kwargs))


class NoiseBlock(nn.Module):
    """x + randn(B, 1, T) * linear(x) (snac/layers.py NoiseBlock); `mode` "off" returns x."""

    mode = "random"

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = wn_conv(dim, dim, kernel_size=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        if self.mode == "off":
            return x
        batch, _, time = x.shape
        noise = torch.randn((batch, 1, time), device=x.device, dtype=x.dtype)  # drawn first, as the reference
        return x + noise * self.linear(x)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int, groups: int, kernel: int = 7) -> None:
        super().__init__()
        pad = (kernel - 1) * dilation // 2
        self.block = nn.Sequential(
            Snake1d(dim), wn_conv(dim, dim, kernel_size=kernel, dilation=dilation, padding=pad, groups=groups),
            Snake1d(dim), wn_conv(dim, dim, kernel_size=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]; "same" padding: no crop needed
        return x + self.block(x)


class DecoderBlock(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, stride: int, noise: bool, groups: int) -> None:
        super().__init__()
        layers = [Snake1d(in_dim),
                  wn_trans_conv(in_dim, out_dim, kernel_size=2 * stride, stride=stride,
                                padding=math.ceil(stride / 2), output_padding=stride % 2)]
        if noise:
            layers.append(NoiseBlock(out_dim))
        layers += [ResidualUnit(out_dim, d, groups) for d in (1, 3, 9)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, C/2, T * stride]
        return self.block(x)


class Decoder(nn.Module):
    def __init__(self, cfg: SnacConfig) -> None:
        super().__init__()
        latent, dim = cfg.latent, cfg.decoder_dim
        if cfg.depthwise:
            layers = [wn_conv(latent, latent, kernel_size=7, padding=3, groups=latent), wn_conv(latent, dim, kernel_size=1)]
        else:
            layers = [wn_conv(latent, dim, kernel_size=7, padding=3)]
        out_dim = dim
        for i, stride in enumerate(cfg.decoder_rates):
            in_dim, out_dim = dim // 2**i, dim // 2 ** (i + 1)
            layers.append(DecoderBlock(in_dim, out_dim, stride, cfg.noise, groups=out_dim if cfg.depthwise else 1))
        layers += [Snake1d(out_dim), wn_conv(out_dim, 1, kernel_size=7, padding=3), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, latent, T] -> [B, 1, T * prod(rates)]
        return self.model(x)


class CodebookDecode(nn.Module):
    """The decoding half of snac/vq.py VectorQuantize: codebook lookup and out_proj (in_proj is encoding)."""

    def __init__(self, latent: int, codebook_size: int, codebook_dim: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.out_proj = wn_conv(codebook_dim, latent, kernel_size=1)
        self.codebook = nn.Embedding(codebook_size, codebook_dim)


class Quantizer(nn.Module):
    def __init__(self, cfg: SnacConfig) -> None:
        super().__init__()
        self.quantizers = nn.ModuleList(CodebookDecode(cfg.latent, cfg.codebook_size, cfg.codebook_dim, s)
                                        for s in cfg.vq_strides)

    def from_codes(self, codes: list[torch.Tensor]) -> torch.Tensor:
        """[B, T / stride_i] per codebook -> [B, latent, T] (ResidualVectorQuantize.from_codes)."""
        z_q = 0.0
        for quantizer, code in zip(self.quantizers, codes):
            z_p = nn.functional.embedding(code, quantizer.codebook.weight).transpose(1, 2)  # [B, D, T_i]
            z_q = z_q + quantizer.out_proj(z_p).repeat_interleave(quantizer.stride, dim=-1)
        return z_q


class SnacDecoder(nn.Module):
    """`quantizer` + `decoder` of a SNAC model: `decode(codes)` equals `SNAC.decode(codes)`."""

    def __init__(self, cfg: SnacConfig, noise: str = "random") -> None:
        super().__init__()
        self.cfg = cfg
        self.quantizer = Quantizer(cfg)
        self.decoder = Decoder(cfg)
        self.set_noise(noise)

    @property
    def sample_rate(self) -> int:
        return self.cfg.sampling_rate

    def set_noise(self, mode: str) -> None:
        if mode not in NOISE_MODES:
            raise ValueError(f"noise must be one of {NOISE_MODES}, got {mode!r}")
        self.noise = mode
        for module in self.modules():
            if isinstance(module, NoiseBlock):
                module.mode = mode

    @torch.no_grad()
    def decode(self, codes: list[torch.Tensor]) -> torch.Tensor:
        """Codes of each codebook [B, T / vq_strides[i]] (T latent frames) -> audio [B, 1, T * prod(rates)]."""
        if len(codes) != len(self.quantizer.quantizers):
            raise ValueError(f"expected {len(self.quantizer.quantizers)} codebooks, got {len(codes)}")
        return self.decoder(self.quantizer.from_codes(codes))

    # ---- weights -----------------------------------------------------------------------------------------

    @property
    def is_folded(self) -> bool:
        return not any(parametrize.is_parametrized(m) for m in self.modules())

    def load_reference_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load strictly from a whole SNAC state dict (its `quantizer.*` and `decoder.*` keys; the encoder and
        the in_proj convs are ignored), then fold the weight norm."""
        if self.is_folded:
            raise RuntimeError("weights are already folded; build a new SnacDecoder to load again")
        own = {_modern_key(k): v for k, v in state.items()
               if k.startswith(("decoder.", "quantizer.")) and ".in_proj." not in k}
        expected = set(self.state_dict())
        missing, unexpected = sorted(expected - own.keys()), sorted(own.keys() - expected)
        if missing or unexpected:
            raise CheckpointError("SNAC checkpoint does not match its config: "
                                  f"{key_listing('missing', missing, 8)}; {key_listing('unexpected', unexpected, 8)}")
        try:
            self.load_state_dict(own, strict=True)
        except RuntimeError as exc:  # shape mismatches
            raise CheckpointError(f"SNAC checkpoint does not match its config: {exc}") from exc
        self.fold_weight_norm()

    def fold_weight_norm(self) -> None:
        """Every weight-normed conv's weight computed once (g * v / ||v||, as the reference computes per call)."""
        for module in list(self.modules()):
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


def _modern_key(key: str) -> str:
    """torch.nn.utils.weight_norm's names (weight_g, weight_v) -> the parametrization's (original0, 1)."""
    for old, new in (("weight_g", "0"), ("weight_v", "1")):
        if key.endswith("." + old):
            return key[: -len(old) - 1] + _WN + new
    return key


WEIGHT_FILES = ("pytorch_model.bin", "model.safetensors")


def read_snac_state(directory: Path) -> dict[str, torch.Tensor]:
    """The weights of a SNAC repo directory: pytorch_model.bin (what `SNAC.from_pretrained` reads; loaded with
    weights_only, no pickled code runs) or model.safetensors."""
    for name in WEIGHT_FILES:
        path = directory / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file  # noqa: PLC0415

                return load_file(str(path))
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 (a truncated or foreign file: say which)
            raise CheckpointError(f"cannot read SNAC weights {path}: {exc}") from None
    raise CheckpointError(f"SNAC weights not found in {directory}: expected one of {', '.join(WEIGHT_FILES)}")


def load_snac(directory: str | Path, device: torch.device | str = "cpu", noise: str = "random") -> SnacDecoder:
    """The decoder from a directory in the released layout (config.json + pytorch_model.bin); see
    checkpoint.snac_dir for finding one in the Hugging Face cache."""
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"SNAC config.json not found in {directory}")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {config_path}: {exc}") from None
    model = SnacDecoder(SnacConfig.from_dict(config), noise=noise)
    model.load_reference_state(read_snac_state(directory))
    return model.to(device).eval()
