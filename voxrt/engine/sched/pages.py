"""KV-cache pages and per-request state slots, with refcounts and an integrity check.

A page holds `page_size` tokens of K and V for every layer (FlashInfer's paged layout). A slot is one row
of the device-side per-request state (codec caches, the sampler's repetition history). Both pools are
plain bookkeeping; the tensors live in the runner.
"""

from __future__ import annotations


class PoolError(AssertionError):
    """An invariant of a pool broke: a bug, never a user error."""


class PagePool:
    """Fixed set of page ids 0..num_pages-1 with refcounts (shared prefixes may hold a page twice)."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"need num_pages >= 1 and page_size >= 1, got {num_pages}, {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._refcounts = [0] * num_pages
        self._free: list[int] = list(range(num_pages - 1, -1, -1))  # pop() hands out low ids first

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_pages - len(self._free)

    def pages_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def can_allocate(self, num_pages: int) -> bool:
        return num_pages <= len(self._free)

    def allocate(self, num_pages: int) -> list[int]:
        if num_pages > len(self._free):
            raise PoolError(f"allocate({num_pages}) with {len(self._free)} free pages; check can_allocate first")
        pages = [self._free.pop() for _ in range(num_pages)]
        for page in pages:
            self._refcounts[page] = 1
        return pages

    def share(self, pages: list[int]) -> None:
        for page in pages:
            if self._refcounts[page] < 1:
                raise PoolError(f"share of free page {page}")
            self._refcounts[page] += 1

    def release(self, pages: list[int]) -> None:
        for page in pages:
            count = self._refcounts[page]
            if count < 1:
                raise PoolError(f"double release of page {page}")
            self._refcounts[page] = count - 1
            if count == 1:
                self._free.append(page)

    def check_integrity(self, held: dict[str, list[int]] | None = None) -> None:
        """Raises PoolError unless the free list and refcounts agree, and (when `held` maps each owner to
        its pages) every refcount equals the number of owners holding that page."""
        free = set(self._free)
        if len(free) != len(self._free):
            raise PoolError("a page is twice in the free list")
        for page, count in enumerate(self._refcounts):
            if count < 0:
                raise PoolError(f"page {page} has refcount {count}")
            if (count == 0) != (page in free):
                raise PoolError(f"page {page}: refcount {count} but {'in' if page in free else 'not in'} free list")
        if held is not None:
            expected = [0] * self.num_pages
            for pages in held.values():
                for page in pages:
                    expected[page] += 1
            if expected != self._refcounts:
                diff = [p for p in range(self.num_pages) if expected[p] != self._refcounts[p]]
                raise PoolError(f"refcounts differ from owners for pages {diff[:10]}")


# Codec slots per request a step can decode (`default_num_slots`). A slot is a row of the codec's streaming state
# (~2 MB for Qwen3-TTS's codec); a request holds it from admission until its LAST chunk is decoded, so requests
# whose generation is over but whose later chunks wait for the background lane (decoded by deadline, seconds
# ahead of playback) keep theirs. With 2 per batch row (256 at batch 128) the slots ran out at 104 req/s on the
# H200 and admission waited for background launches to return them while the batch had room (decode batch p50
# 76 of 128, 180 requests waiting: bench/results/2026-12-03-knee-104).
SLOTS_PER_BATCH_ROW = 8


def default_num_slots(max_batch_size: int) -> int:
    return SLOTS_PER_BATCH_ROW * max_batch_size


class SlotPool:
    """Slots 0..num_slots-1 of per-request device state. Exclusive: one owner each."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"need num_slots >= 1, got {num_slots}")
        self.num_slots = num_slots
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise PoolError("allocate() with no free slot")
        slot = self._free.pop()
        self._used.add(slot)
        return slot

    def release(self, slot: int) -> None:
        if slot not in self._used:
            raise PoolError(f"release of slot {slot} that is not in use")
        self._used.remove(slot)
        self._free.append(slot)

    def check_integrity(self, held: set[int] | None = None) -> None:
        if len(set(self._free)) != len(self._free) or set(self._free) & self._used:
            raise PoolError("slot both free and used, or twice free")
        if len(self._free) + len(self._used) != self.num_slots:
            raise PoolError("slots lost")
        if held is not None and held != self._used:
            raise PoolError(f"slots in use {sorted(self._used)} differ from held {sorted(held)}")
