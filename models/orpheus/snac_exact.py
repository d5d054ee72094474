"""Streaming SNAC decode equal to the whole-sequence decode: every layer's context carried per slot, the output
held back by the decoder's reach. An alternative to snac_stream.WindowStreamer (the reference streamer's rule).

Why it is exact. Every conv of the decoder pads both sides ("same" convs of kernel k, dilation d pad
p = (k-1)d/2; the transposed convs of kernel 2s, stride s crop s/2 each side). Streamed, a conv keeps its
last 2p inputs per slot and turns n new inputs into n outputs that lag its input by p samples; a transposed
conv keeps its last input and lags by s/2 of its output rate; a residual unit delays its skip path by its
conv's p. The lags add up to `SnacConfig.reach_samples` (4,757 samples released: 2.32 frames of 2048), the
lookahead. What the whole decode pads with zeros, each streamed layer masks to zeros: its inputs before
time 0 (the warm-up of the layers before it) and, once `finish` has set the end, at or after the sequence's
length at that layer. Pointwise layers (Snake, the 1x1 convs, tanh, the noise) need nothing.

Against the window rule: each frame is decoded once, not four times; the first audio needs 3 frames, not 4,
and frame 0 and the last two frames are released too; the audio equals `SnacDecoder.decode` of the whole
sequence (float rounding aside; noise off, or the same noise realised differently).

Use: `decode_stream(codes [B, F, 7], slots, state)` -> [B, F * 2048], the next F * 2048 samples of each
slot's output stream, which starts 4,757 samples early: a slot's first `lookahead_samples` samples are
zeros to drop (the host counts samples; nothing is read back). After the last frame, `finish(slots, state)`
returns the remaining `lookahead_samples`; a request of N frames then has exactly N * 2048 samples. Shapes
depend only on (B, F) and nothing synchronizes with the host (graph-capturable); slots in one call must be
distinct, except padding rows on a scratch slot.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.models.orpheus.snac import DecoderBlock, NoiseBlock, ResidualUnit, Snake1d, SnacDecoder
from voxrt.models.orpheus.tokens import frames_to_codebooks

FRAMES_KEY, END_KEY = "frames", "end"
NO_END = 2**50  # frames: a stream whose end is not yet known


class _Carry:
    """One call's state rows (gathered for the batch's slots): layers take their context, give the next."""

    def __init__(self, rows: dict[str, torch.Tensor]) -> None:
        self.rows, self.updated = rows, {}

    def swap(self, key: str, x: torch.Tensor, keep: int) -> torch.Tensor:
        """[B, C, keep] carried + x [B, C, n] -> the concatenation; its last `keep` samples are carried on."""
        joined = torch.cat([self.rows[key], x], dim=-1)
        self.updated[key] = joined[..., joined.shape[-1] - keep :]
        return joined


class _Clock:
    """Times of a layer's input samples in this call: sample j of a stream at `rate` samples per latent frame,
    lagging by `delay` of its own samples, is at time seen * 4 * rate + j - delay (seen: frames before)."""

    def __init__(self, seen: torch.Tensor, end: torch.Tensor, latent_per_frame: int, num_latent: int) -> None:
        self.seen, self.end, self.lpf, self.num_latent = seen, end, latent_per_frame, num_latent
        self.rate, self.delay = 1, 0

    def mask(self, dtype: torch.dtype) -> torch.Tensor:
        """[B, 1, n]: 1 where the sample exists in the whole sequence (0 <= time < length), else 0."""
        n = self.num_latent * self.rate
        time = (self.seen * self.lpf * self.rate - self.delay)[:, None] + torch.arange(n, device=self.seen.device)
        valid = (time >= 0) & (time < (self.end * self.lpf * self.rate)[:, None])
        return valid[:, None, :].to(dtype)


class ExactStreamer:
    """Stateful streaming over a `SnacDecoder` (noise "off" for a deterministic output)."""

    def __init__(self, decoder: SnacDecoder) -> None:
        cfg = decoder.cfg
        if not decoder.is_folded:
            raise ValueError("fold the weight norm first (load_snac does)")
        if any(s % 2 for s in cfg.decoder_rates):
            raise ValueError(f"odd decoder rates {cfg.decoder_rates} pad asymmetrically; not supported")
        self.decoder = decoder
        self.latent_per_frame = cfg.vq_strides[0]  # 4 latent frames per Orpheus frame
        self.samples_per_frame = self.latent_per_frame * cfg.samples_per_latent_frame  # 2048
        self.lookahead_samples = cfg.reach_samples  # 4757
        self.flush_frames = math.ceil(self.lookahead_samples / self.samples_per_frame)  # 3
        self.shapes: dict[str, tuple[int, ...]] = {}
        for name, module in decoder.decoder.named_modules(prefix="decoder"):
            if isinstance(module, nn.Conv1d) and module.kernel_size[0] > 1:
                self.shapes[name] = (module.in_channels, (module.kernel_size[0] - 1) * module.dilation[0])
            elif isinstance(module, nn.ConvTranspose1d):
                self.shapes[name] = (module.in_channels, 1)
            elif isinstance(module, ResidualUnit):
                conv = module.block[1]
                self.shapes[name + ".skip"] = (conv.in_channels, (conv.kernel_size[0] - 1) * conv.dilation[0] // 2)
        self.names = {module: name for name, module in decoder.decoder.named_modules(prefix="decoder")}

    def new_state(self, num_rows: int, device: torch.device | str, dtype: torch.dtype = torch.float32
                  ) -> dict[str, torch.Tensor]:
        state = {key: torch.zeros(num_rows, *shape, device=device, dtype=dtype) for key, shape in self.shapes.items()}
        state[FRAMES_KEY] = torch.zeros(num_rows, dtype=torch.int64, device=device)
        state[END_KEY] = torch.full((num_rows,), NO_END, dtype=torch.int64, device=device)
        return state

    def reset_slots(self, state: dict[str, torch.Tensor], slots: torch.Tensor) -> None:
        for key, value in state.items():
            value.index_fill_(0, slots, NO_END if key == END_KEY else 0)

    @torch.no_grad()
    def decode_stream(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """codes [B, F, 7] (tokens.frame_codes) of the next F frames, slots [B] -> [B, F * 2048]."""
        rows = {key: state[key].index_select(0, slots) for key in self.shapes}
        seen, end = state[FRAMES_KEY].index_select(0, slots), state[END_KEY].index_select(0, slots)
        num_frames = codes.shape[1]
        carry = _Carry(rows)
        clock = _Clock(seen, end, self.latent_per_frame, num_frames * self.latent_per_frame)
        x = self.decoder.quantizer.from_codes(frames_to_codebooks(codes))  # [B, latent, 4F], pointwise in time
        for layer in self.decoder.decoder.model:
            x = self._layer(layer, x, carry, clock)
        x = x * clock.mask(x.dtype)  # samples before time 0 (the warm-up) and past the end are zeros
        for key, value in carry.updated.items():
            state[key].index_copy_(0, slots, value)
        state[FRAMES_KEY].index_copy_(0, slots, seen + num_frames)
        return x[:, 0]

    @torch.no_grad()
    def finish(self, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The slots' last `lookahead_samples` samples: flush frames past the end, whose inputs every layer
        masks as the whole decode's right padding -> [B, lookahead_samples]."""
        state[END_KEY].index_copy_(0, slots, state[FRAMES_KEY].index_select(0, slots))
        flush = torch.zeros(len(slots), self.flush_frames, 7, dtype=torch.int64, device=slots.device)
        return self.decode_stream(flush, slots, state)[:, : self.lookahead_samples]

    def _layer(self, layer: nn.Module, x: torch.Tensor, carry: _Carry, clock: _Clock) -> torch.Tensor:
        if isinstance(layer, DecoderBlock):
            for sub in layer.block:
                x = self._layer(sub, x, carry, clock)
            return x
        if isinstance(layer, ResidualUnit):
            snake1, conv, snake2, conv1x1 = layer.block
            h = conv1x1(snake2(self._conv(conv, snake1(x), carry, clock)))  # lags x by conv's p
            lag = conv.padding[0]
            skip = carry.swap(self.names[layer] + ".skip", x, lag)[..., : x.shape[-1]]  # x, lagged by p
            return skip + h
        if isinstance(layer, nn.Conv1d):
            return self._conv(layer, x, carry, clock) if layer.kernel_size[0] > 1 else layer(x)
        if isinstance(layer, nn.ConvTranspose1d):
            stride = layer.stride[0]
            joined = carry.swap(self.names[layer], x * clock.mask(x.dtype), 1)  # [B, C, 1 + n]
            full = F.conv_transpose1d(joined, layer.weight, layer.bias, stride=stride)  # [B, C', (n + 2) * s]
            clock.rate *= stride
            clock.delay = clock.delay * stride + layer.padding[0]
            return full[..., stride : stride + x.shape[-1] * stride]  # outputs both inputs reached
        if isinstance(layer, (Snake1d, NoiseBlock, nn.Tanh)):
            return layer(x)  # pointwise in time
        raise TypeError(f"no streaming rule for {type(layer).__name__}")

    def _conv(self, conv: nn.Conv1d, x: torch.Tensor, carry: _Carry, clock: _Clock) -> torch.Tensor:
        """A "same" conv: carried 2p inputs + n new (masked where the whole decode pads) -> n outputs, lag p."""
        context = (conv.kernel_size[0] - 1) * conv.dilation[0]
        assert conv.padding[0] * 2 == context, "a same-padded conv"
        joined = carry.swap(self.names[conv], x * clock.mask(x.dtype), context)
        clock.delay += conv.padding[0]
        return F.conv1d(joined, conv.weight, conv.bias, dilation=conv.dilation, groups=conv.groups)
