"""Qwen3-style transformer blocks: RMSNorm, rotary (rotate-half), GQA attention with per-head q/k RMSNorm,
SwiGLU MLP. The paged LM layer attends through the runner's `AttentionContext`; the dense layer keeps a
small static KV buffer (the code predictor's per-frame cache)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One fused kernel on CUDA (accumulates in float32); the unfused float32 round trip cost ~8 kernels
        # per norm and was the largest non-matmul share of a decode step (bench/profile_decode.py).
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                   dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """[N] positions -> cos, sin [N, head_dim] in `dtype` (halves repeated, transformers' rotate_half scheme;
    computed in float32, then cast once per forward)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., N, H, D] with cos/sin broadcastable as [..., N, 1, D], in x's dtype (as the transformers
    reference does: cos and sin are cast to the query's dtype)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class QKVProjection(nn.Module):
    def __init__(self, hidden: int, num_q_heads: int, num_kv_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.num_q_heads, self.num_kv_heads, self.head_dim = num_q_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, num_q_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_q_heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [..., N, hidden] -> q [..., N, Hq, D], k and v [..., N, Hkv, D], rotary applied."""
        lead = x.shape[:-1]
        q = self.q_norm(self.q_proj(x).view(*lead, self.num_q_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(*lead, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(*lead, self.num_kv_heads, self.head_dim)
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v


class PagedDecoderLayer(nn.Module):
    """A pre-norm decoder layer over flattened tokens [N, hidden]; KV lives in the runner's pages."""

    def __init__(self, layer_idx: int, hidden: int, intermediate: int, num_q_heads: int, num_kv_heads: int,
                 head_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = QKVProjection(hidden, num_q_heads, num_kv_heads, head_dim, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = SwiGLU(hidden, intermediate)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn) -> torch.Tensor:
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)
        out = attn.forward(self.layer_idx, q, k, v)  # [N, Hq, D]
        x = x + self.self_attn.o_proj(out.reshape(x.shape[0], -1))
        return x + self.mlp(self.post_attention_layernorm(x))


class DenseDecoderLayer(nn.Module):
    """A pre-norm decoder layer over [B, T, hidden] with a static KV buffer [B, Hkv, max_len, D], written at
    `start`; the code predictor runs it for a fixed number of steps, so every shape is static."""

    def __init__(self, hidden: int, intermediate: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
                 eps: float = 1e-6) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = QKVProjection(hidden, num_q_heads, num_kv_heads, head_dim, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = SwiGLU(hidden, intermediate)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache_k: torch.Tensor,
                cache_v: torch.Tensor, start: int) -> torch.Tensor:
        bsz, t, _ = x.shape
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)  # [B, T, H, D]
        cache_k[:, :, start : start + t] = k.transpose(1, 2).to(cache_k.dtype)
        cache_v[:, :, start : start + t] = v.transpose(1, 2).to(cache_v.dtype)
        keys, values = cache_k[:, :, : start + t], cache_v[:, :, : start + t]
        group = q.shape[2] // keys.shape[1]
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        mask = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(diagonal=start)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)  # [B, Hq, T, D]
        x = x + self.self_attn.o_proj(out.transpose(1, 2).reshape(bsz, t, -1))
        return x + self.mlp(self.post_attention_layernorm(x))
