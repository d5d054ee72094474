"""Paged attention: the KV cache, and two backends chosen automatically.

- `torch`: a reference in plain torch ops (CPU and GPU), used by tests and as the fallback. Vectorized and
  shape-static, so it can also be captured in CUDA graphs.
- `flashinfer`: FlashInfer's batch decode / prefill kernels over the same cache (GPU).

Both use FlashInfer's single-tensor NHD layout per layer, `[num_pages + 1, 2, page_size, kv_heads, head_dim]`
(dim 1: K then V); the extra last page is scratch that padding rows of a graph bucket write into, so padding
never touches a real request's KV.

A decode step runs one of four kernels (`set_decode_kernel`, env `VOXRT_DECODE_ATTENTION`;
`make_paged_context` builds the context for the one picked):
`cuda-cores` (FlashInfer's decode kernel, which in a CUDA graph always splits the KV and merges the parts with a
second kernel while the batch leaves SMs free), `fa2-nosplit` (FlashInfer's FA2 prefill kernel on tensor cores, one
pass over each sequence's KV, no merge kernel), `fa3` (its Hopper prefill kernel), or `triton`
(`PagedDecodeAttention` on runtime/kernels/paged_decode.py: ours, one program per sequence and KV head, no
split). `auto` (the default)
takes, on a Hopper GPU, fa3 for a context of at most 8 rows and ours above (elsewhere cuda-cores): on the
H200 with KV context 128 (bench/results/2026-12-03-frame-attn) fa3 made the talker step 0.10-0.14 ms shorter
at batch 1 and 8 and 0.50 / 1.54 ms longer at 64 / 128; ours was 0.13-0.33 ms shorter than cuda-cores from 8
to 64 rows (1.994 against 2.319 ms at 64) and equal at 128; fa2-nosplit was within 0.05 ms below 64 rows and
slower above. Ours does not split a sequence, so at few rows a long one runs on few SMs: fa3 keeps those.
bench/gpu_frame.py compares them in one process (paths fused-cudacores, fused-fa2nosplit, fused-fa3,
fused-tritonattn).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple, Sequence

import numpy as np
import torch

from voxrt.engine.runtime import knobs
from voxrt.engine.runtime.kernels.paged_decode import paged_decode_attention, paged_decode_rope_attention
from voxrt.engine.runtime.kernels.rope import qk_norm_rope_paged
from voxrt.engine.runtime.transfer import upload, upload_into

DECODE_KERNELS = knobs.DECODE_KERNELS
AUTO_FA3_MAX_ROWS = 8
_decode_kernel_override: str | None = None


def set_decode_kernel(kernel: str | None) -> None:
    """The FlashInfer decode kernel of wrappers made from now on (graphs captured afterwards), over
    `VOXRT_DECODE_ATTENTION`; None: back to the environment (default auto)."""
    global _decode_kernel_override
    if kernel is not None and kernel not in DECODE_KERNELS:
        raise ValueError(f"unknown decode kernel {kernel!r}; choose one of {', '.join(DECODE_KERNELS)}")
    _decode_kernel_override = kernel


def decode_kernel() -> str:
    if _decode_kernel_override is not None:
        return _decode_kernel_override
    return knobs.decode_attention()


def resolve_decode_kernel(kernel: str, rows: int, hopper: bool) -> str:
    """The kernel a decode context of `rows` rows runs under the choice `kernel` (auto: by rows and GPU)."""
    if kernel != "auto":
        return kernel
    if not hopper:  # measured on the H200 only: elsewhere FlashInfer's CUDA-core kernel, as before
        return "cuda-cores"
    return "fa3" if rows <= AUTO_FA3_MAX_ROWS else "triton"


class SeqSlice(NamedTuple):
    """One sequence of an attention batch (host side): its pages, and how many of its tokens are new
    (their K/V are written this step) out of the total after the step. A named tuple: immutable like the
    frozen dataclass it was, built in half its time (one per row a step: 0.6 against 1.4 us on the dev VM)."""

    pages: Sequence[int]
    num_new: int
    num_total: int


class HostStaging:
    """Pinned host memory for one owner's uploads (a context's indices, a stage's ids), allocated once at
    capacity and written with numpy, so a step's upload is one `copy_(non_blocking=True)` instead of a
    `torch.tensor(list).pin_memory()` per array (each a round trip through torch's caching host allocator).

    A ring of buffers, 2 to start: the host writes step N+1's values while step N's copy may still wait on
    the stream (the loop runs a step ahead of the GPU), so a buffer is reused only once the event recorded
    after its last copy has fired. When it has not (an owner filled several times a step: Orpheus's 6
    sub-steps reuse the decode stage's buffers, whose copies queue behind the whole step before), the ring
    takes one more buffer instead of waiting, up to MAX_DEPTH, so the host never waits for the GPU here
    (waiting would take back the host's step ahead). On the CPU copies are synchronous: no pinning, no
    events, two buffers."""

    MAX_DEPTH = 32

    def __init__(self, num_elements: int, dtype: torch.dtype, device: torch.device, depth: int = 2) -> None:
        self.num_elements, self.dtype, self.device = num_elements, dtype, device
        self._is_cuda = device.type == "cuda"
        self._host: list[torch.Tensor | None] = [None] * depth  # allocated on first use
        self._arrays: list[np.ndarray | None] = [None] * depth
        self._copied: list = [None] * depth  # the event after each buffer's last copy
        self._next = 0

    @property
    def depth(self) -> int:
        return len(self._host)

    def take(self) -> np.ndarray:
        """The next buffer of the ring as a numpy array (flat, `num_elements`), free to write."""
        i = self._next
        event = self._copied[i]
        if event is not None and not event.query():  # its copy is still queued
            if len(self._host) < self.MAX_DEPTH:  # a new buffer here; the busy one moves up the ring
                self._host.insert(i, None)
                self._arrays.insert(i, None)
                self._copied.insert(i, None)
            else:
                event.synchronize()
        if self._host[i] is None:
            self._host[i] = torch.empty(self.num_elements, dtype=self.dtype, pin_memory=self._is_cuda)
            self._arrays[i] = self._host[i].numpy()
        return self._arrays[i]

    def upload(self, dst: torch.Tensor, num_elements: int | None = None) -> None:
        """Copies the first `num_elements` (default: `dst.numel()`) of the buffer `take()` returned into the
        contiguous `dst`'s first elements, queued on the current stream; the next `take()` moves on."""
        i = self._next
        n = dst.numel() if num_elements is None else num_elements
        dst.view(-1)[:n].copy_(self._host[i][:n], non_blocking=True)
        if self._is_cuda:
            event = torch.cuda.Event()
            event.record()
            self._copied[i] = event
        self._next = (i + 1) % len(self._host)


class KVCache:
    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.scratch_page = num_pages
        self.layers = [torch.zeros(num_pages + 1, 2, page_size, num_kv_heads, head_dim, device=device, dtype=dtype)
                       for _ in range(num_layers)]

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.layers)


def bytes_per_page(num_layers: int, page_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    return num_layers * 2 * page_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


class AttentionContext(abc.ABC):
    """Per-forward attention state. Models call `forward(layer, q, k, v)` once per layer.

    Built with a fixed capacity (`max_seqs`, `max_tokens`) so that a graph can own it; `fill()` copies a
    step's host-side description into its tensors in place (padded rows point at the scratch page)."""

    def __init__(self, kv: KVCache, max_seqs: int, max_tokens: int, device: torch.device) -> None:
        self.kv = kv
        self.max_seqs = max_seqs
        self.max_tokens = max_tokens
        self.device = device
        # [page index, offset in the page, position] of each token, in one buffer so a step uploads it once
        self._token_index = torch.zeros(3, max_tokens, dtype=torch.int64, device=device)
        self._token_index[0] = kv.scratch_page
        self.page_idx, self.page_off, self.positions = self._token_index.unbind(0)
        self._staging = None  # HostStaging, on the first fill (a SplitAttention is never filled)
        self._num_total = None  # the step's sequence lengths [S] when each has one new token (a decode step)

    def fill(self, seqs: Sequence[SeqSlice]) -> None:
        """Page index, offset and position of every new token (rows past them: the scratch page, 0, 0),
        uploaded in one copy, then the backend's own `_fill`."""
        if self._staging is None:
            self._staging = HostStaging(3 * self.max_tokens, torch.int64, self.device)
        assert len(seqs) <= self.max_seqs, (len(seqs), self.max_seqs)
        host = self._staging.take().reshape(3, self.max_tokens)
        n, self._num_total = _token_index(seqs, self.kv.page_size, host)
        host[0, n:] = self.kv.scratch_page
        host[1:, n:] = 0
        self._staging.upload(self._token_index)
        self._fill(seqs)

    @abc.abstractmethod
    def _fill(self, seqs: Sequence[SeqSlice]) -> None: ...

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [N, Hq, D], k/v [N, Hkv, D] of the new tokens -> [N, Hq, D]. Writes k/v into the cache first."""
        cache = self.kv.layers[layer]
        n = k.shape[0]
        page_idx, page_off = self.page_idx[:n], self.page_off[:n]
        cache[page_idx, 0, page_off] = k.to(cache.dtype)
        cache[page_idx, 1, page_off] = v.to(cache.dtype)
        return self._attend(layer, q)

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """q [N, Hq, D] over the cache whose K/V for this step's tokens are already written (a fused path writes
        them in its rotary kernel, at `page_idx` / `page_off`) -> [N, Hq, D]."""
        return self._attend(layer, q)

    def norm_rope_attend(self, layer: int, qkv: torch.Tensor, positions: torch.Tensor, num_q_heads: int,
                         num_kv_heads: int, head_dim: int, q_norm: torch.Tensor, k_norm: torch.Tensor,
                         inv_freq: torch.Tensor, eps: float, impl: str, x: torch.Tensor | None = None,
                         x_eps: float = 1e-6) -> torch.Tensor:
        """A Qwen3 attention from its packed projection: qkv [N, (Hq + 2 Hkv) * D] at `positions` [>= N] ->
        [N, Hq, D]. Per-head q/k RMSNorm, rotary and the K/V write at `page_idx` / `page_off` (kernels/rope.py, v
        scaled by rstd(x) where the input norm is folded into the projection), then `attend`; a backend may do it
        all in one kernel."""
        q = qk_norm_rope_paged(qkv, num_q_heads, num_kv_heads, head_dim, q_norm, k_norm, inv_freq, eps, positions,
                               self.page_idx, self.page_off, self.kv.layers[layer], impl, x=x, x_eps=x_eps)
        return self.attend(layer, q)

    @abc.abstractmethod
    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor: ...


class TorchAttention(AttentionContext):
    """Reference: gathers each token's sequence from the page table and masks causally by position.

    Every key at a position <= the query's position is valid: this step's K/V were written first, and
    earlier positions were written by earlier steps. Keys past the sequence lie at larger positions."""

    def __init__(self, kv: KVCache, max_seqs: int, max_tokens: int, max_pages_per_seq: int | None,
                 device: torch.device) -> None:
        """`max_pages_per_seq=None`: eager use, the page table is sized to each step's longest sequence."""
        super().__init__(kv, max_seqs, max_tokens, device)
        self.is_static = max_pages_per_seq is not None
        self.max_pages_per_seq = max_pages_per_seq or 1
        self.page_table = torch.full((max_seqs + 1, self.max_pages_per_seq), kv.scratch_page, dtype=torch.int64, device=device)
        self.seq_ids = torch.full((max_tokens,), max_seqs, dtype=torch.int64, device=device)  # row max_seqs: padding

    def _fill(self, seqs: Sequence[SeqSlice]) -> None:
        if not self.is_static:
            self.max_pages_per_seq = max([-(-s.num_total // self.kv.page_size) for s in seqs] + [1])
            self.page_table = torch.empty(self.max_seqs + 1, self.max_pages_per_seq, dtype=torch.int64, device=self.device)
        table = torch.full((self.max_seqs + 1, self.max_pages_per_seq), self.kv.scratch_page, dtype=torch.int64)
        seq_ids = torch.full((self.max_tokens,), self.max_seqs, dtype=torch.int64)
        n = 0
        for i, seq in enumerate(seqs):
            pages = list(seq.pages)[: -(-seq.num_total // self.kv.page_size)]
            assert len(pages) <= self.max_pages_per_seq, (len(pages), self.max_pages_per_seq)
            table[i, : len(pages)] = torch.tensor(pages, dtype=torch.int64)
            seq_ids[n : n + seq.num_new] = i
            n += seq.num_new
        upload_into(self.page_table, table)
        upload_into(self.seq_ids, seq_ids)

    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        cache = self.kv.layers[layer]
        num_tokens, num_q_heads, head_dim = q.shape
        kv = cache[self.page_table]  # [S+1, P, 2, ps, Hkv, D]
        s1, p, _, ps, num_kv_heads, _ = kv.shape
        kv = kv.permute(0, 2, 1, 3, 4, 5).reshape(s1, 2, p * ps, num_kv_heads, head_dim)
        seq_ids = self.seq_ids[:num_tokens]
        keys = kv[seq_ids, 0].float()  # [N, L, Hkv, D]
        values = kv[seq_ids, 1].float()
        group = num_q_heads // num_kv_heads
        qf = q.float().view(num_tokens, num_kv_heads, group, head_dim)
        scores = torch.einsum("nhgd,nlhd->nhgl", qf, keys) / math.sqrt(head_dim)
        key_pos = torch.arange(p * ps, device=q.device)
        mask = key_pos[None, :] <= self.positions[:num_tokens, None]  # [N, L]
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("nhgl,nlhd->nhgd", probs, values)
        return out.reshape(num_tokens, num_q_heads, head_dim).to(q.dtype)


class SplitAttention(AttentionContext):
    """Two contexts in one forward: rows [0, first_rows) attend through `first`, the next `second_rows` through
    `second` (a decode batch and prompts prefilled in the same LM step: one pass over the weights for both).
    Fill each part with its own `fill`, then `join()` copies their per-token indices into this context's,
    which the model reads for the K/V writes. With FlashInfer the two parts need separate workspaces: both
    are planned before either runs."""

    def __init__(self, first: AttentionContext, second: AttentionContext, first_rows: int, second_rows: int) -> None:
        super().__init__(first.kv, first.max_seqs + second.max_seqs, first_rows + second_rows, first.device)
        self.first, self.second, self.first_rows, self.second_rows = first, second, first_rows, second_rows

    def join(self) -> None:
        a, b = self.first_rows, self.second_rows
        for name in ("page_idx", "page_off", "positions"):
            torch.cat([getattr(self.first, name)[:a], getattr(self.second, name)[:b]], out=getattr(self, name))

    def fill(self, seqs: Sequence[SeqSlice]) -> None:
        raise TypeError("a SplitAttention is filled part by part (first.fill, second.fill), then join()")

    def _fill(self, seqs: Sequence[SeqSlice]) -> None:  # pragma: no cover (fill refuses)
        raise TypeError("a SplitAttention is filled part by part")

    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        a = self.first_rows
        return torch.cat([self.first.attend(layer, q[:a]), self.second.attend(layer, q[a:])])

    def norm_rope_attend(self, layer: int, qkv: torch.Tensor, positions: torch.Tensor, num_q_heads: int,
                         num_kv_heads: int, head_dim: int, q_norm: torch.Tensor, k_norm: torch.Tensor,
                         inv_freq: torch.Tensor, eps: float, impl: str, x: torch.Tensor | None = None,
                         x_eps: float = 1e-6) -> torch.Tensor:
        """Each part through its own `norm_rope_attend`, so that a mixed step's decode rows take the decode
        context's path (the paged decode kernel with the rotary inside: one launch a layer, as in a decode step)
        rather than a norm-rope kernel over every row and then each part's attention. The parts write their
        K/V into disjoint pages (a padding row's scratch page aside, whose outputs nobody reads), so doing the
        decode rows first changes nothing the real rows read."""
        a, b = self.first_rows, self.second_rows
        rows = (slice(0, a), slice(a, a + b))
        outs = [part.norm_rope_attend(layer, qkv[r], positions[r], num_q_heads, num_kv_heads, head_dim, q_norm,
                                      k_norm, inv_freq, eps, impl, x=None if x is None else x[r], x_eps=x_eps)
                for part, r in zip((self.first, self.second), rows)]
        return torch.cat(outs)


class FlashInferAttention(AttentionContext):
    """FlashInfer paged kernels. Decode (one new token per sequence) uses the decode wrapper; anything else
    the prefill wrapper. `plan()` runs on the host from CPU index tensors, so it never syncs the device
    (pitfalls in ../shared/gpu/README.md); graph mode keeps per-bucket wrappers with their own buffers."""

    def __init__(self, kv: KVCache, max_seqs: int, max_tokens: int, max_pages_per_seq: int, device: torch.device,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, is_decode: bool, use_cuda_graph: bool,
                 workspace: torch.Tensor) -> None:
        super().__init__(kv, max_seqs, max_tokens, device)
        import flashinfer  # noqa: PLC0415 (GPU-only dependency)

        self.is_decode = is_decode
        self.pad_rows = use_cuda_graph  # a graph bucket always runs max_seqs rows
        self.num_q_heads, self.num_kv_heads, self.head_dim = num_q_heads, num_kv_heads, head_dim
        self.dtype = kv.layers[0].dtype
        self._planned = None  # an event after the last plan()'s copies were queued
        if is_decode:
            buffers = {}
            if use_cuda_graph:
                buffers = dict(
                    paged_kv_indptr_buffer=torch.zeros(max_seqs + 1, dtype=torch.int32, device=device),
                    paged_kv_indices_buffer=torch.zeros(max_seqs * max_pages_per_seq, dtype=torch.int32, device=device),
                    paged_kv_last_page_len_buffer=torch.zeros(max_seqs, dtype=torch.int32, device=device),
                )
            self.decode_kernel = resolve_decode_kernel(decode_kernel(), max_seqs, is_hopper(device))
            if self.decode_kernel == "triton":
                raise ValueError("the decode kernel 'triton' is PagedDecodeAttention's, not FlashInfer's: build "
                                 "the context with make_paged_context")
            tensor_cores = self.decode_kernel != "cuda-cores"
            if tensor_cores:
                buffers["backend"] = "fa2" if self.decode_kernel == "fa2-nosplit" else "fa3"
            self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                workspace, "NHD", use_cuda_graph=use_cuda_graph, use_tensor_cores=tensor_cores, **buffers)
        else:
            buffers = {}
            if use_cuda_graph:  # graphed prefill: a fixed number of prompts of one padded length (runner.py)
                buffers = dict(
                    qo_indptr_buf=torch.zeros(max_seqs + 1, dtype=torch.int32, device=device),
                    paged_kv_indptr_buf=torch.zeros(max_seqs + 1, dtype=torch.int32, device=device),
                    paged_kv_indices_buf=torch.zeros(max_seqs * max_pages_per_seq, dtype=torch.int32, device=device),
                    paged_kv_last_page_len_buf=torch.zeros(max_seqs, dtype=torch.int32, device=device),
                )
            self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                workspace, "NHD", use_cuda_graph=use_cuda_graph, **buffers)

    def _fill(self, seqs: Sequence[SeqSlice]) -> None:
        ps = self.kv.page_size
        indptr, indices, last_len, qo_indptr = csr_page_table(seqs, self.kv, self.max_seqs if self.pad_rows else 0)
        # Index arrays FlashInfer reads on the host stay on the CPU (pinned: their copies stay asynchronous);
        # the page indices go to the device first, since plan() copies CPU indices synchronously (0.6).
        def host(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int32).pin_memory()

        indices_dev = upload(torch.tensor(indices, dtype=torch.int32), self.device)
        # plan() stages its schedule in one pinned buffer per wrapper and copies it to the device on the stream:
        # with the host a step ahead of the GPU (the asynchronous loop), the previous plan's copy may not have
        # run yet. Wait for it (it ran long ago unless a prefill of the step in flight still precedes it).
        if self._planned is not None:
            self._planned.synchronize()
        if self.is_decode:
            extra = {"disable_split_kv": True} if self.decode_kernel == "fa2-nosplit" else {}
            self.wrapper.plan(host(indptr), indices_dev, host(last_len),
                              self.num_q_heads, self.num_kv_heads, self.head_dim, ps,
                              q_data_type=self.dtype, kv_data_type=self.dtype, **extra)
        else:
            self.wrapper.plan(host(qo_indptr), host(indptr), indices_dev, host(last_len),
                              self.num_q_heads, self.num_kv_heads, self.head_dim, ps,
                              causal=True, q_data_type=self.dtype, kv_data_type=self.dtype)
        self._planned = torch.cuda.Event()
        self._planned.record()

    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        return self.wrapper.run(q.to(self.dtype).contiguous(), self.kv.layers[layer])


class PagedDecodeAttention(AttentionContext):
    """Decode steps (one new token a sequence) on our paged decode kernel (runtime/kernels/paged_decode.py).
    The page table is FlashInfer's CSR form in one device buffer, [indptr | last page fills | page indices],
    so a step uploads it in one copy; graph mode pads the rows as FlashInferAttention does."""

    def __init__(self, kv: KVCache, max_seqs: int, max_pages_per_seq: int, device: torch.device,
                 use_cuda_graph: bool, impl: str = "triton") -> None:
        super().__init__(kv, max_seqs, max_seqs, device)
        self.pad_rows = use_cuda_graph
        self.impl = impl
        self.dtype = kv.layers[0].dtype
        self._table = torch.ones(2 * max_seqs + 1 + max_seqs * max_pages_per_seq, dtype=torch.int32, device=device)
        self._table[: max_seqs + 1] = 0  # indptr: no pages until the first fill
        self._views = (self._table[: max_seqs + 1], self._table[2 * max_seqs + 1 :],
                       self._table[max_seqs + 1 : 2 * max_seqs + 1])  # indptr, indices, last page fills
        self._table_staging = None  # HostStaging, on the first fill

    def _fill(self, seqs: Sequence[SeqSlice]) -> None:
        """The CSR table built with numpy in the staging buffer: [indptr (max_seqs + 1) | last page fills
        (max_seqs) | page indices]; graph mode pads rows to max_seqs with one token on the scratch page, eager
        mode repeats the last indptr and fills 1 past the batch; only the used prefix is uploaded."""
        num_total = self._num_total  # fill's, from the same rows
        assert num_total is not None, "a decode context takes one new token a sequence"
        if self._table_staging is None:
            self._table_staging = HostStaging(self._table.numel(), torch.int32, self.device)
        ms, ps, n = self.max_seqs, self.kv.page_size, len(seqs)
        host = self._table_staging.take()
        num_pages = (num_total + ps - 1) // ps
        rows = ms if self.pad_rows else n  # padding rows: one page (the scratch page), one token
        indptr, last_len = host[: ms + 1], host[ms + 1 : 2 * ms + 1]
        indptr[0] = 0
        np.cumsum(num_pages, out=indptr[1 : n + 1])
        indptr[n + 1 : rows + 1] = indptr[n] + np.arange(1, rows - n + 1)
        indptr[rows + 1 :] = indptr[rows]
        last_len[:n] = num_total - (num_pages - 1) * ps
        last_len[n:] = 1
        num_real = int(indptr[n])
        indices = host[2 * ms + 1 : 2 * ms + 1 + int(indptr[rows])]
        indices[:num_real] = np.fromiter(chain.from_iterable(seq.pages[:k] for seq, k in zip(seqs, num_pages.tolist())),
                                         dtype=np.int32, count=num_real)
        indices[num_real:] = self.kv.scratch_page
        self._table_staging.upload(self._table, 2 * ms + 1 + len(indices))

    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        return paged_decode_attention(q.to(self.dtype).contiguous(), self.kv.layers[layer], *self._views,
                                      impl=self.impl)

    def norm_rope_attend(self, layer: int, qkv: torch.Tensor, positions: torch.Tensor, num_q_heads: int,
                         num_kv_heads: int, head_dim: int, q_norm: torch.Tensor, k_norm: torch.Tensor,
                         inv_freq: torch.Tensor, eps: float, impl: str, x: torch.Tensor | None = None,
                         x_eps: float = 1e-6) -> torch.Tensor:
        """With `VOXRT_PAGED_DECODE_ROPE` on (the default; read when called: a graph keeps its capture's choice)
        and the kernels' impl, the rotary kernel's work runs inside the paged decode kernel: one launch a layer."""
        if impl != "triton" or self.impl != "triton" or not knobs.paged_decode_rope():
            return super().norm_rope_attend(layer, qkv, positions, num_q_heads, num_kv_heads, head_dim, q_norm,
                                            k_norm, inv_freq, eps, impl, x=x, x_eps=x_eps)
        return paged_decode_rope_attention(qkv, num_q_heads, num_kv_heads, head_dim, q_norm, k_norm, inv_freq, eps,
                                           positions, self.page_idx, self.page_off, self.kv.layers[layer],
                                           *self._views, impl="triton", x=x, x_eps=x_eps)


def csr_page_table(seqs: Sequence[SeqSlice], kv: KVCache, pad_to: int = 0) -> tuple[list, list, list, list]:
    """FlashInfer's CSR page table of a batch: indptr, page indices, last page fills, and qo_indptr (the new
    tokens' offsets). `pad_to`: rows up to that many padded with one-token sequences on the scratch page (a
    graph bucket always runs its full size)."""
    ps = kv.page_size
    rows = list(seqs) + [SeqSlice([kv.scratch_page], 1, 1)] * max(0, pad_to - len(seqs))
    indptr, indices, last_len, qo_indptr = [0], [], [], [0]
    for seq in rows:
        num_pages = -(-seq.num_total // ps)
        indices.extend(seq.pages[:num_pages])
        indptr.append(len(indices))
        last_len.append(seq.num_total - (num_pages - 1) * ps)
        qo_indptr.append(qo_indptr[-1] + seq.num_new)
    return indptr, indices, last_len, qo_indptr


def _token_index(seqs: Sequence[SeqSlice], page_size: int, out: np.ndarray) -> tuple[int, np.ndarray | None]:
    """Writes [page index, offset, position] of every new token of `seqs` into `out[:, :n]` ([3, >= n]);
    returns n, and the sequences' lengths when each has one new token (else None). A decode batch (the step at
    saturation) by numpy over the rows; a prefill's tokens one by one."""
    n = len(seqs)
    if all(seq.num_new == 1 for seq in seqs):
        assert n <= out.shape[1], (n, out.shape[1])
        num_total = np.fromiter((seq.num_total for seq in seqs), dtype=np.int64, count=n)
        positions = num_total - 1
        out[2, :n] = positions
        out[1, :n] = positions % page_size
        out[0, :n] = np.fromiter((seq.pages[(seq.num_total - 1) // page_size] for seq in seqs), dtype=np.int64,
                                 count=n)
        return n, num_total
    page_idx, page_off, positions = [], [], []
    for seq in seqs:
        for pos in range(seq.num_total - seq.num_new, seq.num_total):
            page_idx.append(seq.pages[pos // page_size])
            page_off.append(pos % page_size)
            positions.append(pos)
    n = len(positions)
    assert n <= out.shape[1], (n, out.shape[1])
    out[0, :n], out[1, :n], out[2, :n] = page_idx, page_off, positions
    return n, None


def is_hopper(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9


def make_paged_context(kv: KVCache, max_seqs: int, max_tokens: int, max_pages_per_seq: int, device: torch.device,
                       num_q_heads: int, num_kv_heads: int, head_dim: int, is_decode: bool, use_cuda_graph: bool,
                       workspace: torch.Tensor) -> AttentionContext:
    """The GPU attention context of a stage: decode on the kernel the decode rule picks for its rows (ours, or
    one of FlashInfer's), anything else FlashInfer's prefill."""
    if is_decode and resolve_decode_kernel(decode_kernel(), max_seqs, is_hopper(device)) == "triton":
        return PagedDecodeAttention(kv, max_seqs, max_pages_per_seq, device, use_cuda_graph)
    return FlashInferAttention(kv, max_seqs, max_tokens, max_pages_per_seq, device, num_q_heads, num_kv_heads,
                               head_dim, is_decode, use_cuda_graph, workspace)


def flashinfer_available() -> bool:
    try:
        import flashinfer  # noqa: F401, PLC0415
    except Exception:  # noqa: BLE001 (any import failure means: not usable)
        return False
    return True
