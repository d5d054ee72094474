"""Orpheus's LM: transformers' `LlamaForCausalLM` (Llama-3.2-3B shape) as a plain module over paged attention.

Reference: transformers 4.57 models/llama/modeling_llama.py. Module paths equal its state_dict keys, so a
released checkpoint loads strictly:

    model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
    mlp.{gate,up,down}_proj}, model.norm, lm_head (absent when tie_word_embeddings: the head is embed_tokens)

Released (canopylabs/orpheus-3b-0.1-ft): 28 layers, hidden 3072, 24 q / 8 kv heads of 128, SwiGLU 8192, RMSNorm
eps 1e-5, rope theta 5e5 with Llama-3 scaling (factor 32, low 1, high 4, original context 8192), vocab 156,940,
tied embeddings. No q/k norms (unlike models/common's Qwen3 layers) and no biases.

Rotary. `rope_type: llama3` rescales the inverse frequencies once (`_compute_llama3_parameters` in
transformers' modeling_rope_utils.py: long wavelengths divided by `factor`, a smooth blend between); its
attention scaling is 1. We compute the same `inv_freq` and then the ordinary rotate-half rotary.

Decode head. Generation only ever needs rows from <custom_token_0> (id 128256) on: the 28,672 audio tokens
plus the stop tokens end_of_speech / end_of_ai (tokens.py). `audio_logits` multiplies by that contiguous slice
of the head (a view: no copy), whose row N is <custom_token_N>: 28,684 of 156,940 rows, so a decode step
reads ~82% fewer head bytes (0.79 of the head's 0.96 GB at bf16). Prefill needs only the last position's
logits, through the same slice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.engine.errors import CheckpointError
from voxrt.models.common.layers import RMSNorm, SwiGLU, apply_rotary
from voxrt.models.orpheus.checkpoint import check_lm_dir, load_state, load_strict, read_json
from voxrt.models.orpheus.tokens import CUSTOM_TOKEN_BASE


@dataclass(frozen=True)
class Llama3RopeScaling:
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of a LlamaConfig (config.json) this module implements; anything else is refused."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: Llama3RopeScaling | None = None
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 131072

    @classmethod
    def from_dict(cls, cfg: dict) -> LlamaConfig:
        if cfg.get("model_type", "llama") != "llama":
            raise CheckpointError(f"config model_type {cfg.get('model_type')!r}: expected 'llama' (LlamaForCausalLM)")
        for key, want in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False),
                          ("pretraining_tp", 1)):
            if cfg.get(key, want) != want:
                raise CheckpointError(f"config {key}={cfg[key]!r} is not supported (expected {want!r})")
        try:
            heads = int(cfg["num_attention_heads"])
            values = dict(
                vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
                intermediate_size=int(cfg["intermediate_size"]), num_layers=int(cfg["num_hidden_layers"]),
                num_q_heads=heads, num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads))
        except KeyError as exc:
            raise CheckpointError(f"config.json lacks {exc.args[0]!r}") from None
        config = cls(**values, rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                     rope_theta=float(cfg.get("rope_theta", 10000.0)), rope_scaling=_rope_scaling(cfg.get("rope_scaling")),
                     tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                     max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)))
        if config.num_q_heads % config.num_kv_heads:
            raise CheckpointError("num_attention_heads must be a multiple of num_key_value_heads")
        return config


def _rope_scaling(scaling: dict | None) -> Llama3RopeScaling | None:
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise CheckpointError(f"rope_scaling type {kind!r} is not supported (llama3 or none)")
    try:
        return Llama3RopeScaling(float(scaling["factor"]), float(scaling["low_freq_factor"]),
                                 float(scaling["high_freq_factor"]), int(scaling["original_max_position_embeddings"]))
    except KeyError as exc:
        raise CheckpointError(f"llama3 rope_scaling lacks {exc.args[0]!r}") from None


def inv_freq(cfg: LlamaConfig, device: torch.device | str | None = None) -> torch.Tensor:
    """[head_dim / 2] float32 inverse frequencies, Llama-3-scaled when configured (transformers'
    _compute_default_rope_parameters and _compute_llama3_parameters)."""
    dim = cfg.head_dim
    freqs = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    s = cfg.rope_scaling
    if s is None:
        return freqs
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / freqs
    scaled = torch.where(wavelen > low_freq_wavelen, freqs / s.factor, freqs)  # long wavelengths: / factor
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def cos_sin(positions: torch.Tensor, freqs: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """[N] positions -> cos, sin [N, head_dim] (halves repeated), computed in float32, cast once."""
    angles = positions.float()[:, None] * freqs[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.num_q_heads, self.num_kv_heads, self.head_dim = cfg.num_q_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_q_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_q_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer_idx: int, attn) -> torch.Tensor:
        n = x.shape[0]
        cos, sin = cos[:, None, :], sin[:, None, :]  # [N, 1, D]
        q = apply_rotary(self.q_proj(x).view(n, self.num_q_heads, self.head_dim), cos, sin)  # [N, Hq, D]
        k = apply_rotary(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim), cos, sin)  # [N, Hkv, D]
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        out = attn.forward(layer_idx, q, k, v)  # [N, Hq, D]
        return self.o_proj(out.reshape(n, -1))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, layer_idx: int, cfg: LlamaConfig) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn) -> torch.Tensor:  # [N, H]
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, self.layer_idx, attn)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(i, cfg) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class OrpheusLM(nn.Module):
    """`LlamaForCausalLM` without HF's generate machinery: embed, the layers over the runner's attention
    context, the full head (prefill checks) and the audio slice of it (decode)."""

    def __init__(self, cfg: LlamaConfig, audio_row_start: int = CUSTOM_TOKEN_BASE) -> None:
        super().__init__()
        if not 0 <= audio_row_start < cfg.vocab_size:
            raise CheckpointError(f"vocab_size {cfg.vocab_size} has no rows from {audio_row_start} on (Orpheus's "
                                  f"<custom_token_0> is {CUSTOM_TOKEN_BASE})")
        self.cfg = cfg
        self.audio_row_start = audio_row_start
        self.model = LlamaModel(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._inv_freq: torch.Tensor | None = None

    def rotary_freqs(self, device: torch.device) -> torch.Tensor:
        """inv_freq in float32 on `device`, computed on first use there (the engine's warm-up, before any graph
        capture). Not a buffer: `.to(bfloat16)` must not round it, and it is no checkpoint key."""
        if self._inv_freq is None or self._inv_freq.device != device:
            self._inv_freq = inv_freq(self.cfg, device)
        return self._inv_freq

    @property
    def head_weight(self) -> torch.Tensor:  # [V, H]
        return self.model.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight

    @property
    def num_audio_rows(self) -> int:
        return self.cfg.vocab_size - self.audio_row_start

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:  # [N] -> [N, H]
        return self.model.embed_tokens(token_ids)

    def forward_paged(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """[N, H] inputs at [N] positions -> [N, H] final-normed hidden states (K/V through `attn`)."""
        cos, sin = cos_sin(positions, self.rotary_freqs(x.device), x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attn)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, H] -> [N, V]
        return F.linear(hidden, self.head_weight)

    def audio_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, H] -> [N, V - 128256]: column j is token 128256 + j, i.e. <custom_token_j> (tokens.py)."""
        return F.linear(hidden, self.head_weight[self.audio_row_start :])

    def load_reference_state(self, state: dict[str, torch.Tensor], assign: bool = False) -> None:
        """A LlamaForCausalLM state dict. A tied checkpoint may still carry lm_head.weight (some exports
        write it): transformers ties it to embed_tokens on load and so do we, ignoring the copy. `assign`:
        take the tensors themselves (a module built on the meta device; no second copy of 6 GB)."""
        if self.cfg.tie_word_embeddings:
            state = {k: v for k, v in state.items() if k != "lm_head.weight"}
        load_strict(self, state, "Orpheus LM checkpoint", assign=assign)


def load_lm(directory: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
            need_tokenizer: bool = False) -> OrpheusLM:
    """The LM from a directory in the released layout (config.json + model.safetensors or shards). `dtype`
    None keeps the checkpoint's (bf16 released)."""
    directory = Path(directory)
    check_lm_dir(directory, need_tokenizer=need_tokenizer)
    cfg = LlamaConfig.from_dict(read_json(directory / "config.json"))
    state = load_state(directory)
    with torch.device("meta"):
        lm = OrpheusLM(cfg)
    lm.load_reference_state(state, assign=True)
    return lm.to(device=device, dtype=dtype).eval()
