"""The host fill of a step (issue 13): the numpy fills and one-copy uploads of attention.py and runner.py write
exactly the tensors the per-token Python lists of the previous fill did (kept here as the reference), over
steps that change the batch, grow a page, mix prefills with decodes and reuse a cancelled request's pages;
and each slot's sampling parameters (SlotSampling) are its current request's, also after the slot is reused.
"""

from __future__ import annotations

import random

import pytest
import torch

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.attention import (HostStaging, KVCache, PagedDecodeAttention, SeqSlice, TorchAttention,
                                            csr_page_table)
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.sampling import PADDING_PARAMS, SamplingTensors

CPU = torch.device("cpu")
PAGE_SIZE, NUM_PAGES = 4, 40


def make_core(max_batch_size: int) -> EngineCore:  # as tests/engine/conftest.py's (tiny-lite on the CPU)
    return EngineCore(EngineConfig(model="tiny-lite", device="cpu", max_batch_size=max_batch_size, max_seq_len=512))


def submit(core: EngineCore, rid: str, text: str, params: SamplingParams):
    return core.submit(SubmitRequest(rid, "default", params, text, True))


def old_token_index(seqs, kv: KVCache, max_tokens: int) -> torch.Tensor:
    """The previous AttentionContext.fill's lists: [page index, offset, position] of each new token, padded."""
    ps = kv.page_size
    page_idx, page_off, positions = [], [], []
    for seq in seqs:
        for pos in range(seq.num_total - seq.num_new, seq.num_total):
            page_idx.append(seq.pages[pos // ps])
            page_off.append(pos % ps)
            positions.append(pos)
    pad = max_tokens - len(positions)
    return torch.tensor([page_idx + [kv.scratch_page] * pad, page_off + [0] * pad, positions + [0] * pad])


def old_paged_table(seqs, kv: KVCache, max_seqs: int, pad_rows: bool) -> torch.Tensor:
    """The previous PagedDecodeAttention._fill's upload: head (indptr | last page fills) + page indices."""
    indptr, indices, last_len, _ = csr_page_table(seqs, kv, max_seqs if pad_rows else 0)
    pad = max_seqs + 1 - len(indptr)
    head = indptr + [indptr[-1]] * pad + last_len + [1] * (max_seqs - len(last_len))
    return torch.tensor(head + indices, dtype=torch.int32)


class Batch:
    """Sequences on shuffled pages that grow token by token; a finished one's pages go back and are reused."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.free = list(range(NUM_PAGES))
        self.rng.shuffle(self.free)
        self.seqs: list[tuple[list[int], int]] = []  # (pages, tokens so far)

    def admit(self, prompt_len: int) -> None:
        self.seqs.append(([], 0))
        self._grow(len(self.seqs) - 1, prompt_len)

    def _grow(self, i: int, num_new: int) -> None:
        pages, total = self.seqs[i]
        total += num_new
        while len(pages) * PAGE_SIZE < total:
            pages.append(self.free.pop())
        self.seqs[i] = (pages, total)

    def drop(self, i: int) -> None:
        pages, _ = self.seqs.pop(i)
        self.free += pages  # a cancelled request's pages: the next admission takes them

    def decode_step(self) -> list[SeqSlice]:
        for i in range(len(self.seqs)):
            self._grow(i, 1)
        return [SeqSlice(list(p), 1, t) for p, t in self.seqs]


def steps(seed: int = 0):
    """(kind, seqs) per step: decodes of a changing batch, pages grown, a request dropped and its pages reused,
    prefills, and a step whose rows mix prefill chunks with decodes."""
    b = Batch(seed)
    for n in (5, 3, 9):
        b.admit(n)
    yield "prefill", [SeqSlice(list(p), t, t) for p, t in b.seqs]
    for step in range(9):  # 9 decode steps: every sequence crosses a page boundary at least twice
        if step == 3:
            b.admit(2)  # the batch grows
            yield "prefill", [SeqSlice(list(b.seqs[-1][0]), 2, 2)]
        if step == 5:
            b.drop(1)  # cancelled: its pages return and the next prompt reuses them
            b.admit(7)
            yield "prefill", [SeqSlice(list(b.seqs[-1][0]), 7, 7)]
        yield "decode", b.decode_step()
    mixed = b.decode_step()[:2]
    b.admit(3)
    yield "mixed", mixed + [SeqSlice(list(b.seqs[-1][0]), 3, 3)]  # decodes, then a prompt's tokens


def test_staging_ring_alternates_buffers_and_uploads_a_prefix():
    dst = torch.full((6,), -1, dtype=torch.int64)
    staging = HostStaging(6, torch.int64, CPU)
    first = staging.take()
    first[:] = [1, 2, 3, 4, 5, 6]
    staging.upload(dst, 4)
    assert dst.tolist() == [1, 2, 3, 4, -1, -1]
    second = staging.take()
    assert second is not first  # the ring moved on: the first buffer's copy may still be in flight on a GPU
    second[:] = 7
    staging.upload(dst)
    assert dst.tolist() == [7] * 6
    assert staging.take() is first


class _Event:
    """A copy's event as HostStaging sees it (the CPU records none)."""

    def __init__(self, done: bool) -> None:
        self.done = done
        self.waited = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited = True


def test_staging_ring_grows_instead_of_waiting_for_a_queued_copy():
    """An owner filled several times a step (sub-steps): the buffer whose copy is still queued is left alone
    and a new one taken, without a wait; a buffer whose copy ran is reused; past MAX_DEPTH it waits."""
    dst = torch.zeros(3, dtype=torch.int64)
    staging = HostStaging(3, torch.int64, CPU)
    a = staging.take()
    staging.upload(dst)
    b = staging.take()
    staging.upload(dst)
    queued = _Event(done=False)
    staging._copied[0] = queued  # a's copy still waits on the stream
    c = staging.take()
    assert c is not a and c is not b and staging.depth == 3 and not queued.waited
    c[:] = 5
    staging.upload(dst)
    assert dst.tolist() == [5, 5, 5]
    queued.done = True
    assert staging.take() is a  # its copy ran: reused
    staging.upload(dst)
    for i in range(len(staging._copied)):
        staging._copied[i] = _Event(done=False)
    staging.MAX_DEPTH = staging.depth  # no more room: the oldest copy is waited for
    waited_on = staging._copied[staging._next]
    staging.take()
    assert waited_on.waited and staging.depth == staging.MAX_DEPTH


@pytest.mark.parametrize("graphed", [False, True])
def test_token_index_and_paged_table_equal_the_previous_lists(graphed):
    kv = KVCache(1, NUM_PAGES, PAGE_SIZE, 1, 4, CPU, torch.float32)
    max_seqs, max_tokens = 8, 24
    torch_ctx = TorchAttention(kv, max_seqs, max_tokens, NUM_PAGES if graphed else None, CPU)
    paged = PagedDecodeAttention(kv, max_seqs, NUM_PAGES, CPU, use_cuda_graph=graphed)
    seen = set()
    for kind, seqs in steps():
        seen.add(kind)
        torch_ctx.fill(seqs)
        want = old_token_index(seqs, kv, max_tokens)
        assert torch.equal(torch.stack([torch_ctx.page_idx, torch_ctx.page_off, torch_ctx.positions]), want), kind
        if kind != "decode":
            continue
        paged.fill(seqs)
        want = old_token_index(seqs, kv, max_seqs)
        assert torch.equal(torch.stack([paged.page_idx, paged.page_off, paged.positions]), want)
        table = old_paged_table(seqs, kv, max_seqs, graphed)
        assert torch.equal(paged._table[: len(table)], table)
    assert seen == {"prefill", "decode", "mixed"}


def test_paged_table_of_an_empty_step_is_all_padding():
    """A graph capture's dummy fill (no rows): every row one token on the scratch page."""
    kv = KVCache(1, NUM_PAGES, PAGE_SIZE, 1, 4, CPU, torch.float32)
    paged = PagedDecodeAttention(kv, 4, 3, CPU, use_cuda_graph=True)
    paged.fill([])
    table = old_paged_table([], kv, 4, True)
    assert torch.equal(paged._table[: len(table)], table)
    assert paged.page_idx.tolist() == [kv.scratch_page] * 4


def _params(i: int) -> SamplingParams:
    return SamplingParams(temperature=0.5 + 0.1 * i, top_k=10 + i, top_p=1.0 - 0.05 * i,
                          repetition_penalty=1.0 + 0.01 * i, greedy=i % 3 == 0,
                          num_frames=None if i % 2 else 40)


def _assert_rows(core, requests) -> None:
    """The slots' rows of slot_sampling are their requests' parameters, exactly as from_params builds them."""
    runner = core.runner
    slots = torch.tensor([r.slot for r in requests])
    got = runner.slot_sampling.gather(slots)
    want = SamplingTensors.from_params([r.params for r in requests], CPU)
    for name in ("temperature", "top_k", "top_p", "repetition_penalty", "greedy", "allow_stop"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name


def test_slot_sampling_follows_each_slots_request_through_reuse():
    core = make_core(max_batch_size=4)
    requests = [submit(core, f"r{i}", "hello there", params=_params(i)) for i in range(3)]
    core.step()  # the prefills write their slots' rows
    _assert_rows(core, requests)
    scratch = core.runner.slot_sampling.gather(torch.tensor([core.runner.scratch_slot]))
    pad = SamplingTensors.from_params([PADDING_PARAMS], CPU)
    assert all(torch.equal(getattr(scratch, n), getattr(pad, n)) for n in ("temperature", "top_k", "greedy"))
    old_slot = requests[1].slot
    core.cancel("r1")
    reused = submit(core, "r9", "a new one", params=_params(7))
    core.step()
    core.step()
    assert reused.slot == old_slot  # the freed slot went to the next admission
    _assert_rows(core, [requests[0], requests[2], reused])


def test_decode_fill_uploads_the_previous_ids():
    """decode_filler's one upload: text ids then slots, padding rows 0 and the scratch slot, as the two lists
    uploaded before; its context's token index as the previous lists."""
    core = make_core(max_batch_size=8)
    for i in range(3):
        submit(core, f"r{i}", "some words to say", params=_params(i))
    core.step()
    core.step()
    runner = core.runner
    items = core.scheduler.schedule(0, core.codec.lanes_free()).decode
    assert items
    bufs = runner._make_decode_buffers(8, False)
    runner.decode_filler(items)(bufs, 8)
    pad = 8 - len(items)
    assert bufs.text_ids.tolist() == [i.text_id for i in items] + [0] * pad
    assert bufs.slots.tolist() == [i.request.slot for i in items] + [runner.scratch_slot] * pad
    seqs = [SeqSlice(i.request.pages, 1, i.position + 1) for i in items]
    want = old_token_index(seqs, runner.kv, 8)
    assert torch.equal(torch.stack([bufs.attn.page_idx, bufs.attn.page_off, bufs.attn.positions]), want)
