"""A toy causal codec in the shape of the Qwen3-TTS 12 Hz decoder: summed codebook embeddings -> causal
conv -> windowed causal attention -> upsampling stages (repeat + causal conv) -> 1 channel, tanh.

Every part is causal, so chunk-by-chunk decoding with carried state (each conv's last k-1 inputs, the
attention window's K/V and the frame count) equals decoding the whole sequence at once. The state lives in
device tensors with one row per slot; `decode_offline` is the stateless reference it is tested against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalConv(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel)
        self.tail = kernel - 1  # inputs carried across chunks

    def forward_offline(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        return self.conv(F.pad(x, (self.tail, 0)))

    def forward_stream(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, C, T], state [B, C, tail] (previous inputs) -> y [B, C', T], new state."""
        xx = torch.cat([state.to(x.dtype), x], dim=-1)
        return self.conv(xx), xx[..., -self.tail :]


class WindowAttention(nn.Module):
    """Causal self-attention over the last `window` frames (the 12 Hz decoder uses a 72-frame window)."""

    def __init__(self, dim: int, num_heads: int, window: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.window = num_heads, dim // num_heads, window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor):
        bsz, t, _ = x.shape
        q, k, v = self.qkv(x).view(bsz, t, 3, self.num_heads, self.head_dim).unbind(2)
        return q, k, v  # [B, T, H, Dh]

    def _attend(self, q, k, v, q_pos, k_pos, k_valid) -> torch.Tensor:
        # q [B, T, H, Dh], k/v [B, L, H, Dh], q_pos [B, T], k_pos [B, L], k_valid [B, L]
        scores = torch.einsum("bthd,blhd->bhtl", q.float(), k.float()) / math.sqrt(self.head_dim)
        mask = (k_pos[:, None, :] <= q_pos[:, :, None]) & (k_pos[:, None, :] > q_pos[:, :, None] - self.window)
        mask = mask & k_valid[:, None, :]
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
        out = torch.einsum("bhtl,blhd->bthd", torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
        return self.out(out.reshape(q.shape[0], q.shape[1], -1))

    def forward_offline(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, C]
        q, k, v = self._split(x)
        pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        return self._attend(q, k, v, pos, pos, torch.ones_like(pos, dtype=torch.bool))

    def forward_stream(self, x, state_k, state_v, count):
        """x [B, T, C]; state_k/v [B, W, H, Dh] hold the last W frames (oldest first); count [B] frames seen.
        Window rows of frames never seen (count < W) are masked: empty slots must not be attended."""
        t, w = x.shape[1], self.window
        q, k, v = self._split(x)
        keys = torch.cat([state_k.to(k.dtype), k], dim=1)
        values = torch.cat([state_v.to(v.dtype), v], dim=1)
        offsets = torch.arange(-w, t, device=x.device)
        k_pos = count[:, None] + offsets[None, :]  # absolute frame positions [B, W + T]
        q_pos = count[:, None] + torch.arange(t, device=x.device)[None, :]
        y = self._attend(q, keys, values, q_pos, k_pos, k_pos >= 0)
        return y, keys[:, -w:], values[:, -w:], count + t


class TinyCodec(nn.Module):
    def __init__(self, num_codebooks: int, codebook_size: int, dim: int, num_heads: int, window: int,
                 upsample: tuple[tuple[int, int], ...]) -> None:
        super().__init__()
        self.embeds = nn.ModuleList(nn.Embedding(codebook_size, dim) for _ in range(num_codebooks))
        self.pre_conv = CausalConv(dim, dim)
        self.attn = WindowAttention(dim, num_heads, window)
        self.upsample = tuple(r for r, _ in upsample)
        channels = [dim] + [c for _, c in upsample]
        self.convs = nn.ModuleList(CausalConv(channels[i], channels[i + 1]) for i in range(len(upsample)))
        self.out_conv = CausalConv(channels[-1], 1)
        self.samples_per_frame = math.prod(self.upsample)

    def _embed(self, codes: torch.Tensor) -> torch.Tensor:  # [B, T, K] -> [B, T, C]
        return sum(emb(codes[..., i]) for i, emb in enumerate(self.embeds))

    def decode_offline(self, codes: torch.Tensor) -> torch.Tensor:
        x = self._embed(codes)
        x = x + self.pre_conv.forward_offline(x.transpose(1, 2)).transpose(1, 2)
        x = x + self.attn.forward_offline(x)
        x = x.transpose(1, 2)
        for rate, conv in zip(self.upsample, self.convs):
            x = F.silu(conv.forward_offline(x.repeat_interleave(rate, dim=-1)))
        return torch.tanh(self.out_conv.forward_offline(x)).squeeze(1).float()

    def new_state(self, num_rows: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        dim = self.pre_conv.conv.in_channels
        state = {
            "pre_conv": torch.zeros(num_rows, dim, self.pre_conv.tail, device=device, dtype=dtype),
            "attn_k": torch.zeros(num_rows, self.attn.window, self.attn.num_heads, self.attn.head_dim, device=device, dtype=dtype),
            "attn_v": torch.zeros(num_rows, self.attn.window, self.attn.num_heads, self.attn.head_dim, device=device, dtype=dtype),
            "count": torch.zeros(num_rows, dtype=torch.int64, device=device),
        }
        for i, conv in enumerate(self.convs):
            state[f"conv{i}"] = torch.zeros(num_rows, conv.conv.in_channels, conv.tail, device=device, dtype=dtype)
        state["out_conv"] = torch.zeros(num_rows, self.out_conv.conv.in_channels, self.out_conv.tail, device=device, dtype=dtype)
        return state

    def decode_stream(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """codes [B, T, K], slots [B] (distinct rows) -> [B, T * samples_per_frame]; advances the slots' state."""
        new: dict[str, torch.Tensor] = {}
        x = self._embed(codes)
        y, new["pre_conv"] = self.pre_conv.forward_stream(x.transpose(1, 2), state["pre_conv"][slots])
        x = x + y.transpose(1, 2)
        y, new["attn_k"], new["attn_v"], new["count"] = self.attn.forward_stream(
            x, state["attn_k"][slots], state["attn_v"][slots], state["count"][slots])
        x = (x + y).transpose(1, 2)
        for i, (rate, conv) in enumerate(zip(self.upsample, self.convs)):
            y, new[f"conv{i}"] = conv.forward_stream(x.repeat_interleave(rate, dim=-1), state[f"conv{i}"][slots])
            x = F.silu(y)
        y, new["out_conv"] = self.out_conv.forward_stream(x, state["out_conv"][slots])
        for name, value in new.items():
            state[name].index_copy_(0, slots, value.to(state[name].dtype))
        return torch.tanh(y).squeeze(1).float()
