"""Convolutional layers of the Qwen3-TTS 12 Hz codec decoder, each runnable offline or streaming.

Reference: qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py (qwen-tts 0.1.1). Attribute names
match the reference modules so the checkpoint's `decoder.*` keys load unchanged.

Every layer takes `(x, carry)`. `carry=None` is offline decoding: exactly the reference's zero left padding.
With a `Carry`, a stateful layer reads its per-request context (`carry.take(key)`, rows already gathered for
the batch's slots) and hands back the context the next chunk needs (`carry.give(key, ...)`). What each layer
carries, per request:

- `CausalConv` (stride 1, kernel k, dilation d): its last (k - 1) * d inputs. The reference left-pads by
  exactly that and never pads right (its "extra padding" is 0 at stride 1), so output t depends on inputs
  t - (k-1)d .. t only.
- `CausalTransConv` (kernel K, stride s): the overlap tail, K - s output samples holding the last inputs'
  contributions to the next outputs (bias excluded). The reference trims those K - s samples off the right
  end; output n depends only on inputs <= n // s, so every output of a chunk is final when the chunk's
  inputs are in and streaming needs no lookahead (the trimmed tail is completed by the next chunk).
- `SnakeBeta`, the pointwise parts of ConvNeXt and the residual units: nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.engine.runtime.kernels.snake import snake_beta


class Carry:
    """The state rows of one streaming call (already gathered for the batch's slots): layers `take` their
    context and `give` the context the next chunk of the same request needs."""

    def __init__(self, rows: dict[str, torch.Tensor]) -> None:
        self.rows = rows
        self.updated: dict[str, torch.Tensor] = {}

    def take(self, key: str) -> torch.Tensor:
        return self.rows[key]

    def give(self, key: str, value: torch.Tensor) -> None:
        assert key not in self.updated, f"state {key!r} written twice in one call"
        self.updated[key] = value


class StatefulLayer(nn.Module):
    """A layer with per-request streaming state; the codec names it `state_key` (its module path)."""

    state_key: str | None = None

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-request state tensors (shape without the row dimension), keyed by suffix ('' for one)."""
        raise NotImplementedError


def last_entries(x: torch.Tensor, n: int, dim: int = -1) -> torch.Tensor:
    """The last n entries along `dim` (x[..., -n:] is wrong for n == 0)."""
    return x.narrow(dim, x.shape[dim] - n, n)


class CausalConv(StatefulLayer):
    """Qwen3TTSTokenizerV2CausalConvNet at stride 1 (the only stride the decoder uses): left pad (k-1)*d."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel_size, dilation=dilation, groups=groups)
        self.context = (kernel_size - 1) * dilation  # inputs carried across chunks

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"": (self.conv.in_channels, self.context)} if self.context else {}

    def forward(self, x: torch.Tensor, carry: Carry | None = None, act: SnakeBeta | None = None
                ) -> torch.Tensor:  # [B, C, T] -> [B, C', T]
        """`act`: the activation before the conv (conv(act(x))), written straight into the conv's padded
        input, behind the carried context, instead of into a tensor of its own that is then concatenated."""
        if self.context == 0:
            return self.conv(x if act is None else act(x))
        return self.conv(self.padded_input(x, carry, act))

    def padded_input(self, x: torch.Tensor, carry: Carry | None = None, act: SnakeBeta | None = None
                     ) -> torch.Tensor:  # [B, C, T] -> [B, C, context + T]
        """What the conv reads: the carried context (zeros offline) then act(x); hands the next context on."""
        if carry is None and act is None:
            return F.pad(x, (self.context, 0))
        batch, channels, time = x.shape
        padded = x.new_empty(batch, channels, self.context + time)  # [B, C, context + T]
        if carry is None:
            padded[..., : self.context].zero_()  # the reference's zero left padding
        else:
            padded[..., : self.context].copy_(carry.take(self.state_key))
        if act is None:
            padded[..., self.context :].copy_(x)
        else:
            act(x, out=padded[..., self.context :])
        if carry is not None:
            carry.give(self.state_key, last_entries(padded, self.context))
        return padded


class CausalTransConv(StatefulLayer):
    """Qwen3TTSTokenizerV2CausalTransConvNet: ConvTranspose1d(K, stride s), right K - s samples trimmed."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel_size, stride=stride)
        self.stride = stride
        self.overlap = kernel_size - stride  # output samples carried across chunks (the reference's right_pad)

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"": (self.conv.out_channels, self.overlap)} if self.overlap else {}

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C', T*s]
        num_out = x.shape[-1] * self.stride
        if self.overlap == 0:
            return self.conv(x)  # kernel == stride: frames do not overlap, nothing to trim or carry
        if carry is None:
            return self.conv(x)[..., :num_out]
        # Overlap-add: the previous inputs' contributions (the tail) plus this chunk's, bias added once, in
        # place (the tail handed on is the part past num_out, which the bias add does not touch).
        full = F.conv_transpose1d(x, self.conv.weight, None, stride=self.stride)  # [B, C', T*s + overlap]
        full[..., : self.overlap] += carry.take(self.state_key).to(full.dtype)  # [B, C', overlap]
        carry.give(self.state_key, full[..., num_out:])
        return full[..., :num_out].add_(self.conv.bias[:, None])


