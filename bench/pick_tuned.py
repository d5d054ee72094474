"""The kernel configs bench/gpu_kernels.py `--only paged,sampler` found fastest, as environment assignments for
the frame benchmark (bench/gpu_frame_pdl.sh's `tune` step); nothing printed where the committed defaults won.

    python bench/pick_tuned.py out/r/tune/kernels.json
    -> VOXRT_PAGED_DECODE_CONFIG=128,8,2 VOXRT_SAMPLER_SEARCH=radix
    python bench/pick_tuned.py --gemv out/r/inflight/gemv_pdl.json   (bench/gpu_gemv_pdl.py's chains)
    -> VOXRT_GEMV=programs=256,first=0,pipe=1,warps=8,pdlfirst=8192 [VOXRT_PDL=1]   (nothing where the base won)

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


def gemv_choice(data: dict) -> str:
    """The matrix-vector kernel's variant (bench/gpu_gemv_pdl.py --variants) with the least ms summed over both
    chains at one row, among those that ran both, as environment assignments (VOXRT_GEMV, and VOXRT_PDL=1 for a
    PDL variant); "" where the base (the committed defaults) won or nothing ran. The chains' error against the
    base is no criterion: 75 random bf16 layers turn any change of summation order into a different output (a
    variant that sums in another order differs by ~1 relative); the fused check after the pick is the test."""
    rows = [r for r in data.get("chains", []) if r.get("rows") == 1]
    chains = {r["chain"] for r in rows}
    ok: dict[str, dict[str, float]] = {}
    bad = set()
    for r in rows:
        if "ms" not in r:
            bad.add(r["variant"])
        else:
            ok.setdefault(r["variant"], {})[r["chain"]] = r["ms"]
    totals = {v: sum(ms.values()) for v, ms in ok.items() if v not in bad and set(ms) == chains}
    if not totals or "base" not in totals:
        return ""
    best = min(totals, key=totals.get)
    v = data.get("variants", {}).get(best)
    if best == "base" or not v or totals[best] >= totals["base"]:
        return ""
    value = (f"VOXRT_GEMV=programs={v['programs']},first={v['plain_first']},pipe={int(v.get('pipe', False))},"
             f"warps={v.get('warps', 4)},pdlfirst={v.get('first', 8192)}")
    return value + (" VOXRT_PDL=1" if v.get("pdl") else "")


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
    if sys.argv[1] == "--gemv":  # bench/gpu_gemv_pdl.py's gemv_pdl.json -> a VOXRT_GEMV value (or nothing)
        try:
            with open(sys.argv[2]) as f:
                print(gemv_choice(json.load(f)))
        except (OSError, ValueError):
            print("")
    else:
        print(main(sys.argv[1]))
