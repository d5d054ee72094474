"""The sampling kernel compiles for Hopper (sm90) with the real Triton compiler, on the CPU: Triton's interpreter
(the other kernel tests) runs the Python body and never reaches the MLIR passes, so a kernel can pass every
interpreter test and still fail to compile on the GPU. That happened: the 16-bit search's first form (two
inlined threshold searches in sibling branches) failed Triton 3.6's `make_ttgir` with "operand does not dominate
this use" on the H200 (bench/results/2026-12-05-frame-pdl/). Compiling needs no GPU (Triton ships ptxas).

The compile runs in a child process: the test session interprets Triton kernels (TRITON_INTERPRET=1), and an
interpreted kernel cannot be compiled. Against another Triton (the GPU image's 3.6 caught the bug):

    pip install --target /tmp/t36 --no-deps triton==3.6.0
    VOXRT_COMPILE_PYTHONPATH=/tmp/t36 python -m pytest tests/engine/runtime/test_kernels_compile.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from voxrt.engine.runtime.kernels.sampling import SEARCHES

CHILD = r"""
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from voxrt.engine.runtime.kernels import sampling

types = dict(logits_ptr="*bf16", l_stride="i32", n_vocab="i32", u_ptr="*fp32", u_stride="i32", temp_ptr="*fp32",
             topk_ptr="*i64", topp_ptr="*fp32", greedy_ptr="*i1", suppress_ptr="*i1", out_ptr="*i64",
             out_stride="i32", table_ptr="*bf16", t_stride="i32", next_ptr="*bf16", n_stride="i32", n_hidden="i32",
             x_ptr="*bf16", x_stride="i32", n_x="i32", x_eps="fp32")
search = sys.argv[1]
# the engine's form for the code predictor: rows' rstd folded in, the next step's embedding written, 2048 wide
consts = dict(HAS_SUPPRESS=False, HAS_NEXT=True, HAS_X=True, BLOCK_V=2048, BLOCK_H=1024, BLOCK_X=1024,
              SORT=search == "sort", PDL=False, KEY16=search == "rounds16")
kernel = sampling._sample_kernel
names = kernel.arg_names
missing = set(names) - set(types) - set(consts)
assert not missing, f"the test needs a type for {sorted(missing)}"
signature = {n: "constexpr" if n in consts else types[n] for n in names}
src = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(n),): v for n, v in consts.items()})
compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
ptx = compiled.asm["ptx"]
assert ".target sm_90" in ptx and "_sample_kernel" in ptx, ptx[:300]
print("compiled", triton.__version__, len(ptx))
"""


@pytest.mark.parametrize("search", SEARCHES)
def test_sampling_kernel_compiles_for_hopper(search, tmp_path):
    """The engine's form of the sampler under each threshold search compiles down to PTX for sm90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # a real compile every time, not a cached one
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    extra = os.environ.get("VOXRT_COMPILE_PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra, root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", CHILD, search], env=env, capture_output=True, text=True,
                          timeout=240)
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()][:5]
    assert proc.returncode == 0, f"{search}: {errors or proc.stderr[-2000:]}"
    assert proc.stdout.startswith("compiled"), proc.stdout
