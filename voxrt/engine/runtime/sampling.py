"""Per-request sampling that is safe inside CUDA graphs.

Gumbel-max over filtered logits: `argmax(logits / T + g)`, `g = -log(-log(U))`, `U = torch.rand_like(...)`.
Inside a captured graph `torch.rand_like` draws fresh numbers on every replay (torch advances the philox
offset per replay); FlashInfer 0.6's sampling kernels do not (../shared/gpu/README.md, pitfalls).
All parameters are tensors with one row per request, so one graph serves any mix of parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.kernels import default_impl
from voxrt.engine.runtime.kernels.gather import gather_rows
from voxrt.engine.runtime.transfer import upload, upload_into

# The parameters of a padding row (a graph bucket's rows past the batch, the scratch slot): greedy
PADDING_PARAMS = SamplingParams(greedy=True)


@dataclass
class SamplingTensors:
    temperature: torch.Tensor  # [B] float32
    top_k: torch.Tensor  # [B] int64, 0 = off
    top_p: torch.Tensor  # [B] float32, 1 = off
    repetition_penalty: torch.Tensor  # [B] float32
    greedy: torch.Tensor  # [B] bool
    allow_stop: torch.Tensor | None = None  # [B] bool; False: the row's length is pinned, never sample EOS

    def __post_init__(self) -> None:
        if self.allow_stop is None:
            self.allow_stop = torch.ones_like(self.greedy)

    @classmethod
    def empty(cls, batch_size: int, device: torch.device) -> "SamplingTensors":
        return cls(
            temperature=torch.ones(batch_size, dtype=torch.float32, device=device),
            top_k=torch.zeros(batch_size, dtype=torch.int64, device=device),
            top_p=torch.ones(batch_size, dtype=torch.float32, device=device),
            repetition_penalty=torch.ones(batch_size, dtype=torch.float32, device=device),
            greedy=torch.ones(batch_size, dtype=torch.bool, device=device),
        )

    @staticmethod
    def _host(params: Sequence[SamplingParams], pad_to: int | None) -> dict[str, torch.Tensor]:
        rows = list(params) + [PADDING_PARAMS] * ((pad_to or len(params)) - len(params))
        return dict(
            temperature=torch.tensor([p.temperature for p in rows], dtype=torch.float32),
            top_k=torch.tensor([p.top_k for p in rows], dtype=torch.int64),
            top_p=torch.tensor([p.top_p for p in rows], dtype=torch.float32),
            repetition_penalty=torch.tensor([p.repetition_penalty for p in rows], dtype=torch.float32),
            greedy=torch.tensor([p.greedy for p in rows], dtype=torch.bool),
            allow_stop=torch.tensor([p.num_frames is None for p in rows], dtype=torch.bool),
        )

    @classmethod
    def from_params(cls, params: Sequence[SamplingParams], device: torch.device, pad_to: int | None = None) -> "SamplingTensors":
        return cls(**{name: upload(t, device) for name, t in cls._host(params, pad_to).items()})

    def fill_from_params(self, params: Sequence[SamplingParams], pad_to: int | None = None) -> None:
        """Writes per-request parameters into these (static, graph-owned) tensors without a device sync."""
        for name, host in self._host(params, pad_to).items():
            upload_into(getattr(self, name), host)

    def copy_(self, other: "SamplingTensors") -> None:
        """Fills these (static, graph-owned) tensors from `other`, rows beyond `other`'s left as they are."""
        n = other.temperature.shape[0]
        self.temperature[:n].copy_(other.temperature)
        self.top_k[:n].copy_(other.top_k)
        self.top_p[:n].copy_(other.top_p)
        self.repetition_penalty[:n].copy_(other.repetition_penalty)
        self.greedy[:n].copy_(other.greedy)
        self.allow_stop[:n].copy_(other.allow_stop)

    def narrow(self, n: int) -> "SamplingTensors":
        return SamplingTensors(self.temperature[:n], self.top_k[:n], self.top_p[:n],
                               self.repetition_penalty[:n], self.greedy[:n], self.allow_stop[:n])

    def _fields(self) -> tuple[torch.Tensor, ...]:
        return (self.temperature, self.top_k, self.top_p, self.repetition_penalty, self.greedy, self.allow_stop)


class SlotSampling:
    """Each slot's sampling parameters on the device, one row a slot (the last: the scratch slot, padding's).

    A request's parameters never change, so a stage that starts a request (a prefill, whose own tensors hold
    its prompts' parameters) writes them into its slots' rows once (`scatter`, inside the stage), and a decode
    or depth stage reads its rows through its slots tensor (`gather`, inside the stage): a decode step uploads
    no parameters (it uploaded six tensors a step, ~0.2 ms of host time at batch 128). Padding rows scatter
    padding parameters into the scratch row, which holds them from the start."""

    def __init__(self, num_rows: int, device: torch.device, impl: str | None = None) -> None:
        """`impl`: how `gather` runs: `torch` (six index_selects) or `triton` (one kernel, kernels/gather.py);
        None: `triton` on a GPU unless `VOXRT_GLUE_KERNELS=off`, else `torch`."""
        self.rows = SamplingTensors.from_params([PADDING_PARAMS] * num_rows, device)
        if impl is None:
            impl = default_impl(device) if knobs.glue_kernels() else "torch"
        self.impl = impl

    def scatter(self, slots: torch.Tensor, sampling: SamplingTensors) -> None:
        """Rows `slots` [B] take `sampling`'s B rows (queued on the current stream; graph-safe)."""
        for row, value in zip(self.rows._fields(), sampling._fields()):
            row.index_copy_(0, slots, value)

    def gather(self, slots: torch.Tensor) -> SamplingTensors:
        """The parameters of `slots` [B], as new [B] tensors (graph-safe)."""
        return SamplingTensors(*gather_rows(self.rows._fields(), slots, self.impl))


def apply_repetition_penalty(logits: torch.Tensor, history: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """CTRL-style penalty as in transformers' RepetitionPenaltyLogitsProcessor: seen tokens' logits are
    divided by the penalty when positive, multiplied when negative. [B, V], [B, V] bool, [B]."""
    pen = penalty[:, None]
    penalized = torch.where(logits > 0, logits / pen, logits * pen)
    return torch.where(history, penalized, logits)


def sample(logits: torch.Tensor, sampling: SamplingTensors, suppress: torch.Tensor | None = None) -> torch.Tensor:
    """[B, V] logits -> [B] token ids. `suppress` [V] bool masks ids that may never be produced."""
    logits = logits.float()
    if suppress is not None:
        logits = logits.masked_fill(suppress, float("-inf"))
    greedy_ids = logits.argmax(dim=-1)
    vocab = logits.shape[-1]
    scaled = logits / sampling.temperature[:, None]
    sorted_logits, sorted_ids = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device)
    k = torch.where(sampling.top_k > 0, sampling.top_k, torch.full_like(sampling.top_k, vocab))
    keep = ranks[None, :] < k[:, None]
    probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
    cumulative = probs.cumsum(dim=-1)
    keep = keep & ((cumulative - probs) < sampling.top_p[:, None])  # the top token is always kept
    filtered = sorted_logits.masked_fill(~keep, float("-inf"))
    uniform = torch.rand_like(filtered).clamp_(min=1e-20, max=1.0 - 1e-7)
    choice = (filtered - torch.log(-torch.log(uniform))).argmax(dim=-1)
    sampled = sorted_ids.gather(-1, choice[:, None]).squeeze(-1)
    return torch.where(sampling.greedy, greedy_ids, sampled)
