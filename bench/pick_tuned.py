"""The kernel configs bench/gpu_kernels.py `--only paged,sampler` found fastest, as environment assignments for
the frame benchmark (bench/gpu_frame_pdl.sh's `tune` step); nothing printed where the committed defaults won.

    python bench/pick_tuned.py out/r/tune/kernels.json
    -> VOXRT_PAGED_DECODE_CONFIG=128,8,2 VOXRT_SAMPLER_SEARCH=radix

- The paged decode attention: the (tokens a round, warps, stages) with the least us summed over the rows where
  the engine runs it (`auto`: more than 8 rows), KV context 128, among the configs with no mismatch on any row,
  if that sum beats the committed config's.
- The sampler: the threshold search with the least top-k-50 us (auto warps) summed over both vocabularies and
  batches, among the searches with no mismatch, if it is not the committed default (COMMITTED_SEARCH).
"""

from __future__ import annotations

import json
import sys

# kernels/sampling.py's DEFAULT_SEARCH (tests/engine/runtime/test_pick_tuned.py checks they agree); not imported
# from there so that this script needs no torch
COMMITTED_SEARCH = "radix"


def paged_choice(rows: list[dict]) -> str | None:
    rows = [r for r in rows if r.get("context") == 128 and r.get("batch", 0) > 8 and "default_us" in r]
    if not rows:
        return None
    bad = {m.split(":")[0] for r in rows for m in r.get("MISMATCH", []) + r.get("FAILED", [])}
    totals: dict[str, float] = {}
    for key in rows[0]:
        tag = key[:-3]
        if key.endswith("_us") and tag != "default" and tag not in bad and all(key in r for r in rows):
            totals[tag] = sum(r[key] for r in rows)
    if not totals:
        return None
    best = min(totals, key=totals.get)
    if totals[best] >= sum(r["default_us"] for r in rows):
        return None
    bt, warps, stages = best[len("bt"):].replace("_w", ",").replace("_s", ",").split(",")
    return f"{bt},{warps},{stages}"


def search_choice(rows: list[dict]) -> str | None:
    totals: dict[str, float] = {}
    for search in ("rounds", "sort", "rounds16", "radix"):
        tag = "topk50" if search == "rounds" else f"topk50_{search}"
        key = f"{tag}_wauto_us"
        if not rows or not all(key in r for r in rows):
            continue
        if any(m == f"{tag}_wauto" for r in rows for m in r.get("MISMATCH", [])):
            continue
        totals[search] = sum(r[key] for r in rows)
    if not totals:
        return None
    best = min(totals, key=totals.get)
    return None if best == COMMITTED_SEARCH else best


def main(path: str) -> str:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    out = []
    paged = paged_choice(data.get("paged", []))
    if paged:
        out.append(f"VOXRT_PAGED_DECODE_CONFIG={paged}")
    search = search_choice(data.get("sampler", []))
    if search:
        out.append(f"VOXRT_SAMPLER_SEARCH={search}")
    return " ".join(out)


if __name__ == "__main__":
    print(main(sys.argv[1]))
