"""The frame's kernels with PDL on, compiled for sm90 without a GPU (Triton's bundled toolchain), checked
against the rule of kernels/__init__.py in the PTX: `griddepcontrol.wait` then `launch_dependents` once (so
at most one kernel runs ahead of a running one), and no global store before the wait (the part that overlaps the previous kernel writes nothing). The products
also load (their weight tile) before the wait. The interpreter cannot run the gdc_* instructions, so this is
the CPU's only view of the PDL variants; a GPU runs them (bench/gpu_fused_check.py, bench/gpu_frame.py).
The compiler needs the kernels un-interpreted, so one subprocess (this file run as a script, with
TRITON_INTERPRET=0) compiles them all and reports what the PTX shows. It is also the CPU's check that every
kernel form compiles at all (the interpreter never runs the compiler's passes). Against another Triton than the
installed one (the GPU image has 3.6):

    pip install --target /tmp/t36 --no-deps triton==3.6.0
    VOXRT_COMPILE_PYTHONPATH=/tmp/t36 python -m pytest tests/engine/runtime/test_pdl_kernels.py"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from voxrt.engine.runtime.kernels import triton_available

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs triton")

BF16 = "*bf16"


def _ptx(fn, pointers: dict[str, str], consts: dict) -> str:
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    def kind(name: str) -> str:
        if name in consts:
            return "constexpr"
        if name in pointers:
            return pointers[name]
        return "fp32" if "eps" in name or name == "scale" else "i32"

    signature = {name: kind(name) for name in fn.arg_names}
    constexprs = {(fn.arg_names.index(k),): v for k, v in consts.items()}
    return triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32)).asm["ptx"]


def _kernels():
    from voxrt.engine.runtime.kernels import depth_attention, gemv, norm, rope, sampling  # noqa: PLC0415

    gemv_ptrs = dict(x_ptr=BF16, w_ptr=BF16, out_ptr=BF16, next_ptr=BF16)
    # every constexpr given (one left out would compile as a runtime integer, its branches both kept)
    gemv_consts = dict(ROWS=1, RESIDUAL=True, RSTD=False, SILU=False, BLOCK_N=8, BLOCK_K=512, FIRST_K=1024,
                       PREFETCH=False, ELEMS_PER_LINE=64, BLOCK_P=256, PIPE=False)
    skinny_consts = dict(RESIDUAL=True, RSTD=False, SILU=False, BLOCK_M=64, BLOCK_N=32, BLOCK_K=128, DOT_F32=False,
                         PREFETCH=False, ELEMS_PER_LINE=64, BLOCK_P=256, SPLIT_K=1, OWN_LINES=2, OWN_LINE_ELEMS=64)
    sample_ptrs = dict(logits_ptr=BF16, u_ptr="*fp32", temp_ptr="*fp32", topk_ptr="*i64", topp_ptr="*fp32",
                       greedy_ptr="*i1", suppress_ptr="*i1", out_ptr="*i64", table_ptr=BF16, next_ptr=BF16, x_ptr=BF16,
                       table2_ptr=BF16, next2_ptr=BF16, hist_ptr="*i1", pen_ptr="*fp32", stop_ptr="*i1",
                       eos_ptr="*i1")
    sample_consts = dict(HAS_SUPPRESS=True, HAS_NEXT=True, HAS_X=True, BLOCK_V=2048, BLOCK_H=1024, BLOCK_X=1024,
                         HAS_NEXT2=False, CODE0=False)
    return {
        "gemv": (gemv._gemv_kernel, gemv_ptrs, gemv_consts, True),
        "gemv-silu": (gemv._gemv_kernel, gemv_ptrs, {**gemv_consts, "SILU": True}, True),
        "gemv-rstd": (gemv._gemv_kernel, gemv_ptrs, {**gemv_consts, "RESIDUAL": False, "RSTD": True}, True),
        "gemv-prefetch": (gemv._gemv_kernel, gemv_ptrs, {**gemv_consts, "PREFETCH": True}, True),
        "gemv-pipe": (gemv._gemv_kernel, gemv_ptrs, {**gemv_consts, "PIPE": True}, True),
        "skinny": (gemv._skinny_kernel, gemv_ptrs, skinny_consts, False),
        "skinny-silu-prefetch": (gemv._skinny_kernel, gemv_ptrs, {**skinny_consts, "SILU": True, "PREFETCH": True}, False),
        "skinny-splitk": (gemv._skinny_kernel, {**gemv_ptrs, "part_ptr": "*fp32", "count_ptr": "*i32"},
                          {**skinny_consts, "SPLIT_K": 8}, False),
        "add_rms_norm": (norm._add_rms_norm_kernel, dict(x_ptr=BF16, res_ptr=BF16, w_ptr=BF16, out_ptr=BF16,
                                                         res_out_ptr=BF16), dict(HAS_RESIDUAL=True, BLOCK=2048), True),
        "silu_mul": (norm._silu_mul_kernel, dict(gu_ptr=BF16, out_ptr=BF16, x_ptr=BF16),
                     dict(HAS_X=True, BLOCK=1024, BLOCK_X=2048), False),
        "qk_norm_rope_paged": (rope._qk_norm_rope_paged_kernel,
                               dict(qkv_ptr=BF16, q_out_ptr=BF16, cache_ptr=BF16, pos_ptr="*i64", page_ptr="*i64",
                                    off_ptr="*i64", qw_ptr=BF16, kw_ptr=BF16, inv_freq_ptr="*fp32", x_ptr=BF16),
                               dict(HQ=16, HKV=8, D=128, HAS_X=True, BLOCK_X=2048), True),
        "depth_attention": (depth_attention._depth_attention_kernel,
                            dict(qkv_ptr=BF16, out_ptr=BF16, k_cache_ptr=BF16, v_cache_ptr=BF16, qw_ptr=BF16,
                                 kw_ptr=BF16, inv_freq_ptr="*fp32", x_ptr=BF16),
                            dict(T=1, HQ=16, HKV=8, D=128, L=16, HAS_X=True, BLOCK_X=1024, NH=1), True),
        # each threshold search (kernels/sampling.py), with and without the suppress mask: the rounds16 one's first
        # form passed the interpreter and failed Triton 3.6's make_ttgir on the H200 without the mask ("operand
        # does not dominate this use"); compiling here with that Triton (VOXRT_COMPILE_PYTHONPATH, module
        # docstring) reproduced it
        **{name: (sampling._sample_kernel, sample_ptrs, {**sample_consts, "HAS_SUPPRESS": suppress,
                                                         "SORT": search == "sort", "RADIX": search == "radix",
                                                         "KEY16": search in ("rounds16", "radix")},
                 suppress)  # the mask is what the sampler reads before its wait
           for name, search, suppress in (("sample", "rounds", True), ("sample-nomask", "rounds", False),
                                          ("sample-sort", "sort", False), ("sample-rounds16", "rounds16", False),
                                          ("sample-rounds16-mask", "rounds16", True), ("sample-radix", "radix", False),
                                          ("sample-radix-mask", "radix", True))},
        # the code predictor's draw that also gathers the next layer-0 q/k/v row (VOXRT_PREDICTOR_QKV_TABLE=on)
        "sample-radix-next2": (sampling._sample_kernel, sample_ptrs,
                               {**sample_consts, "HAS_SUPPRESS": False, "KEY16": True, "RADIX": True, "SORT": False,
                                "HAS_NEXT2": True}, False),
        # code 0's draw with its processors inside (VOXRT_GLUE_KERNELS=on): the talker's 3072 codes
        "sample-radix-code0": (sampling._sample_kernel, sample_ptrs,
                               {**sample_consts, "HAS_SUPPRESS": True, "HAS_NEXT": False, "HAS_X": False,
                                "BLOCK_V": 4096, "KEY16": False, "RADIX": True, "SORT": False, "CODE0": True}, True),
    }


def _plain_kernels():
    """Kernels that launch without PDL (above PDL_AUTO_MAX_ROWS rows only): compiled here all the same, since the
    interpreter never runs the compiler's passes. The talker's paged decode attention, alone and with the rotary
    kernel's work folded in (VOXRT_PAGED_DECODE_ROPE=on), at the talker's shape."""
    from voxrt.engine.runtime.kernels import gather, paged_decode  # noqa: PLC0415

    table = dict(indptr_ptr="*i32", indices_ptr="*i32", last_ptr="*i32")
    consts = dict(PS=16, HQ=16, HKV=8, D=128, GR=16, BT=64, DOT_F32=False)
    return {
        "paged_decode": (paged_decode._paged_decode_kernel, dict(q_ptr=BF16, out_ptr=BF16, cache_ptr=BF16, **table),
                         consts),
        "paged_decode_rope": (paged_decode._paged_decode_rope_kernel,
                              dict(qkv_ptr=BF16, out_ptr=BF16, cache_ptr=BF16, pos_ptr="*i64", page_ptr="*i64",
                                   off_ptr="*i64", qw_ptr=BF16, kw_ptr=BF16, inv_freq_ptr="*fp32", x_ptr=BF16,
                                   **table), dict(consts, HAS_X=True, BLOCK_X=2048)),
        # the slots' sampling parameters in one launch (VOXRT_GLUE_KERNELS=on): SamplingTensors' six dtypes
        "gather_rows": (gather._gather_rows_kernel,
                        dict(index_ptr="*i64", s0="*fp32", d0="*fp32", s1="*i64", d1="*i64", s2="*fp32", d2="*fp32",
                             s3="*fp32", d3="*fp32", s4="*i1", d4="*i1", s5="*i1", d5="*i1"),
                        dict(N_SRC=6, BLOCK=128)),
        # the code predictor's first inputs in one launch (VOXRT_GLUE_KERNELS=on)
        "depth_inputs": (gather._depth_inputs_kernel,
                         dict(code0_ptr="*i64", tag="i64", first_ptr=BF16, table_ptr=BF16, x_ptr=BF16,
                              codes_ptr="*i64"), dict(BLOCK_H=1024)),
        # the talker's decode input in one launch (VOXRT_GLUE_KERNELS=on)
        "embed_step": (gather._embed_step_kernel,
                       dict(codes_ptr="*i64", offsets_ptr="*i64", table_ptr=BF16, text_ptr="*i64", text_table_ptr=BF16,
                            out_ptr=BF16), dict(BLOCK_H=1024)),
    }


def _split_k_facts(ptx: str) -> dict:
    """The split-K handshake as compiled: a barrier, then the counter's acquire-release atomic at GPU scope, then
    the partials read through the L2 (`.cg`: another SM wrote them; its L1 would not know)."""
    atom = next((i for i, line in enumerate(ptx.splitlines()) if "atom." in line and ".add" in line), -1)
    lines = ptx.splitlines()
    return dict(atom=lines[atom].strip() if atom >= 0 else None,
                barrier_before=any("bar.sync" in ln or "barrier.sync" in ln for ln in lines[:atom]) if atom >= 0 else False,
                cg_loads_after=any("ld.global.cg" in ln for ln in lines[atom:]) if atom >= 0 else False)


def _facts() -> dict:
    """Per kernel, what its PTX shows (run with TRITON_INTERPRET=0)."""
    out = {}
    for name, (fn, pointers, consts, _) in _kernels().items():
        ptx = _ptx(fn, pointers, {**consts, "PDL": True})
        wait = ptx.find("griddepcontrol.wait")
        before = ptx[:wait] if wait >= 0 else ptx
        out[name] = dict(launches=ptx.count("griddepcontrol.launch_dependents"), wait=wait,
                         launch_after_wait=ptx.find("griddepcontrol.launch_dependents") > wait >= 0,
                         writes_before=any(op in before for op in ("st.global", "atom.", "red.")),
                         loads_before="ld.global" in before,
                         off_has_gdc=name == "gemv" and "griddepcontrol" in _ptx(fn, pointers, {**consts, "PDL": False}),
                         prefetches=ptx.count("prefetch.global.L2"), tensor_cores="wgmma" in ptx or "mma.sync" in ptx,
                         prefetch_before_wait="prefetch.global.L2" in before,
                         split_k=_split_k_facts(ptx) if consts.get("SPLIT_K", 1) > 1 else None)
    for name, (fn, pointers, consts) in _plain_kernels().items():
        ptx = _ptx(fn, pointers, consts)
        out[name] = dict(tensor_cores="wgmma" in ptx or "mma.sync" in ptx, stores=ptx.count("st.global"),
                         gdc="griddepcontrol" in ptx)
    return out


@pytest.fixture(scope="module")
def facts() -> dict:
    import triton  # noqa: PLC0415

    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("Triton's CUDA toolchain (ptxas) is not bundled here")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    extra = os.environ.get("VOXRT_COMPILE_PYTHONPATH")  # another Triton first on the path (module docstring)
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra, os.getcwd(), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(_kernels()))
def test_pdl_kernels_write_nothing_before_the_wait(name, facts):
    f = facts[name]
    assert f["launches"] == 1 and f["wait"] >= 0 and f["launch_after_wait"], (name, f)
    assert not f["writes_before"], (name, f)  # nothing the previous kernel may still read is overwritten
    if _kernels()[name][3]:  # the weights (norm weights, rotary table, suppress mask) stream before the wait
        assert f["loads_before"], (name, f)
    assert not f["off_has_gdc"], (name, f)  # (checked for the product: PDL off compiles no gdc_* at all)


@pytest.mark.parametrize("name", [n for n in _kernels() if n.startswith(("gemv", "skinny"))])
def test_the_products_prefetch_only_when_asked_and_the_tensor_core_one_uses_them(name, facts):
    """PREFETCH compiles the L2 prefetch of the next weight (inline PTX the interpreter cannot run), and only
    then; the skinny product's dot compiles to tensor-core instructions for sm90, and with PDL it prefetches its
    own weight slice before its wait."""
    f = facts[name]
    if name.startswith("skinny"):  # with PDL the tensor-core product also asks for its own weight slice before the wait
        assert f["tensor_cores"] and f["prefetch_before_wait"], (name, f)
    else:
        assert (f["prefetches"] > 0) == name.endswith("prefetch"), (name, f)


def test_the_split_k_handshake_compiles_as_the_kernel_says(facts):
    """kernels/gemv.py's split-K tile: every thread's partial stored, a CTA barrier, one acquire-release atomic
    at GPU scope on the tile's counter, and the last program's reads of the partials through the L2. The
    interpreter runs programs one by one and cannot show this; a GPU race would show as a wrong or varying sum
    (bench/gpu_kernels.py's split-K rows check every launch against torch)."""
    f = facts["skinny-splitk"]["split_k"]
    assert f["atom"] is not None and ".acq_rel" in f["atom"] and ".gpu" in f["atom"], f
    assert f["barrier_before"] and f["cg_loads_after"], f


def test_the_paged_decode_kernels_compile_for_sm90_on_tensor_cores(facts):
    """Both forms compile for sm90 (a form the interpreter passes can still fail the compiler: the sampler's
    rounds16 did), their products on tensor cores, with no PDL instruction; the rotary form stores more (the
    new K/V as well as the output)."""
    plain, rope = facts["paged_decode"], facts["paged_decode_rope"]
    assert plain["tensor_cores"] and rope["tensor_cores"], facts
    assert not plain["gdc"] and not rope["gdc"], facts
    assert rope["stores"] > plain["stores"] > 0, facts


if __name__ == "__main__":
    print(json.dumps(_facts()))


def test_the_gather_kernels_compile_for_sm90(facts):
    """kernels/gather.py's six-field gather, the depth stage's first inputs and the talker's decode input
    (VOXRT_GLUE_KERNELS=on) compile for sm90, with no PDL instruction (they launch plainly)."""
    assert facts["gather_rows"]["stores"] >= 6 and not facts["gather_rows"]["gdc"], facts["gather_rows"]
    assert facts["depth_inputs"]["stores"] >= 3 and not facts["depth_inputs"]["gdc"], facts["depth_inputs"]
    assert facts["embed_step"]["stores"] >= 1 and not facts["embed_step"]["gdc"], facts["embed_step"]
