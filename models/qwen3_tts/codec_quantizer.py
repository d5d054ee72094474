"""Split residual VQ dequantization of the Qwen3-TTS 12 Hz codec: codes -> latent frames.

Reference: SplitResidualVectorQuantizer.decode and the classes under it in
qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py. Codebook 0 (semantic) and codebooks 1..K-1
(acoustic) are two residual quantizers, each a sum of codebook entries followed by its own 1x1 output
projection; the two projections' outputs are summed. Codebook entries are stored as EMA statistics:
entry = embedding_sum / max(cluster_usage, 1e-5). Module and parameter names follow the reference; the
input projections are encoder-side only but sit in the checkpoint, so they are kept for strict loading.
Per-frame and stateless: nothing is carried when streaming.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EuclideanCodebook(nn.Module):
    def __init__(self, dim: int, codebook_size: int, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.cluster_usage = nn.Parameter(torch.ones(codebook_size))
        self.embedding_sum = nn.Parameter(torch.zeros(codebook_size, dim))

    def table(self) -> torch.Tensor:  # [bins, dim]
        return self.embedding_sum / self.cluster_usage.clamp(min=self.epsilon)[:, None]


class VectorQuantization(nn.Module):
    """One codebook (the reference's project_out is the identity: codebook_dim == dim)."""

    def __init__(self, dim: int, codebook_size: int) -> None:
        super().__init__()
        self._codebook = EuclideanCodebook(dim, codebook_size)


class _Layers(nn.Module):
    """The reference's ResidualVectorQuantization: only a `layers` list."""

    def __init__(self, num_quantizers: int, dim: int, codebook_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VectorQuantization(dim, codebook_size) for _ in range(num_quantizers))


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, num_quantizers: int, dim: int, io_dim: int, codebook_size: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)  # encoder side; loaded, unused here
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = _Layers(num_quantizers, dim, codebook_size)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T, n] -> [B, io_dim, T]: sum of the n codebooks' entries, then the output projection."""
        flat = self._buffers.get("table_cache")
        if flat is None:
            flat = self.flat_table()
        bins = flat.shape[0] // len(self.vq.layers)
        offsets = torch.arange(len(self.vq.layers), device=codes.device) * bins
        summed = F.embedding(codes + offsets, flat).sum(dim=2)  # [B, T, dim]
        return self.output_proj(summed.transpose(1, 2))

    def flat_table(self) -> torch.Tensor:  # [n * bins, dim]: one gather for all codebooks
        return torch.stack([layer._codebook.table() for layer in self.vq.layers]).flatten(0, 1)

    def cache_table(self, on: bool) -> None:
        """Keep the codebooks' entries as one buffer (computed once from the EMA statistics) instead of
        recomputing them each call (two kernels per codebook)."""
        self._buffers.pop("table_cache", None)
        if on:
            with torch.no_grad():
                self.register_buffer("table_cache", self.flat_table().detach(), persistent=False)


class SplitResidualVectorQuantizer(nn.Module):
    """`n_q_semantic` is 1 in the reference decoder (hard-coded there, whatever the config says)."""

    def __init__(self, num_quantizers: int, dim: int, io_dim: int, codebook_size: int, num_semantic: int = 1) -> None:
        super().__init__()
        assert num_quantizers > num_semantic, "the acoustic quantizer needs at least one codebook"
        self.num_semantic = num_semantic
        self.rvq_first = ResidualVectorQuantizer(num_semantic, dim, io_dim, codebook_size)
        self.rvq_rest = ResidualVectorQuantizer(num_quantizers - num_semantic, dim, io_dim, codebook_size)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:  # [B, T, K] -> [B, io_dim, T]
        first = self.rvq_first.decode(codes[..., : self.num_semantic])
        return first + self.rvq_rest.decode(codes[..., self.num_semantic :])
