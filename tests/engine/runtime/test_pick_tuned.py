"""bench/pick_tuned.py: what the GPU call's `tune` step (bench/gpu_frame_pdl.sh) runs the frame with, read off
bench/gpu_kernels.py's sweep. A wrong pick costs a GPU call, so its rules are checked here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("pick_tuned", ROOT / "bench" / "pick_tuned.py")
pick_tuned = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pick_tuned)


def _paged(batch, default, **configs):
    return dict(context=128, batch=batch, default_us=default, **{f"{k}_us": v for k, v in configs.items()})


def test_paged_config_is_the_least_total_over_the_rows_the_engine_runs_it_on():
    rows = [_paged(1, 9.0, bt32_w2_s1=1.0, bt128_w8_s2=50.0),  # one row: FA3's, not counted
            _paged(64, 16.0, bt32_w2_s1=12.0, bt128_w8_s2=6.0),
            _paged(128, 30.0, bt32_w2_s1=20.0, bt128_w8_s2=11.0),
            dict(_paged(64, 1.0, bt32_w2_s1=0.1), context=512)]  # another context: not counted
    assert pick_tuned.paged_choice(rows) == "128,8,2"
    rows[1]["MISMATCH"] = ["bt128_w8_s2:0.5"]  # a config wrong on any row is out
    assert pick_tuned.paged_choice(rows) == "32,2,1"
    rows[1]["MISMATCH"] = ["bt32_w2_s1:0.5", "bt128_w8_s2:0.5"]
    assert pick_tuned.paged_choice(rows) is None


def test_paged_config_stays_the_default_unless_faster():
    rows = [_paged(64, 10.0, bt32_w2_s1=11.0), _paged(128, 20.0, bt32_w2_s1=19.5)]
    assert pick_tuned.paged_choice(rows) is None  # 30.5 against 30.0
    assert pick_tuned.paged_choice([]) is None


def test_sampler_search_is_the_least_total_without_mismatch(tmp_path):
    rows = [dict(vocab=2048, batch=1, topk50_wauto_us=16.0, topk50_radix_wauto_us=6.0, topk50_sort_wauto_us=9.0),
            dict(vocab=3072, batch=1, topk50_wauto_us=20.0, topk50_radix_wauto_us=8.0, topk50_sort_wauto_us=12.0)]
    assert pick_tuned.search_choice(rows) is None  # the committed default (radix) won
    rows[1]["MISMATCH"] = ["topk50_radix_wauto"]
    assert pick_tuned.search_choice(rows) == "sort"
    rows[0]["topk50_sort_wauto_us"] = 40.0
    assert pick_tuned.search_choice(rows) == "rounds"
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(dict(paged=[_paged(64, 10.0, bt64_w8_s3=5.0)], sampler=rows[:1])))
    assert pick_tuned.main(str(path)) == "VOXRT_PAGED_DECODE_CONFIG=64,8,3"
    assert pick_tuned.main(str(tmp_path / "missing.json")) == ""


def test_committed_search_is_the_kernels_default():
    from voxrt.engine.runtime.kernels.sampling import DEFAULT_SEARCH

    assert pick_tuned.COMMITTED_SEARCH == DEFAULT_SEARCH


def test_gemv_variant_is_the_least_total_over_both_chains_at_one_row():
    variants = {"base": dict(programs=256, plain_first=0, pipe=False, warps=4),
                "pipe": dict(programs=256, plain_first=0, pipe=True, warps=4),
                "one16k": dict(programs=256, plain_first=16384, pipe=False, warps=4)}

    def row(chain, variant, ms, rows=1, err=0.0):
        return dict(chain=chain, rows=rows, variant=variant, ms=ms, rel_err_vs_base=err)

    chains = [row("pred", "base", 1.8), row("talk", "base", 1.1), row("pred", "pipe", 1.5), row("talk", "pipe", 1.2),
              row("pred", "one16k", 1.2), row("talk", "one16k", 1.3), row("pred", "pipe", 0.1, rows=8)]
    data = dict(variants=variants, chains=chains)
    assert pick_tuned.gemv_choice(data) == "VOXRT_GEMV=programs=256,first=16384,pipe=0,warps=4,pdlfirst=8192"
    chains[5]["rel_err_vs_base"] = 1.2  # another summation order over 75 bf16 layers: not a criterion
    assert pick_tuned.gemv_choice(data) == "VOXRT_GEMV=programs=256,first=16384,pipe=0,warps=4,pdlfirst=8192"
    chains[5] = dict(chain="talk", rows=1, variant="one16k", error="compile")  # failed on one chain: out
    assert pick_tuned.gemv_choice(data) == "VOXRT_GEMV=programs=256,first=0,pipe=1,warps=4,pdlfirst=8192"
    chains[3] = dict(chain="talk", rows=1, variant="pipe", error="boom")  # failed on one chain: out
    assert pick_tuned.gemv_choice(data) == ""  # only the base is left
    assert pick_tuned.gemv_choice(dict(variants=variants, chains=[row("pred", "pipe", 1.0)])) == ""  # no base ran
    variants["pdl"] = dict(programs=256, first=0, plain_first=0, pipe=True, warps=8, pdl=True)
    chains += [row("pred", "pdl", 1.0), row("talk", "pdl", 1.0)]
    assert pick_tuned.gemv_choice(data) == "VOXRT_GEMV=programs=256,first=0,pipe=1,warps=8,pdlfirst=0 VOXRT_PDL=1"
