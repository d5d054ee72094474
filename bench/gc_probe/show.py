"""The gc probe's files (sitecustomize.py beside this): per `voxrt serve` process, its tracked and frozen objects,
its full (generation 2) collections and when, and the collections of its last 25 s (the serving window).

    python bench/gc_probe/show.py [DIR]
"""

import glob
import json
import os
import sys

directory = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GC_PROBE_DIR", "/tmp/gcstats")
for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
    data = json.loads(open(path).read())
    if "serve" not in data["argv"] or (data["frozen"] == 0 and len(data["pauses"]) < 50):
        continue  # the gateway, not the engine's spawn helpers
    end = data["t"]
    print(" ".join(data["argv"][:4]), f"tracked {data['objects'] if data['objects'] is not None else '(no census)'}, frozen {data['frozen']}")
    print("  full collections (ms, s before the last write):",
          [(round(ms, 1), round(end - t, 1)) for generation, ms, t in data["pauses"] if generation == 2])
    late = [ms for _, ms, t in data["pauses"] if end - t < float(os.environ.get("GC_PROBE_WINDOW_S", "25"))]
    print(f"  last window: {len(late)} collections, max {max(late, default=0):.1f} ms, total {sum(late):.1f} ms")
    if data["top"]:
        print("  most common tracked types:", data["top"][:8])
    if data.get("garbage"):
        print(f"  died in reference cycles (GC_PROBE_SAVEALL): {data['garbage_total']} objects; by type:")
        for name, count in data["garbage"][:25]:
            print(f"    {count:8d}  {name}")
