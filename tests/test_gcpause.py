"""The garbage-collector pause meter and the start-up heap freeze (voxrt/gcpause.py)."""

import gc

import pytest

from voxrt import gcpause
from voxrt.gcpause import YOUNG_THRESHOLD, GcPauses, raise_young_threshold, settle_heap


def test_pauses_count_collections_and_reset_on_take():
    pauses = GcPauses().install()
    try:
        gc.collect()
        gc.collect(0)
        ms, count = pauses.take()
        assert count >= 2
        assert ms >= 0.0 and pauses.max_ms >= 0.0
        assert pauses.total_count >= 2
        assert pauses.take() == (0.0, 0)  # take() starts a new interval
    finally:
        pauses.uninstall()
    gc.collect()
    assert pauses.take() == (0.0, 0)  # uninstalled: nothing more is counted
    pauses.uninstall()  # a second uninstall is harmless


def test_pauses_are_kept_per_generation_with_the_cycles_freed():
    pauses = GcPauses().install()
    try:
        young = pauses.by_generation[0].count
        full = pauses.by_generation[2].count
        freed = pauses.collected[2]
        for _ in range(10):  # unreachable cycles for the full collection to free
            a: list = []
            a.append(a)
        del a
        gc.collect()  # a full collection (generation 2)
        gc.collect(0)
        assert pauses.by_generation[2].count >= full + 1
        assert pauses.by_generation[0].count >= young + 1
        assert pauses.collected[2] >= freed + 10
        assert sum(h.count for h in pauses.by_generation) == pauses.histogram.count
    finally:
        pauses.uninstall()


def test_install_twice_registers_once():
    pauses = GcPauses()
    pauses.install()
    pauses.install()
    try:
        assert sum(1 for cb in gc.callbacks if cb == pauses._callback) == 1
    finally:
        pauses.uninstall()


def test_settle_heap_freezes_survivors():
    probe = [object()]  # a long-lived container the collector tracks
    assert any(o is probe for o in gc.get_objects())
    before = gc.get_freeze_count()
    try:
        frozen = settle_heap()
        assert frozen >= before
        assert frozen > 0  # this test process holds many long-lived objects
        # frozen objects leave the collected generations; the count only falls as frozen objects are freed
        # (another thread of the test process may free some at any time), never rises without a new freeze
        assert not any(o is probe for o in gc.get_objects())
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
    assert any(o is probe for o in gc.get_objects())


def test_raise_young_threshold_raises_only_the_young_generations_and_never_lowers_it():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert raise_young_threshold() == (YOUNG_THRESHOLD, 10, 10)
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        gc.set_threshold(50_000, 7, 3)
        assert raise_young_threshold(20_000) == (50_000, 7, 3)  # a higher one is kept
    finally:
        gc.set_threshold(*before)


def test_the_young_threshold_can_be_set_by_the_environment(monkeypatch):
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        monkeypatch.setenv("VOXRT_GC_YOUNG_THRESHOLD", "2500")
        assert raise_young_threshold() == (2500, 10, 10)
        gc.set_threshold(700, 10, 10)
        monkeypatch.setenv("VOXRT_GC_YOUNG_THRESHOLD", "700")  # Python's own: the collector as Python sets it
        assert raise_young_threshold() == (700, 10, 10)
        monkeypatch.setenv("VOXRT_GC_YOUNG_THRESHOLD", " ")
        assert raise_young_threshold() == (YOUNG_THRESHOLD, 10, 10)
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("bad", ["0", "-5", "many", "1e4"])
def test_a_bad_young_threshold_in_the_environment_is_a_clear_error(monkeypatch, bad):
    before = gc.get_threshold()
    monkeypatch.setenv("VOXRT_GC_YOUNG_THRESHOLD", bad)
    with pytest.raises(ValueError, match="VOXRT_GC_YOUNG_THRESHOLD must be a positive integer"):
        raise_young_threshold()
    assert gc.get_threshold() == before


def test_the_callback_never_raises_at_the_recursion_limit(monkeypatch):
    """A collection that starts a frame or two under the recursion limit: the callback's own calls raise
    RecursionError there, which it swallows (gc would report it as unraisable), and that pause is not counted."""
    pauses = GcPauses()

    def too_deep():
        raise RecursionError("maximum recursion depth exceeded in comparison")
    monkeypatch.setattr(gcpause.time, "perf_counter", too_deep)
    pauses._callback("start", {"generation": 0})
    pauses._callback("stop", {"generation": 0, "collected": 3})
    assert pauses.count == 0 and pauses.total_count == 0 and pauses.collected == [0, 0, 0]
    monkeypatch.undo()
    pauses._callback("start", {"generation": 1})
    pauses._callback("stop", {"generation": 1, "collected": 2})
    assert pauses.count == 1 and pauses.collected == [0, 2, 0]