class SnakeBeta(nn.Module):
    """x + 1 / (exp(beta) + 1e-9) * sin(x * exp(alpha))^2, per channel (log-scale parameters). `impl`
    "triton" runs it as one kernel (voxrt/engine/runtime/kernels/snake.py, float32 inside); "torch" is the
    reference's ops."""

    impl = "torch"

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, carry: Carry | None = None, out: torch.Tensor | None = None
                ) -> torch.Tensor:  # [B, C, T]
        if self.impl == "torch":
            alpha = self.alpha.exp()[:, None]  # [C, 1]
            beta = self.beta.exp()[:, None]
            y = x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)
            return y if out is None else out.copy_(y)
        return snake_beta(x, self.alpha_exp, self.inv_beta, self.impl, out)

    def set_impl(self, impl: str) -> None:
        """Picks the implementation; a kernel one gets exp(alpha) and 1 / (exp(beta) + 1e-9) computed here, once
        (in float32, as buffers that move with the module), not in every call."""
        self.impl = impl
        if impl != "torch":
            with torch.no_grad():
                self.register_buffer("alpha_exp", self.alpha.detach().float().exp(), persistent=False)
                self.register_buffer("inv_beta", 1.0 / (self.beta.detach().float().exp() + 1e-9), persistent=False)


class ConvNeXtBlock(nn.Module):
    """Qwen3TTSTokenizerV2ConvNeXtBlock: causal depthwise conv 7 -> LayerNorm -> MLP x4 (GELU) -> gamma,
    residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T]
        h = self.dwconv(x, carry).transpose(1, 2)  # [B, T, C]
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)


class ResidualUnit(nn.Module):
    """Qwen3TTSTokenizerV2DecoderDecoderResidualUnit: Snake -> causal conv 7 (dilated) -> Snake -> conv 1."""

    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T]
        return x + self.conv2(self.conv1(x, carry, act=self.act1), carry, act=self.act2)


class DecoderBlock(nn.Module):
    """Qwen3TTSTokenizerV2DecoderDecoderBlock: Snake -> transposed conv (kernel 2r, stride r) halving the
    channels -> residual units with dilations 1, 3, 9."""

    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalTransConv(in_dim, out_dim, 2 * rate, rate)]
                                   + [ResidualUnit(out_dim, d) for d in (1, 3, 9)])

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C/2, T*r]
        for layer in self.block:
            x = layer(x, carry)
        return x


class UpsampleStage(nn.ModuleList):
    """One entry of the reference decoder's `upsample`: [transposed conv (kernel = stride = r), ConvNeXt]."""

    def __init__(self, dim: int, rate: int) -> None:
        super().__init__([CausalTransConv(dim, dim, rate, rate), ConvNeXtBlock(dim)])

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C, T*r]
        for layer in self:
            x = layer(x, carry)
        return x
