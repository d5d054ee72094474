"""The Qwen3-TTS 12 Hz talker (the LM over paged attention) and its code predictor (depth transformer).

Module paths equal the reference's (qwen_tts/core/models/modeling_qwen3_tts.py), so the `talker.*` part of a
`Qwen3TTSForConditionalGeneration` state dict loads strictly:

    talker.model.{layers.N.*, norm, codec_embedding, text_embedding}   Qwen3TTSTalkerModel
    talker.text_projection.{linear_fc1, linear_fc2}                    Qwen3TTSTalkerResizeMLP (SiLU, bias)
    talker.codec_head                                                  code 0 logits
    talker.code_predictor.model.{layers.N.*, norm, codec_embedding.I}  Qwen3TTSTalkerCodePredictorModel
    talker.code_predictor.lm_head.I, .small_to_mtp_projection          ...ModelForConditionalGeneration

Rotary. The talker uses `apply_multimodal_rotary_pos_emb` with interleaved sections ([24, 20, 20]): each
frequency slot takes its cos/sin from the temporal, height or width position. For speech every position
has all three axes equal (`Qwen3TTSTalkerForConditionalGeneration.get_rope_index` expands one 1-D position
to 3 rows; decode adds the same delta to all three), so every slot reads the same value and the scheme IS
ordinary rotate-half rotary over head_dim with the same inv_freq: we use `rotary_cos_sin` and test it
against the reference. The code predictor uses ordinary rotary (`Qwen3TTSRotaryEmbedding`) at positions
0..K-1 of each frame.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.engine.runtime.sampling import SamplingTensors, sample
from voxrt.models.common.layers import DenseDecoderLayer, PagedDecoderLayer, RMSNorm, rotary_cos_sin
from voxrt.models.qwen3_tts.config import TalkerConfig


class TalkerModel(nn.Module):
    """`talker.model`: the decoder stack plus both input embeddings (there is no `embed_tokens`)."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        lm = cfg.lm
        self.layers = nn.ModuleList(
            PagedDecoderLayer(i, lm.hidden_size, lm.intermediate_size, lm.num_q_heads, lm.num_kv_heads, lm.head_dim,
                              lm.rms_norm_eps) for i in range(lm.num_layers))
        self.norm = RMSNorm(lm.hidden_size, lm.rms_norm_eps)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, lm.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    """`talker.text_projection` (Qwen3TTSTalkerResizeMLP): text width -> text width -> talker width."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class CodePredictorModel(nn.Module):
    """`talker.code_predictor.model`: K-1 embeddings of codes 1..K-1 at the TALKER's width (the talker sums
    them into its next input; the predictor projects them down), a dense decoder stack."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        p = cfg.predictor
        self.layers = nn.ModuleList(
            DenseDecoderLayer(p.hidden_size, p.intermediate_size, p.num_q_heads, p.num_kv_heads, p.head_dim,
                              p.rms_norm_eps) for _ in range(p.num_layers))
        self.norm = RMSNorm(p.hidden_size, p.rms_norm_eps)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.predictor_vocab_size, cfg.lm.hidden_size) for _ in range(cfg.num_code_groups - 1))


class CodePredictor(nn.Module):
    """`talker.code_predictor`. Per frame: inputs [talker hidden, embedding of code 0], then code i's
    embedding after code i is chosen; head i-1 gives code i (i = 1..K-1). The KV cache lives for one frame."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = CodePredictorModel(cfg)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.predictor.hidden_size, cfg.predictor_vocab_size, bias=False)
            for _ in range(cfg.num_code_groups - 1))
        if cfg.predictor.hidden_size != cfg.lm.hidden_size:
            self.small_to_mtp_projection = nn.Linear(cfg.lm.hidden_size, cfg.predictor.hidden_size, bias=True)
        else:
            self.small_to_mtp_projection = nn.Identity()

    def generate(self, hidden: torch.Tensor, code0_embed: torch.Tensor, code0: torch.Tensor,
                 sampling: SamplingTensors, record_logits: list[torch.Tensor] | None = None) -> torch.Tensor:
        """[B, H] talker hidden, [B, H] talker embedding of code 0, [B] code 0 -> [B, K] codes.

        Static shapes and no host syncs (graph-capturable): a [B, Hkv, K, D] cache per layer written at fixed
        offsets, K-1 unrolled steps. `record_logits` (tests) collects each step's [B, V] logits."""
        p = self.cfg.predictor
        bsz, max_len = hidden.shape[0], self.cfg.num_code_groups
        caches = [(hidden.new_zeros(bsz, p.num_kv_heads, max_len, p.head_dim),
                   hidden.new_zeros(bsz, p.num_kv_heads, max_len, p.head_dim)) for _ in self.model.layers]
        positions = torch.arange(max_len, device=hidden.device)
        cos_all, sin_all = rotary_cos_sin(positions, p.head_dim, p.rope_theta, hidden.dtype)
        x = torch.stack([hidden, code0_embed], dim=1)  # [B, 2, H]
        codes = [code0]
        start = 0
        for step in range(max_len - 1):
            h = self.small_to_mtp_projection(x)
            t = h.shape[1]
            cos, sin = cos_all[start : start + t], sin_all[start : start + t]
            for layer, (cache_k, cache_v) in zip(self.model.layers, caches):
                h = layer(h, cos, sin, cache_k, cache_v, start)
            logits = self.lm_head[step](self.model.norm(h[:, -1])).float()  # [B, V]
            if record_logits is not None:
                record_logits.append(logits)
            code = sample(logits, sampling)
            codes.append(code)
            start += t
            if step + 2 < max_len:
                x = self.model.codec_embedding[step](code)[:, None, :]
        return torch.stack(codes, dim=1)


class Talker(nn.Module):
    """`talker`: Qwen3TTSTalkerForConditionalGeneration without HF's generate machinery."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.lm.hidden_size)
        self.codec_head = nn.Linear(cfg.lm.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg)

    def embed_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        """[...] text ids -> [..., H]: text_projection(text_embedding(ids)), as the reference builds every
        text-track input (role tokens, tts_pad/bos/eos, the text itself)."""
        return self.text_projection(self.model.text_embedding(text_ids))

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """[B, K] codes of a frame -> [B, H]: talker embedding of code 0 plus the predictor's embeddings of
        codes 1..K-1, summed in one reduction as the reference does (`codec_hiddens.sum(1)`)."""
        parts = [self.model.codec_embedding(codes[:, 0])]
        parts += [emb(codes[:, i + 1]) for i, emb in enumerate(self.code_predictor.model.codec_embedding)]
        return torch.stack(parts, dim=1).sum(1)

    def forward_paged(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """[N, H] inputs at [N] positions -> [N, H] final-normed hidden states (K/V through `attn`)."""
        lm = self.cfg.lm
        cos, sin = rotary_cos_sin(positions, lm.head_dim, lm.rope_theta, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attn)
        return self.model.norm(x)
