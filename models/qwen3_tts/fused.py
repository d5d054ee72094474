"""The fused frame path of the Qwen3-TTS talker: packed weights, precomputed tables and fused kernels.

Built over a loaded `Talker` (its released parameter names stay: the packed tensors are made at load time and
the original `nn.Linear` weights become views into them, so memory is not doubled and the reference path still
runs on the same storage). What changes per frame, against the reference modules (the issue that asked for it,
and the engines it learned from: vLLM-Omni's fused code predictor, SGLang-Omni's graphed predictor):

- q/k/v and gate/up projections are one GEMM each (`qkv`, `gate_up`);
- the residual add is fused into the next RMSNorm; q/k norm + rotary + the KV write are one kernel
  (`kernels/rope.py`); the code predictor's attention over its <= 16-position cache is one kernel per layer
  (`kernels/depth_attention.py`);
- the text projection is precomputed for the whole text vocabulary (a table lookup per step), the 16 frame
  embeddings are one gather from a concatenated table, and the predictor's `small_to_mtp_projection` is folded
  into its input tables (the projected embedding of every code), so a predictor step starts from a row lookup;
- sampling is one kernel per code (`kernels/sampling.py`) that also writes the next predictor step's input row;
  the predictor's uniforms for all 15 steps are drawn at once.

With `impl="torch"` the same structure runs in plain torch ops (the CPU; tests compare it with the reference
path), with `impl="triton"` on the GPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.engine.runtime.kernels.depth_attention import depth_attention
from voxrt.engine.runtime.kernels.norm import add_rms_norm, silu_mul
from voxrt.engine.runtime.kernels.rope import qk_norm_rope_paged, rope_inv_freq
from voxrt.engine.runtime.kernels.sampling import sample_codes
from voxrt.engine.runtime.sampling import SamplingTensors
from voxrt.models.qwen3_tts.talker import Talker

_TABLE_ROWS_PER_BATCH = 8192  # rows of the text-projection table computed at once at load time


def _pack(linears: list[nn.Linear]) -> torch.Tensor:
    """Concatenates the weights [out_i, in] into one [sum out_i, in] tensor and re-points every linear's
    weight at its slice of it (same values, one storage)."""
    packed = torch.cat([lin.weight.detach() for lin in linears], dim=0).contiguous()
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight = nn.Parameter(packed[start : start + rows], requires_grad=False)
        start += rows
    return packed


@dataclass
class FusedLayer:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(Hq + 2 Hkv) * D, H]
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o_proj: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # [2 I, H]
    down: torch.Tensor

    @classmethod
    def of(cls, layer: nn.Module) -> "FusedLayer":
        attn, mlp = layer.self_attn, layer.mlp
        return cls(layer.input_layernorm.weight, _pack([attn.q_proj, attn.k_proj, attn.v_proj]), attn.q_norm.weight,
                   attn.k_norm.weight, attn.o_proj.weight, layer.post_attention_layernorm.weight,
                   _pack([mlp.gate_proj, mlp.up_proj]), mlp.down_proj.weight)


class FusedTalker:
    """The talker's decode inputs, LM forward and code predictor on the fused path."""

    def __init__(self, talker: Talker, impl: str) -> None:
        self.talker = talker
        self.impl = impl
        cfg = talker.cfg
        lm, pred = cfg.lm, cfg.predictor
        self.lm, self.pred = lm, pred
        self.num_code_groups = cfg.num_code_groups
        device = talker.codec_head.weight.device
        with torch.no_grad():
            self.layers = [FusedLayer.of(layer) for layer in talker.model.layers]
            self.pred_layers = [FusedLayer.of(layer) for layer in talker.code_predictor.model.layers]
            self.inv_freq = rope_inv_freq(lm.head_dim, lm.rope_theta, device)
            self.pred_inv_freq = rope_inv_freq(pred.head_dim, pred.rope_theta, device)
            self.text_table = self._text_table()  # [text vocab, H]
            tables = [talker.model.codec_embedding.weight] + [e.weight for e in talker.code_predictor.model.codec_embedding]
            self.frame_table = torch.cat(tables, dim=0).contiguous()  # [V0 + (K-1) V, H]
            sizes = torch.tensor([0] + [t.shape[0] for t in tables[:-1]], device=device)
            self.frame_offsets = sizes.cumsum(0)  # [K]: where code group i's rows start
            proj = talker.code_predictor.small_to_mtp_projection
            self.code0_table = proj(talker.model.codec_embedding.weight).contiguous()  # [V0, Hp]
            # input of predictor step s >= 1: the projected embedding of code s (table s - 1)
            emb = talker.code_predictor.model.codec_embedding
            self.step_tables = torch.stack([proj(emb[i].weight) for i in range(self.num_code_groups - 2)]).contiguous()

    def _text_table(self) -> torch.Tensor:
        """text_projection(text_embedding(id)) for every text id, in the activation dtype."""
        emb = self.talker.model.text_embedding.weight
        rows = [self.talker.text_projection(emb[i : i + _TABLE_ROWS_PER_BATCH])
                for i in range(0, emb.shape[0], _TABLE_ROWS_PER_BATCH)]
        return torch.cat(rows, dim=0).contiguous()

    @property
    def num_table_bytes(self) -> int:
        tables = (self.text_table, self.frame_table, self.code0_table, self.step_tables)
        return sum(t.numel() * t.element_size() for t in tables)

    # ---- talker ----------------------------------------------------------------------------------------

    def embed_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(text_ids, self.text_table)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """[B, K] -> [B, H]: the 16 embeddings gathered from one table, summed as the reference sums them."""
        return F.embedding(codes + self.frame_offsets, self.frame_table).sum(1)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """[N, H] at [N] positions -> [N, H] final-normed hidden states; K/V written through `attn`'s pages."""
        lm, impl = self.lm, self.impl
        n = x.shape[0]
        h, residual = x, None
        for i, layer in enumerate(self.layers):
            normed, residual = add_rms_norm(h, residual, layer.input_norm, lm.rms_norm_eps, impl)
            qkv = F.linear(normed, layer.qkv)
            q = qk_norm_rope_paged(qkv, lm.num_q_heads, lm.num_kv_heads, lm.head_dim, layer.q_norm, layer.k_norm,
                                   self.inv_freq, lm.rms_norm_eps, positions, attn.page_idx, attn.page_off,
                                   attn.kv.layers[i], impl)
            out = attn.attend(i, q)  # [N, Hq, D]
            normed, residual = add_rms_norm(F.linear(out.reshape(n, -1), layer.o_proj), residual, layer.post_norm,
                                            lm.rms_norm_eps, impl)
            h = F.linear(silu_mul(F.linear(normed, layer.gate_up), impl), layer.down)
        out, _ = add_rms_norm(h, residual, self.talker.model.norm.weight, lm.rms_norm_eps, impl)
        return out

    def sample(self, logits: torch.Tensor, sampling: SamplingTensors, suppress: torch.Tensor | None = None) -> torch.Tensor:
        codes = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
        uniform = torch.rand(logits.shape, dtype=torch.float32, device=logits.device)
        sample_codes(logits, uniform, sampling.temperature, sampling.top_k, sampling.top_p, sampling.greedy, codes,
                     suppress=suppress, impl=self.impl)
        return codes

    # ---- code predictor --------------------------------------------------------------------------------

    def generate_depth(self, hidden: torch.Tensor, code0: torch.Tensor, sampling: SamplingTensors,
                       record_logits: list[torch.Tensor] | None = None) -> torch.Tensor:
        """[B, H] talker hidden, [B] code 0 (untagged) -> [B, K] codes; the reference's
        `CodePredictor.generate` with every step's input a table row and every step's kernels fused."""
        pred, impl = self.pred, self.impl
        cp = self.talker.code_predictor
        bsz, k = hidden.shape[0], self.num_code_groups
        dev, dtype = hidden.device, hidden.dtype
        vocab = self.step_tables.shape[1]
        caches = [(torch.empty(bsz, pred.num_kv_heads, k, pred.head_dim, dtype=dtype, device=dev),
                   torch.empty(bsz, pred.num_kv_heads, k, pred.head_dim, dtype=dtype, device=dev))
                  for _ in self.pred_layers]
        uniform = torch.rand(bsz, k - 1, vocab, dtype=torch.float32, device=dev)  # all steps' noise at once
        codes = torch.empty(bsz, k, dtype=torch.int64, device=dev)
        codes[:, 0] = code0
        x = torch.stack([cp.small_to_mtp_projection(hidden), F.embedding(code0, self.code0_table)], dim=1)
        x = x.view(bsz * 2, -1)  # step 0: two tokens per row (positions 0, 1), then one
        next_x = torch.empty(bsz, x.shape[1], dtype=dtype, device=dev)
        start, t = 0, 2
        for step in range(k - 1):
            h, residual = x, None
            for layer, (k_cache, v_cache) in zip(self.pred_layers, caches):
                normed, residual = add_rms_norm(h, residual, layer.input_norm, pred.rms_norm_eps, impl)
                out = depth_attention(F.linear(normed, layer.qkv), pred.num_q_heads, pred.num_kv_heads, pred.head_dim,
                                      layer.q_norm, layer.k_norm, self.pred_inv_freq, pred.rms_norm_eps, k_cache,
                                      v_cache, start, t, impl)
                normed, residual = add_rms_norm(F.linear(out, layer.o_proj), residual, layer.post_norm,
                                                pred.rms_norm_eps, impl)
                h = F.linear(silu_mul(F.linear(normed, layer.gate_up), impl), layer.down)
            last = slice(t - 1, None, t)  # each row's last token
            normed, _ = add_rms_norm(h[last], residual[last], cp.model.norm.weight, pred.rms_norm_eps, impl)
            logits = F.linear(normed, cp.lm_head[step].weight)  # [B, V]
            if record_logits is not None:
                record_logits.append(logits.float())
            has_next = step + 2 < k
            sample_codes(logits, uniform[:, step], sampling.temperature, sampling.top_k, sampling.top_p,
                         sampling.greedy, codes[:, step + 1], next_table=self.step_tables[step] if has_next else None,
                         next_out=next_x if has_next else None, impl=impl)
            x = next_x
            start += t
            t = 1
        return codes
