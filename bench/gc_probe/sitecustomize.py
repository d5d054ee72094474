"""A probe of every garbage collection in each Python process started with this directory first on PYTHONPATH
(bench/results/2026-12-05-gateway-gc/): gc.callbacks times each collection, and every 2 s the process writes
its pauses (generation, ms, wall time) and frozen object count to $GC_PROBE_DIR/<pid>.json (default
/tmp/gcstats). With GC_PROBE_CENSUS=1 also its tracked objects and their 25 most common types: that census
holds the GIL for tens of ms a time in a process of ~200,000 objects, so runs that time anything leave it off.
GC_PROBE_SAVEALL=1 counts what dies in reference cycles, by type (found the gateway's cycle per WebSocket
connection: bench/results/2026-12-05-h100-opentext/); GC_PROBE_YOUNG=1 what young collections walk. Both are
diagnostics that change the timings. `python bench/gc_probe/show.py` sums it up."""

import collections
import gc
import json
import os
import sys
import threading
import time

_OUT = os.environ.get("GC_PROBE_DIR", "/tmp/gcstats")
_CENSUS = os.environ.get("GC_PROBE_CENSUS") == "1"
# GC_PROBE_SAVEALL=1: the collector keeps what it finds unreachable (gc.DEBUG_SAVEALL) instead of freeing it, and
# each write counts it by type (`garbage`, cumulative): the objects that die in reference cycles, which only a
# collection frees, and which the young collections then carry into the older generations. Diagnostic only: the
# process's memory grows, and its pauses are not the real ones.
_SAVEALL = os.environ.get("GC_PROBE_SAVEALL") == "1"
_garbage: collections.Counter = collections.Counter()
_kept: list = []
# GC_PROBE_YOUNG=1: at every 20th collection of generation 0 or 1, what it is about to walk: the objects in the
# young generations and the largest containers among them (a big young list or dict makes a "young"
# collection long). Diagnostic only (the look takes time inside the collector's callback).
_YOUNG = os.environ.get("GC_PROBE_YOUNG") == "1"
_young: list = []
_num_young = [0]


def _look_young(generation):
    _num_young[0] += 1
    if _num_young[0] % 20:
        return
    objects = []
    for g in range(generation + 1):
        objects.extend(gc.get_objects(generation=g))
    sized = []
    for o in objects:
        try:
            n = len(o)
        except Exception:  # noqa: BLE001
            continue
        sized.append((n, f"{type(o).__module__}.{type(o).__qualname__}"))
    sized.sort(reverse=True)
    _young.append({"generation": generation, "objects": len(objects), "elements": sum(n for n, _ in sized),
                   "largest": sized[:5]})
    del objects
_pauses: list = []
_started: list = []


def _callback(phase, info):
    if phase == "start":
        if _YOUNG and info.get("generation") in (0, 1):
            _look_young(info["generation"])
        _started[:] = [time.perf_counter(), info.get("generation")]
    elif _started:
        t0, generation = _started
        _pauses.append((generation, (time.perf_counter() - t0) * 1e3, time.time()))
        _started.clear()


def _dump_forever():
    os.makedirs(_OUT, exist_ok=True)
    while True:
        time.sleep(2)
        data = {"argv": sys.argv[:6], "pauses": _pauses, "frozen": gc.get_freeze_count(), "t": time.time(),
                "objects": None, "top": []}
        if _YOUNG:
            data["young"] = _young[-30:]
        if _SAVEALL:
            gc.collect()  # every cycle made since the last write, whichever generation it had reached
            found, gc.garbage[:] = list(gc.garbage), []
            _garbage.update(f"{type(o).__module__}.{type(o).__qualname__}" for o in found)
            _kept.extend(found)  # kept reachable: cleared from gc.garbage, the next collection would count them again
            del found
            data["garbage"] = _garbage.most_common(40)
            data["garbage_total"] = sum(_garbage.values())
        if _CENSUS:
            objects = gc.get_objects()
            data.update(objects=len(objects), top=collections.Counter(type(o).__name__ for o in objects).most_common(25))
            del objects
        tmp = os.path.join(_OUT, f"{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, os.path.join(_OUT, f"{os.getpid()}.json"))


gc.callbacks.append(_callback)
if os.environ.get("GC_PROBE_THRESHOLD"):  # e.g. "10000,10,10": the collector's thresholds, for an A/B of them
    gc.set_threshold(*(int(x) for x in os.environ["GC_PROBE_THRESHOLD"].split(",")))
if _SAVEALL:
    gc.set_debug(gc.DEBUG_SAVEALL)
threading.Thread(target=_dump_forever, name="gc-probe", daemon=True).start()
