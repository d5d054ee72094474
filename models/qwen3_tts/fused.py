"""The fused frame path of the Qwen3-TTS talker: packed weights, precomputed tables and fused kernels.

Built over a loaded `Talker` at load time; the released parameter names and tensors stay untouched (the
reference path keeps running on them), the fused path uses derived tensors beside them. What changes per
frame, against the reference modules (the issue that asked for it, and the engines it learned from:
vLLM-Omni's fused code predictor, SGLang-Omni's graphed predictor):

- q/k/v and gate/up projections are one GEMM each, with the RMSNorm before them folded into their weights
  (`W diag(w)`); the kernel that consumes each projection applies the row's rstd (kernels/norm.py): the
  rotary / attention kernels (v only: the per-head q/k norms cancel a row scale), the SiLU-gate kernel, and
  the sampler (the code predictor's final norm folded into its heads). No norm kernel runs inside a layer;
- the residual adds happen in the o_proj and down_proj products (into the residual stream, in place); at one
  to four rows every projection is a matrix-vector kernel spread over all SMs (kernels/gemv.py: cuBLAS left
  most SMs idle at these shapes), beyond that cuBLAS (`addmm_`); where both MLP products take that kernel,
  gate_up applies the row's rstd itself and down computes silu(gate) * up as it reads its input
  (`add_gated_mlp_`: no SiLU-gate kernel); the frame's Triton kernels launch with programmatic dependent
  launch on sm90+ (kernels/__init__.py);
- q/k norm + rotary + the KV write are one kernel (kernels/rope.py; where the talker's decode attention is our paged
  kernel, that work runs inside it: AttentionContext.norm_rope_attend; `VOXRT_PAGED_DECODE_ROPE=off` keeps two);
  the code predictor's attention over its <= 16-position cache is one kernel per layer (kernels/depth_attention.py);
- the text projection is precomputed for the whole text vocabulary (a table lookup per step), the 16 frame
  embeddings are one gather from a concatenated table, and the predictor's `small_to_mtp_projection` is folded
  into its input tables (the projected embedding of every code), so a predictor step starts from a row lookup;
- sampling is one kernel per code (kernels/sampling.py) that also writes the next predictor step's input row;
  the predictor's uniforms for all 15 steps are drawn at once;
- every product is told the weight of the product after it (`prefetch=`): where the L2 prefetch is on
  (kernels.set_l2_prefetch / VOXRT_L2_PREFETCH), the kernel asks the L2 for up to 16 MB of that weight while
  it streams its own, so the next kernel starts on cached weights instead of a cold DRAM stream.

A layer is 6 kernels on the predictor (qkv, attention, o_proj + residual, gate_up, SiLU gate, down + residual),
7-8 on the talker (FlashInfer's attention apart from the rotary kernel); one fewer where the SiLU gate runs in
the down product (where both MLP products are matrix-vector kernels: at one row, i.e. the batch-1 talker
step and predictor steps 1-14). With `impl="torch"` the same
structure runs in plain torch ops (the CPU; tests compare it with the reference path), with `impl="triton"`
on the GPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.kernels.depth_attention import depth_attention
from voxrt.engine.runtime.kernels.gather import depth_inputs, embed_step
from voxrt.engine.runtime.kernels.gemv import add_gated_mlp_, add_linear_, linear
from voxrt.engine.runtime.kernels.norm import add_rms_norm, rstd_torch
from voxrt.engine.runtime.kernels.rope import rope_inv_freq
from voxrt.engine.runtime.kernels.sampling import sample_codes
from voxrt.engine.runtime.sampling import SamplingTensors
from voxrt.models.qwen3_tts.talker import Talker

_TABLE_ROWS_PER_BATCH = 8192  # rows of the text-projection table computed at once at load time


def fold_norm(weights: list[torch.Tensor], norm_weight: torch.Tensor) -> torch.Tensor:
    """[out_i, in] weights after an RMSNorm with weight [in] -> one [sum out_i, in] tensor W diag(w),
    computed in float32 and rounded once."""
    packed = torch.cat([w.detach().float() for w in weights], dim=0) * norm_weight.detach().float()[None, :]
    return packed.to(weights[0].dtype).contiguous()


@dataclass
class FusedLayer:
    qkv: torch.Tensor  # [(Hq + 2 Hkv) * D, H], input_layernorm folded in
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o_proj: torch.Tensor  # [H, Hq * D] (the released tensor)
    gate_up: torch.Tensor  # [2 I, H], post_attention_layernorm folded in
    down: torch.Tensor  # [H, I] (the released tensor)

    @classmethod
    def of(cls, layer: nn.Module) -> "FusedLayer":
        attn, mlp = layer.self_attn, layer.mlp
        return cls(fold_norm([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], layer.input_layernorm.weight),
                   attn.q_norm.weight, attn.k_norm.weight, attn.o_proj.weight,
                   fold_norm([mlp.gate_proj.weight, mlp.up_proj.weight], layer.post_attention_layernorm.weight),
                   mlp.down_proj.weight)


class FusedTalker:
    """The talker's decode inputs, LM forward and code predictor on the fused path."""

    def __init__(self, talker: Talker, impl: str, gemm_impl: str | None = None) -> None:
        """`gemm_impl`: the projections' implementation when it differs from the other kernels' (tests run
        the Triton kernels in the interpreter with torch products, which it would take minutes to emulate)."""
        self.talker = talker
        self.impl = impl
        self.gemm_impl = gemm_impl or impl
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
            norm_w = talker.code_predictor.model.norm.weight
            self.heads = torch.stack([fold_norm([h.weight], norm_w) for h in talker.code_predictor.lm_head])  # [K-1, V, Hp]
            # VOXRT_PREDICTOR_QKV_TABLE (on by default): layer 0's q/k/v of steps >= 1 looked up, not computed
            # (their input is a table row, and layer 0's input norm is folded into its projection, its rstd after)
            self.step_qkv_tables = (torch.stack([F.linear(t, self.pred_layers[0].qkv) for t in self.step_tables])
                                    .contiguous() if knobs.predictor_qkv_table() else None)  # [K-2, V, QKV]
        # VOXRT_GLUE_KERNELS (on by default): code 0's processors inside its sampler kernel (`sample_first`);
        # the predictor's first inputs (`generate_depth`'s `code0_tag`) and the decode input (`embed_step`) one
        # kernel each
        self.glue_kernels = knobs.glue_kernels()

    def _text_table(self) -> torch.Tensor:
        """text_projection(text_embedding(id)) for every text id, in the activation dtype."""
        emb = self.talker.model.text_embedding.weight
        rows = [self.talker.text_projection(emb[i : i + _TABLE_ROWS_PER_BATCH])
                for i in range(0, emb.shape[0], _TABLE_ROWS_PER_BATCH)]
        return torch.cat(rows, dim=0).contiguous()

    @property
    def num_extra_bytes(self) -> int:
        """Memory the fused path adds beside the released weights: tables, folded projections and heads."""
        tensors = [self.text_table, self.frame_table, self.code0_table, self.step_tables, self.heads]
        tensors += [self.step_qkv_tables] if self.step_qkv_tables is not None else []
        tensors += [t for layer in self.layers + self.pred_layers for t in (layer.qkv, layer.gate_up)]
        return sum(t.numel() * t.element_size() for t in tensors)

    # ---- talker ----------------------------------------------------------------------------------------

    def embed_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(text_ids, self.text_table)

    def embed_step(self, text_ids: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """[B] text ids, [B, K] the previous frame -> [B, H]: `embed_frame(codes) + embed_text(text_ids)`, in one
        kernel with `glue_kernels` (kernels/gather.py)."""
        if self.glue_kernels:
            return embed_step(codes, self.frame_offsets, self.frame_table, text_ids, self.text_table, self.impl)
        return self.embed_frame(codes) + self.embed_text(text_ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """[B, K] -> [B, H]: the 16 embeddings gathered from one table, summed as the reference sums them."""
        return F.embedding(codes + self.frame_offsets, self.frame_table).sum(1)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """[N, H] at [N] positions -> [N, H] final-normed hidden states; K/V written through `attn`'s pages."""
        lm, impl, eps = self.lm, self.impl, self.lm.rms_norm_eps
        n = x.shape[0]
        x = x.clone()  # the residual stream, updated in place
        for i, layer in enumerate(self.layers):
            after = self.layers[i + 1].qkv if i + 1 < len(self.layers) else None  # (the module docstring: prefetch)
            qkv = linear(x, layer.qkv, self.gemm_impl, prefetch=layer.o_proj)
            attended = attn.norm_rope_attend(i, qkv, positions, lm.num_q_heads, lm.num_kv_heads, lm.head_dim,
                                             layer.q_norm, layer.k_norm, self.inv_freq, eps, impl, x=x, x_eps=eps)
            add_linear_(x, attended.reshape(n, -1), layer.o_proj, self.gemm_impl, prefetch=layer.gate_up)
            add_gated_mlp_(x, layer.gate_up, layer.down, eps, self.gemm_impl, impl, prefetch=after)
        out, _ = add_rms_norm(x, None, self.talker.model.norm.weight, eps, impl)
        return out

    def sample(self, logits: torch.Tensor, sampling: SamplingTensors, suppress: torch.Tensor | None = None) -> torch.Tensor:
        codes = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
        uniform = torch.rand(logits.shape, dtype=torch.float32, device=logits.device)
        sample_codes(logits, uniform, sampling.temperature, sampling.top_k, sampling.top_p, sampling.greedy, codes,
                     suppress=suppress, impl=self.impl)
        return codes

    def sample_first(self, logits: torch.Tensor, sampling: SamplingTensors, suppress: torch.Tensor,
                     history: torch.Tensor, eos_mask: torch.Tensor) -> torch.Tensor:
        """Code 0 from the codec head's logits [B, V] with its processors in the sampler (`glue_kernels`): the
        repetition penalty over `history` [B, 2V], EOS barred before frame 2 and for rows that may not stop, and
        frame 1's code shifted by V: what `Qwen3TTSProgram.sample_first_code` does around `sample`, in one kernel
        on the GPU instead of ~18 small ones (kernels/sampling.py, `sample_codes`' `history`)."""
        codes = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
        uniform = torch.rand(logits.shape, dtype=torch.float32, device=logits.device)  # as `sample` draws
        sample_codes(logits, uniform, sampling.temperature, sampling.top_k, sampling.top_p, sampling.greedy, codes,
                     suppress=suppress, impl=self.impl, history=history, penalty=sampling.repetition_penalty,
                     allow_stop=sampling.allow_stop, eos_mask=eos_mask)
        return codes

    # ---- code predictor --------------------------------------------------------------------------------

    def generate_depth(self, hidden: torch.Tensor, code0: torch.Tensor, sampling: SamplingTensors,
                       record_logits: list[torch.Tensor] | None = None, code0_tag: int | None = None) -> torch.Tensor:
        """[B, H] talker hidden, [B] code 0 (untagged; with `code0_tag`, frame 1's shifted by it, as
        `sample_first` returns it, untagged in the first inputs' kernel) -> [B, K] codes; the reference's
        `CodePredictor.generate` with every step's input a table row and every step's kernels fused."""
        pred, impl, eps = self.pred, self.impl, self.pred.rms_norm_eps
        cp = self.talker.code_predictor
        bsz, k = hidden.shape[0], self.num_code_groups
        dev, dtype = hidden.device, hidden.dtype
        vocab = self.step_tables.shape[1]
        caches = [(torch.empty(bsz, pred.num_kv_heads, k, pred.head_dim, dtype=dtype, device=dev),
                   torch.empty(bsz, pred.num_kv_heads, k, pred.head_dim, dtype=dtype, device=dev))
                  for _ in self.pred_layers]
        uniform = torch.rand(bsz, k - 1, vocab, dtype=torch.float32, device=dev)  # all steps' noise at once
        codes = torch.empty(bsz, k, dtype=torch.int64, device=dev)
        # the residual stream; step 0: two tokens per row (positions 0, 1), then one
        if code0_tag is not None:  # one kernel: code 0 untagged into codes, the two rows interleaved
            x = depth_inputs(cp.small_to_mtp_projection(hidden), code0, code0_tag, self.code0_table, codes[:, 0],
                             self.impl)
        else:
            codes[:, 0] = code0
            x = torch.stack([cp.small_to_mtp_projection(hidden), F.embedding(code0, self.code0_table)], dim=1)
            x = x.view(bsz * 2, -1)
        inputs = [torch.empty(bsz, x.shape[1], dtype=dtype, device=dev) for _ in range(2)]  # the sampler writes one
        qkv_tables = self.step_qkv_tables
        qkv_inputs = ([torch.empty(bsz, qkv_tables.shape[2], dtype=dtype, device=dev) for _ in range(2)]
                      if qkv_tables is not None else None)  # ... and, with the table, layer 0's q/k/v beside it
        qkv0 = None  # layer 0's q/k/v of this step when looked up (steps >= 1 with the table)
        start, t = 0, 2
        for step in range(k - 1):
            for j, (layer, (k_cache, v_cache)) in enumerate(zip(self.pred_layers, caches)):
                after = self.pred_layers[j + 1].qkv if j + 1 < len(self.pred_layers) else self.heads[step]
                if j == 0 and qkv0 is not None:
                    qkv = qkv0
                else:
                    qkv = linear(x, layer.qkv, self.gemm_impl, prefetch=layer.o_proj)
                out = depth_attention(qkv, pred.num_q_heads, pred.num_kv_heads, pred.head_dim, layer.q_norm,
                                      layer.k_norm, self.pred_inv_freq, eps, k_cache, v_cache, start, t, impl, x=x,
                                      x_eps=eps)
                add_linear_(x, out, layer.o_proj, self.gemm_impl, prefetch=layer.gate_up)
                add_gated_mlp_(x, layer.gate_up, layer.down, eps, self.gemm_impl, impl, prefetch=after)
            last = x[t - 1 :: t]  # each row's last token
            # [B, V], the final norm's rstd still to apply; the next step starts with layer 0's qkv
            logits = linear(last, self.heads[step], self.gemm_impl, prefetch=self.pred_layers[0].qkv)
            if record_logits is not None:
                record_logits.append((logits.float() * rstd_torch(last, eps)))
            has_next = step + 2 < k
            next_x = inputs[step % 2]
            look_up = has_next and qkv_tables is not None
            sample_codes(logits, uniform[:, step], sampling.temperature, sampling.top_k, sampling.top_p,
                         sampling.greedy, codes[:, step + 1], next_table=self.step_tables[step] if has_next else None,
                         next_out=next_x if has_next else None, impl=impl, x=last, x_eps=eps,
                         next2_table=qkv_tables[step] if look_up else None,
                         next2_out=qkv_inputs[step % 2] if look_up else None)
            x = next_x
            qkv0 = qkv_inputs[step % 2] if look_up else None
            start += t
            t = 1
        return codes
