"""The codec decoder's sliding-window transformer ("pre_transformer"), offline or streaming.

Reference: Qwen3TTSTokenizerV2DecoderTransformerModel and its layer, attention, MLP, RMSNorm, layer scale and
rotary classes in qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py. Pre-norm layers with
layer scale on both residual branches, rotary on absolute frame positions (the reference's position_ids are
0..T-1 over the whole sequence), no q/k norm, and a sliding window: frame t attends to frames
t - W + 1 .. t (transformers' sliding_window_overlay: kv_idx > q_idx - W), W = `sliding_window`.

Streaming state per request: each layer's keys (after rotary) and values of the last W - 1 frames, plus
the number of frames seen (`frames`, shared by all layers). Cache rows of frames that never existed (the
first W - 1 frames of a request, or a freshly reset slot) have negative positions and are masked out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.models.common.layers import RMSNorm, SwiGLU, apply_rotary, rotary_cos_sin
from voxrt.models.qwen3_tts.codec_layers import Carry, StatefulLayer, last_entries

FRAMES_KEY = "frames"  # state: frames decoded so far per request, int64 [rows]


class LayerScale(nn.Module):
    def __init__(self, dim: int, initial: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class WindowAttention(StatefulLayer):
    """Qwen3TTSTokenizerV2DecoderAttention (GQA, scale head_dim^-0.5) with a streaming K/V window."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, window: int,
                 bias: bool) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim, self.window = num_heads, num_kv_heads, head_dim, window
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=bias)

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        shape = (self.num_kv_heads, self.window - 1, self.head_dim)
        return {".k": shape, ".v": shape}

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                carry: Carry | None) -> torch.Tensor:
        """x [B, T, hidden], cos/sin [B, T, 1, D], positions [B, T] absolute frame indices."""
        bsz, t, _ = x.shape
        q = apply_rotary(self.q_proj(x).view(bsz, t, self.num_heads, self.head_dim), cos, sin)
        k = apply_rotary(self.k_proj(x).view(bsz, t, self.num_kv_heads, self.head_dim), cos, sin)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, H, T, D]
        v = self.v_proj(x).view(bsz, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        key_pos = positions  # [B, L]
        if carry is not None:
            past = self.window - 1
            k = torch.cat([carry.take(self.state_key + ".k").to(k.dtype), k], dim=2)  # [B, Hkv, W-1+T, D]
            v = torch.cat([carry.take(self.state_key + ".v").to(v.dtype), v], dim=2)
            carry.give(self.state_key + ".k", last_entries(k, past, dim=2))
            carry.give(self.state_key + ".v", last_entries(v, past, dim=2))
            key_pos = torch.cat([positions[:, :1] + torch.arange(-past, 0, device=x.device), positions], dim=1)
        q_pos, k_pos = positions[:, :, None], key_pos[:, None, :]
        # Causal, inside the window, and a frame that existed (negative positions are empty cache rows).
        mask = (k_pos <= q_pos) & (k_pos > q_pos - self.window) & (k_pos >= 0)  # [B, T, L]
        group = self.num_heads // self.num_kv_heads
        if group > 1:  # the reference's repeat_kv: kv head j serves query heads j*group .. (j+1)*group-1
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])  # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(bsz, t, -1))


class TransformerLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 window: int, bias: bool, eps: float, layer_scale: float) -> None:
        super().__init__()
        self.self_attn = WindowAttention(hidden, num_heads, num_kv_heads, head_dim, window, bias)
        self.mlp = SwiGLU(hidden, intermediate)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.self_attn_layer_scale = LayerScale(hidden, layer_scale)
        self.mlp_layer_scale = LayerScale(hidden, layer_scale)

    def forward(self, x, cos, sin, positions, carry: Carry | None) -> torch.Tensor:  # [B, T, hidden]
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, positions, carry))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    """input_proj (latent -> hidden) -> layers -> RMSNorm -> output_proj (hidden -> latent)."""

    def __init__(self, latent_dim: int, hidden: int, intermediate: int, num_layers: int, num_heads: int,
                 num_kv_heads: int, head_dim: int, window: int, bias: bool, eps: float, layer_scale: float,
                 rope_theta: float) -> None:
        super().__init__()
        self.head_dim, self.rope_theta = head_dim, rope_theta
        self.layers = nn.ModuleList(
            TransformerLayer(hidden, intermediate, num_heads, num_kv_heads, head_dim, window, bias, eps, layer_scale)
            for _ in range(num_layers))
        self.norm = RMSNorm(hidden, eps)
        self.input_proj = nn.Linear(latent_dim, hidden)
        self.output_proj = nn.Linear(hidden, latent_dim)

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, T, latent]
        bsz, t, _ = x.shape
        steps = torch.arange(t, device=x.device)
        if carry is None:
            positions = steps[None].expand(bsz, t)
        else:
            frames = carry.take(FRAMES_KEY)  # [B] frames this request has decoded before this chunk
            positions = frames[:, None] + steps[None]  # [B, T]
            carry.give(FRAMES_KEY, frames + t)
        h = self.input_proj(x)  # [B, T, hidden]
        cos, sin = rotary_cos_sin(positions.reshape(-1), self.head_dim, self.rope_theta, h.dtype)
        cos, sin = cos.view(bsz, t, 1, -1), sin.view(bsz, t, 1, -1)  # [B, T, 1, D]
        for layer in self.layers:
            h = layer(h, cos, sin, positions, carry)
        return self.output_proj(self.norm(h))
