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


def window_mask(positions: torch.Tensor, window: int, streaming: bool) -> torch.Tensor:  # [B, 1, T, L]
    """positions [B, T] (absolute frames). The keys are this chunk's frames, behind the W - 1 cached ones when
    streaming. Allowed: causal, inside the window, and a frame that existed (negative positions are empty
    cache rows)."""
    key_pos = positions  # [B, L]
    if streaming:
        past = window - 1
        key_pos = torch.cat([positions[:, :1] + torch.arange(-past, 0, device=positions.device), positions], dim=1)
    q_pos, k_pos = positions[:, :, None], key_pos[:, None, :]
    return ((k_pos <= q_pos) & (k_pos > q_pos - window) & (k_pos >= 0))[:, None]


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
        if carry is not None:
            past = self.window - 1
            k = torch.cat([carry.take(self.state_key + ".k").to(k.dtype), k], dim=2)  # [B, Hkv, W-1+T, D]
            v = torch.cat([carry.take(self.state_key + ".v").to(v.dtype), v], dim=2)
            carry.give(self.state_key + ".k", last_entries(k, past, dim=2))
            carry.give(self.state_key + ".v", last_entries(v, past, dim=2))
        mask = window_mask(positions, self.window, carry is not None)[:, 0]  # [B, T, L]
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


def _fused_layer(layer: TransformerLayer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 mask: torch.Tensor, carry: Carry | None) -> torch.Tensor:
    """TransformerLayer.forward with packed weights (CodecTransformer.set_fused): one product for q, k and v,
    rotary on q and k at once, the layer scales folded into o_proj and down_proj, whose products add into the
    residual stream `h` in place (cuBLAS, beta = 1), one product for gate and up; the window mask is built
    once per forward. About 17 kernels a layer instead of ~40 on CUDA (a 2-frame chunk is launch-bound)."""
    attn = layer.self_attn
    bsz, t, hidden = h.shape
    heads, kv_heads, dim = attn.num_heads, attn.num_kv_heads, attn.head_dim
    qkv = F.linear(layer.input_layernorm(h), layer.qkv_weight, layer.qkv_bias).view(bsz, t, heads + 2 * kv_heads, dim)
    qk = apply_rotary(qkv[:, :, : heads + kv_heads], cos, sin)  # [B, T, H + Hkv, D]
    q, k = qk[:, :, :heads].transpose(1, 2), qk[:, :, heads:].transpose(1, 2)  # [B, H(kv), T, D]
    v = qkv[:, :, heads + kv_heads :].transpose(1, 2)
    if carry is not None:
        past = attn.window - 1
        k = torch.cat([carry.take(attn.state_key + ".k").to(k.dtype), k], dim=2)  # [B, Hkv, W-1+T, D]
        v = torch.cat([carry.take(attn.state_key + ".v").to(v.dtype), v], dim=2)
        carry.give(attn.state_key + ".k", last_entries(k, past, dim=2))
        carry.give(attn.state_key + ".v", last_entries(v, past, dim=2))
    group = heads // kv_heads
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, T, D]
    rows = h.view(bsz * t, hidden)
    attended = out.transpose(1, 2).reshape(bsz * t, heads * dim)
    if layer.o_bias_scaled is None:
        rows.addmm_(attended, layer.o_weight_scaled.t())  # h += scale * o_proj(out)
    else:
        rows.add_(torch.addmm(layer.o_bias_scaled, attended, layer.o_weight_scaled.t()))
    gate, up = F.linear(layer.post_attention_layernorm(h), layer.gate_up_weight).chunk(2, dim=-1)
    rows.addmm_((F.silu(gate) * up).view(bsz * t, -1), layer.down_weight_scaled.t())  # h += scale * mlp(...)
    return h


class CodecTransformer(nn.Module):
    """input_proj (latent -> hidden) -> layers -> RMSNorm -> output_proj (hidden -> latent)."""

    fused = False

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
        if self.fused:
            mask = window_mask(positions, self.layers[0].self_attn.window, carry is not None)  # all layers
            for layer in self.layers:
                h = _fused_layer(layer, h, cos, sin, mask, carry)
        else:
            for layer in self.layers:
                h = layer(h, cos, sin, positions, carry)
        return self.output_proj(self.norm(h))

    def set_fused(self, on: bool) -> None:
        """Packed and folded weights for `_fused_layer` (buffers beside the released parameters, which stay
        for the reference path): [q; k; v] and [gate; up] stacked, the layer scales multiplied into o_proj and
        down_proj."""
        self.fused = on
        for layer in self.layers:
            attn = layer.self_attn
            if not on:
                for name in ("qkv_weight", "qkv_bias", "o_weight_scaled", "o_bias_scaled", "gate_up_weight",
                             "down_weight_scaled"):
                    layer._buffers.pop(name, None)
                continue
            with torch.no_grad():
                projections = (attn.q_proj, attn.k_proj, attn.v_proj)
                scale_attn = layer.self_attn_layer_scale.scale.detach()[:, None]
                scale_mlp = layer.mlp_layer_scale.scale.detach()[:, None]
                buffers = {
                    "qkv_weight": torch.cat([p.weight.detach() for p in projections]),
                    "qkv_bias": (torch.cat([p.bias.detach() for p in projections])
                                 if attn.q_proj.bias is not None else None),
                    "o_weight_scaled": scale_attn * attn.o_proj.weight.detach(),
                    "o_bias_scaled": (scale_attn[:, 0] * attn.o_proj.bias.detach()
                                      if attn.o_proj.bias is not None else None),
                    "gate_up_weight": torch.cat([layer.mlp.gate_proj.weight.detach(), layer.mlp.up_proj.weight.detach()]),
                    "down_weight_scaled": scale_mlp * layer.mlp.down_proj.weight.detach(),
                }
            for name, value in buffers.items():
                layer.register_buffer(name, value, persistent=False)
