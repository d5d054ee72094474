"""PagePool and SlotPool: refcounts, sharing, double release, integrity checks, exclusivity."""

from __future__ import annotations

import pytest

from voxrt.engine.sched.pages import PagePool, PoolError, SlotPool


# ---- PagePool ------------------------------------------------------------------------------------------------


def test_page_pool_rejects_bad_sizes():
    with pytest.raises(ValueError):
        PagePool(0, 4)
    with pytest.raises(ValueError):
        PagePool(4, 0)


def test_fresh_page_pool_is_all_free_and_consistent():
    pool = PagePool(8, 4)
    assert pool.num_free == 8
    assert pool.num_used == 0
    pool.check_integrity()
    pool.check_integrity({})


def test_pages_for_tokens_rounds_up():
    pool = PagePool(8, 4)
    assert [pool.pages_for_tokens(n) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 1, 1, 1, 2, 2, 3]


def test_allocate_hands_out_distinct_low_ids_first():
    pool = PagePool(6, 4)
    first = pool.allocate(2)
    second = pool.allocate(3)
    assert first == [0, 1]
    assert second == [2, 3, 4]
    assert len(set(first) | set(second)) == 5
    assert pool.num_free == 1
    assert pool.num_used == 5
    pool.check_integrity({"a": first, "b": second})


def test_allocate_zero_pages_is_a_no_op():
    pool = PagePool(2, 4)
    assert pool.allocate(0) == []
    assert pool.num_free == 2


def test_can_allocate_and_over_allocation_raises():
    pool = PagePool(3, 4)
    assert pool.can_allocate(3)
    assert not pool.can_allocate(4)
    pool.allocate(2)
    assert pool.can_allocate(1)
    assert not pool.can_allocate(2)
    with pytest.raises(PoolError):
        pool.allocate(2)
    # A failed allocation takes nothing.
    assert pool.num_free == 1
    pool.check_integrity()


def test_release_returns_pages_and_they_are_reused():
    pool = PagePool(4, 4)
    pages = pool.allocate(3)
    pool.release(pages)
    assert pool.num_free == 4
    assert pool.num_used == 0
    pool.check_integrity({})
    again = pool.allocate(4)
    assert sorted(again) == [0, 1, 2, 3]


def test_double_release_raises_pool_error():
    pool = PagePool(4, 4)
    pages = pool.allocate(2)
    pool.release(pages)
    with pytest.raises(PoolError, match="double release"):
        pool.release(pages)
    # Still consistent after the refused release.
    pool.check_integrity({})
    assert pool.num_free == 4


def test_release_of_never_allocated_page_raises():
    pool = PagePool(4, 4)
    with pytest.raises(PoolError):
        pool.release([2])


def test_share_increments_refcount_and_page_frees_on_last_release():
    pool = PagePool(4, 4)
    pages = pool.allocate(2)
    pool.share(pages)  # a second owner of the same prefix
    pool.check_integrity({"owner": pages, "sharer": list(pages)})
    pool.release(pages)  # first owner gone: still held by the sharer
    assert pool.num_free == 2
    pool.check_integrity({"sharer": pages})
    pool.release(pages)  # last owner gone: free
    assert pool.num_free == 4
    pool.check_integrity({})
    with pytest.raises(PoolError):
        pool.release(pages)


def test_share_of_free_page_raises():
    pool = PagePool(4, 4)
    with pytest.raises(PoolError, match="share of free page"):
        pool.share([1])
    pages = pool.allocate(1)
    pool.release(pages)
    with pytest.raises(PoolError):
        pool.share(pages)


def test_integrity_with_held_detects_missing_owner():
    pool = PagePool(4, 4)
    a = pool.allocate(2)
    b = pool.allocate(1)
    pool.check_integrity({"a": a, "b": b})
    with pytest.raises(PoolError, match="differ from owners"):
        pool.check_integrity({"a": a})  # b's page is leaked as far as the owners know


def test_integrity_with_held_detects_owner_of_free_page():
    pool = PagePool(4, 4)
    a = pool.allocate(1)
    with pytest.raises(PoolError):
        pool.check_integrity({"a": a, "ghost": [3]})


def test_integrity_with_held_detects_refcount_mismatch_on_shared_page():
    pool = PagePool(4, 4)
    a = pool.allocate(2)
    pool.share(a)
    # Refcount 2 per page but only one owner listed.
    with pytest.raises(PoolError):
        pool.check_integrity({"a": a})
    # And the other way round: two owners listed but refcount 1.
    pool.release(a)
    with pytest.raises(PoolError):
        pool.check_integrity({"a": a, "b": a})
    pool.check_integrity({"a": a})


def test_integrity_detects_corrupted_free_list():
    pool = PagePool(4, 4)
    pool.allocate(1)
    pool._free.append(pool._free[0])  # a page twice in the free list
    with pytest.raises(PoolError, match="twice"):
        pool.check_integrity()


def test_integrity_detects_refcount_free_list_disagreement():
    pool = PagePool(4, 4)
    page = pool.allocate(1)[0]
    pool._refcounts[page] = 0  # refcount says free, free list says used
    with pytest.raises(PoolError):
        pool.check_integrity()


def test_counts_return_to_zero_after_mixed_use():
    pool = PagePool(16, 4)
    owners: dict[str, list[int]] = {}
    for i in range(5):
        owners[f"r{i}"] = pool.allocate(i % 3 + 1)
    owners["shared"] = list(owners["r1"])
    pool.share(owners["shared"])
    pool.check_integrity(owners)
    for name in list(owners):
        pool.release(owners.pop(name))
        pool.check_integrity(owners)
    assert pool.num_free == 16
    assert pool.num_used == 0


# ---- SlotPool ------------------------------------------------------------------------------------------------


def test_slot_pool_rejects_bad_size():
    with pytest.raises(ValueError):
        SlotPool(0)


def test_slots_are_exclusive_until_released():
    slots = SlotPool(3)
    got = [slots.allocate() for _ in range(3)]
    assert got == [0, 1, 2]
    assert slots.num_free == 0
    slots.check_integrity(set(got))
    with pytest.raises(PoolError):
        slots.allocate()
    slots.release(1)
    assert slots.allocate() == 1
    slots.check_integrity({0, 1, 2})


def test_slot_double_release_and_unknown_release_raise():
    slots = SlotPool(2)
    s = slots.allocate()
    slots.release(s)
    with pytest.raises(PoolError):
        slots.release(s)
    with pytest.raises(PoolError):
        slots.release(1)  # never allocated
    slots.check_integrity(set())
    assert slots.num_free == 2


def test_slot_integrity_with_held_detects_mismatch():
    slots = SlotPool(4)
    a = slots.allocate()
    b = slots.allocate()
    slots.check_integrity({a, b})
    with pytest.raises(PoolError):
        slots.check_integrity({a})
    with pytest.raises(PoolError):
        slots.check_integrity({a, b, 3})


def test_slot_integrity_detects_corruption():
    slots = SlotPool(3)
    s = slots.allocate()
    slots._free.append(s)  # both used and free
    with pytest.raises(PoolError):
        slots.check_integrity()
    slots._free.pop()
    slots._free.pop()  # a slot lost entirely
    with pytest.raises(PoolError, match="lost"):
        slots.check_integrity()


def test_slot_counts_return_to_zero():
    slots = SlotPool(4)
    held = [slots.allocate() for _ in range(4)]
    for s in reversed(held):
        slots.release(s)
    assert slots.num_free == 4
    slots.check_integrity(set())
