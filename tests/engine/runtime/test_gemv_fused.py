"""The skinny product's fused forms (kernels/gemv.py) against the unfused ops they replace, in Triton's
interpreter: the SiLU gate computed inside the down projection, the row's rstd applied inside gate_up, the
wide first weight tile of the PDL path; and the PDL switch (kernels/__init__.py), off wherever the CI runs."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from voxrt.engine.runtime import kernels
from voxrt.engine.runtime.kernels import pdl_args, pdl_enabled, set_pdl
from voxrt.engine.runtime.kernels import gemv as gemv_module
from voxrt.engine.runtime.kernels.gemv import _launch, add_gated_mlp_, add_linear_, add_silu_linear_, linear
from voxrt.engine.runtime.kernels.norm import rstd_torch, silu_mul

# k = 300: two BLOCK_K tiles, the second partial; n = 40: 10 programs of BLOCK_N 4 (the interpreter runs them
# one by one); rows 1 and 3 (strided rows exercise x_stride)
SHAPES = [(1, 40, 300), (3, 24, 96)]


def _data(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    gate_up = torch.randn(2 * m, 2 * k, generator=g)[::2].to(dtype)  # strided rows
    w = (torch.randn(n, k, generator=g) / math.sqrt(k)).to(dtype)
    res = torch.randn(m, n, generator=g).to(dtype)
    return gate_up, w, res


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_silu_in_the_down_product_equals_silu_mul_then_the_product(m, n, k, dtype):
    gate_up, w, res = _data(m, n, k, dtype)
    unfused = res.clone()
    add_linear_(unfused, silu_mul(gate_up, "triton"), w, impl="triton", force=True)
    fused = res.clone()
    add_silu_linear_(fused, gate_up, w, impl="triton", force=True)
    # the same activation values (rounded as _silu_mul_kernel rounds them), the same tiles: the same sums
    torch.testing.assert_close(fused, unfused, atol=0, rtol=0)
    reference = res.float() + F.linear((F.silu(gate_up[:, :k].float()) * gate_up[:, k:].float()), w.float())
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(fused.float(), reference, **tol)
    torch_path = res.clone()
    add_silu_linear_(torch_path, gate_up, w, impl="torch")
    torch.testing.assert_close(torch_path.float(), reference, **tol)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_rstd_in_the_product_equals_the_scaled_product(m, n, k):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(m, k, generator=g) * 3.0
    w = torch.randn(n, k, generator=g) / math.sqrt(k)
    expected = F.linear(x, w) * rstd_torch(x, 1e-6)
    for impl in ("torch", "triton"):
        torch.testing.assert_close(linear(x, w, impl=impl, force=True, rstd_eps=1e-6), expected, atol=1e-5, rtol=1e-5)


def test_the_wide_first_tile_equals_the_plain_tiles():
    """With PDL the first tile is wider than the loop's (folded into its accumulator); the interpreter cannot
    run the PDL instructions, so the width is forced here with PDL off."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 1100, generator=g)
    w = torch.randn(12, 1100, generator=g) / 30
    plain, wide = torch.empty(2, 12), torch.empty(2, 12)
    _launch(x, w, plain, residual=False, block_k=256, first_k=256)
    _launch(x, w, wide, residual=False, block_k=256, first_k=1024)  # 4 tiles before the loop, then a partial one
    torch.testing.assert_close(wide, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wide, F.linear(x, w), atol=1e-5, rtol=1e-5)
    gate_up = torch.randn(1, 2 * 1100, generator=g)
    res_a, res_b = torch.zeros(1, 12), torch.zeros(1, 12)
    _launch(gate_up, w, res_a, residual=True, silu=True, block_k=256, first_k=256)
    _launch(gate_up, w, res_b, residual=True, silu=True, block_k=256, first_k=2048)  # wider than K itself
    torch.testing.assert_close(res_b, res_a, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("first_k", [256, 512])
def test_the_pipelined_loop_equals_the_plain_one(first_k):
    """PIPE: the loop loads the next tile before this tile's products (its last round's load is all masked). Same
    sums in the same order, so the same results, in every form (plain, residual, rstd, silu) and with a wide
    first tile before it."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 1100, generator=g)
    w = torch.randn(12, 1100, generator=g) / 30
    gate_up = torch.randn(1, 2 * 1100, generator=g)
    for form in ({}, {"rstd_eps": 1e-6}):
        plain, piped = torch.empty(2, 12), torch.empty(2, 12)
        _launch(x, w, plain, residual=False, block_k=256, first_k=first_k, pipe=False, **form)
        _launch(x, w, piped, residual=False, block_k=256, first_k=first_k, pipe=True, **form)
        torch.testing.assert_close(piped, plain, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(piped, F.linear(x, w) * rstd_torch(x, 1e-6), atol=1e-5, rtol=1e-5)
    res_a, res_b = torch.ones(1, 12), torch.ones(1, 12)
    _launch(gate_up, w, res_a, residual=True, silu=True, block_k=256, first_k=first_k, pipe=False)
    _launch(gate_up, w, res_b, residual=True, silu=True, block_k=256, first_k=first_k, pipe=True)
    torch.testing.assert_close(res_b, res_a, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(res_b, 1 + F.linear(silu_mul(gate_up, "torch"), w), atol=1e-5, rtol=1e-5)


def test_the_pipeline_and_warps_switches_reach_the_launch(monkeypatch):
    """gemv.PIPELINE / gemv.WARPS (the benchmarks' knobs) change how the product runs, not what it returns."""
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(1, 700, generator=g), torch.randn(20, 700, generator=g) / 30
    expected = linear(x, w, impl="triton", force=True)
    monkeypatch.setattr(gemv_module, "PIPELINE", True)
    monkeypatch.setattr(gemv_module, "WARPS", 8)
    torch.testing.assert_close(linear(x, w, impl="triton", force=True), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(expected, F.linear(x, w), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_the_gated_mlp_equals_the_unfused_layer(impl):
    """x += down(silu(gate) * up) over rms_norm(x) with the norm folded into gate_up: two kernels on the
    skinny path (rstd in gate_up, SiLU in down), the three-kernel path elsewhere; both equal the layer."""
    g = torch.Generator().manual_seed(3)
    h, inter = 64, 96
    x = torch.randn(1, h, generator=g)
    norm_w = torch.rand(h, generator=g) + 0.5
    gate_up_w = torch.randn(2 * inter, h, generator=g) / 8
    down_w = torch.randn(h, inter, generator=g) / 10
    normed = F.rms_norm(x, (h,), norm_w, 1e-6)
    gate, up = F.linear(normed, gate_up_w).chunk(2, dim=-1)
    expected = x + F.linear(F.silu(gate) * up, down_w)
    out = x.clone()
    add_gated_mlp_(out, gate_up_w * norm_w[None, :], down_w, 1e-6, impl=impl, force=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_pdl_is_off_on_the_cpu_and_in_the_interpreter(monkeypatch):
    assert kernels.interpreting()  # tests/conftest.py
    assert not pdl_enabled(torch.device("cpu")) and pdl_args(torch.device("cpu")) == {"PDL": False}
    set_pdl(True)
    try:
        assert not pdl_enabled(torch.device("cpu"))
        assert not pdl_enabled(torch.device("cuda"))  # the interpreter: never PDL (it cannot run gdc_*)
    finally:
        set_pdl(None)


def test_the_pdl_switch_on_a_pdl_capable_device(monkeypatch):
    """The rule off the interpreter, with the device's capability faked: `auto` by default (PDL for launches of
    at most PDL_AUTO_MAX_ROWS rows, where it measured faster; off for larger ones and for a launch that does not
    say its rows), VOXRT_PDL=1 / on and set_pdl(True) turn it on everywhere, 0 / off and set_pdl(False) off,
    set_pdl(None) returns to the environment, and a bad value is a clear error."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(kernels, "_device_has_pdl", lambda index: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    cuda = torch.device("cuda")
    limit = kernels.PDL_AUTO_MAX_ROWS
    monkeypatch.delenv("VOXRT_PDL", raising=False)
    assert kernels.pdl_mode() == "auto"
    assert pdl_enabled(cuda, 1) and pdl_enabled(cuda, limit) and pdl_args(cuda, 1) == {"PDL": True, "launch_pdl": True}
    assert not pdl_enabled(cuda, limit + 1) and pdl_args(cuda, 64) == {"PDL": False}
    assert not pdl_enabled(cuda)  # rows not given
    for value in ("1", "on", "ON", "true"):
        monkeypatch.setenv("VOXRT_PDL", value)
        assert pdl_enabled(cuda) and pdl_enabled(cuda, 128) and pdl_args(cuda) == {"PDL": True, "launch_pdl": True}
    for value in ("0", "off", "no"):
        monkeypatch.setenv("VOXRT_PDL", value)
        assert not pdl_enabled(cuda, 1)
    monkeypatch.setenv("VOXRT_PDL", "sometimes")
    with pytest.raises(ValueError, match="VOXRT_PDL='sometimes'; expected auto, on"):
        pdl_enabled(cuda, 1)
    monkeypatch.setenv("VOXRT_PDL", "0")
    set_pdl(True)
    try:
        assert pdl_enabled(cuda) and pdl_enabled(cuda, 128)
        monkeypatch.setenv("VOXRT_PDL", "1")
        set_pdl(False)
        assert not pdl_enabled(cuda, 1) and pdl_args(cuda, 1) == {"PDL": False}
    finally:
        set_pdl(None)
    assert pdl_enabled(cuda)
    monkeypatch.setattr(kernels, "_device_has_pdl", lambda index: False)  # before sm90
    assert not pdl_enabled(cuda, 1)


def test_every_frame_kernel_launch_says_its_rows():
    """`auto` decides by the launch's rows, so every launcher in the frame's kernels passes them (a launch
    without would silently never take PDL)."""
    import pathlib  # noqa: PLC0415
    import re  # noqa: PLC0415

    root = pathlib.Path(kernels.__file__).parent
    calls = [(f.name, m.group(0)) for f in root.glob("*.py") if f.name != "__init__.py"
             for m in re.finditer(r"pdl_args\([^()]*\)", f.read_text())]
    assert len(calls) >= 7, calls
    assert all("," in call for _, call in calls), [c for c in calls if "," not in c[1]]


@pytest.fixture
def skinny_on():
    kernels.set_skinny(True)
    yield
    kernels.set_skinny(None)


@pytest.mark.parametrize("m,n,k", [(5, 40, 96), (24, 70, 160), (80, 48, 64)])
def test_the_tensor_core_product_equals_f_linear_in_every_form(m, n, k, skinny_on):
    """5..128 rows take the tensor-core kernel when it is on: plain, residual, rstd and SiLU forms against the
    unfused ops; m = 80 spans two 64-row tiles (the second partial), k = 160 a partial K step, n = 70 and 40
    partial column tiles."""
    g = torch.Generator().manual_seed(m + n + k)
    x = torch.randn(2 * m, k, generator=g)[::2] * 2.0  # strided rows
    w = torch.randn(n, k, generator=g) / math.sqrt(k)
    res = torch.randn(m, n, generator=g)
    assert kernels.skinny_enabled(x.device) and gemv_module._fits(x, w, force=False)
    tol = dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(linear(x, w, impl="triton"), F.linear(x, w), **tol)
    torch.testing.assert_close(linear(x, w, impl="triton", rstd_eps=1e-6), F.linear(x, w) * rstd_torch(x, 1e-6), **tol)
    out = res.clone()
    add_linear_(out, x, w, impl="triton")
    torch.testing.assert_close(out, res + F.linear(x, w), **tol)
    gate_up = torch.randn(m, 2 * k, generator=g)
    out = res.clone()
    add_silu_linear_(out, gate_up, w, impl="triton")
    torch.testing.assert_close(out, res + F.linear(silu_mul(gate_up, "torch"), w), **tol)
    bf = x.to(torch.bfloat16), w.to(torch.bfloat16)
    torch.testing.assert_close(linear(*bf, impl="triton").float(), F.linear(*bf).float(), atol=3e-2, rtol=3e-2)


def test_the_tensor_core_product_is_off_unless_asked():
    x, w = torch.randn(8, 64), torch.randn(32, 64)
    assert not kernels.skinny_enabled(x.device) and not gemv_module._fits(x, w, force=False)
    kernels.set_skinny(True)
    try:
        with pytest.MonkeyPatch.context() as mp:  # outside the interpreter the CPU never takes it
            mp.setenv("TRITON_INTERPRET", "0")
            assert not kernels.skinny_enabled(x.device)
    finally:
        kernels.set_skinny(None)


def test_the_l2_prefetch_never_runs_on_the_cpu_and_leaves_results_alone():
    """The prefetch is inline PTX (compiled CUDA only; its PTX is checked in test_pdl_kernels.py): on the CPU
    it stays off even when asked, and a product given the next weight computes what it computes without."""
    x, w, nxt = torch.randn(1, 96), torch.randn(40, 96), torch.randn(64, 96)
    kernels.set_l2_prefetch(True)
    try:
        assert not kernels.l2_prefetch_enabled(x.device)
        assert gemv_module._prefetch_args(nxt, x.device)["PREFETCH"] is False
        torch.testing.assert_close(linear(x, w, impl="triton", force=True, prefetch=nxt), F.linear(x, w),
                                   atol=1e-4, rtol=1e-4)
    finally:
        kernels.set_l2_prefetch(None)


def test_voxrt_gemv_sets_the_launch_and_refuses_bad_values(monkeypatch):
    """VOXRT_GEMV (benchmarks' A/B knob) parses into the kernel's settings, changes nothing in the result, and a bad
    value is a ValueError that names what is allowed (not a Triton error at the first launch)."""
    assert gemv_module.env_settings("programs=512, first=16384,pipe=1,warps=8") == dict(
        programs=512, first=16384, pipe=1, warps=8)
    assert gemv_module.env_settings("") == {}
    assert gemv_module.env_settings("pdlfirst=0") == dict(pdlfirst=0)
    for bad, words in (("programs", "key=value"), ("blocks=4", "keys programs"), ("warps=3", "out of range"),
                       ("pipe=yes", "not an integer"), ("programs=0", "out of range")):
        with pytest.raises(ValueError, match=words):
            gemv_module.env_settings(bad)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(1, 700, generator=g), torch.randn(20, 700, generator=g) / 30
    expected = linear(x, w, impl="triton", force=True)
    monkeypatch.setenv("VOXRT_GEMV", "programs=8,first=512,pipe=1,warps=2")
    assert gemv_module.settings() == (8, 512, True, 2, gemv_module.PREFETCH_ELEMENTS)
    torch.testing.assert_close(linear(x, w, impl="triton", force=True), expected, atol=1e-5, rtol=1e-5)
    monkeypatch.setenv("VOXRT_GEMV", "warps=5")
    with pytest.raises(ValueError, match="VOXRT_GEMV"):
        linear(x, w, impl="triton", force=True)


@pytest.mark.parametrize("m,n,k,splits", [(64, 48, 1024, 4), (80, 40, 700, 2), (5, 16, 512, 8), (24, 32, 384, 4)])
def test_the_split_k_product_equals_f_linear_and_leaves_its_counters_at_zero(m, n, k, splits):
    """The tensor-core product split over K (the last program of a tile sums the partials): plain and residual
    forms against F.linear; k = 700 ends inside a split (the last split is short), m = 80 spans two row tiles,
    m = 5 pads a 16-row tile. The counters are back at 0 after each launch (a graph replays the same launch),
    and two launches give the same bits (the partials are summed in split order)."""
    g = torch.Generator().manual_seed(m * n + k)
    x = torch.randn(2 * m, k, generator=g)[::2]  # strided rows
    w = torch.randn(n, k, generator=g) / math.sqrt(k)
    res = torch.randn(m, n, generator=g)
    bm, bn, bk = gemv_module.skinny_plan(m, n, k)
    pre = dict(next_ptr=w, next_lines=0, PREFETCH=False)
    out = torch.empty(m, n)
    gemv_module._launch_skinny(x, w, out, False, None, False, pre, split_k=splits)
    torch.testing.assert_close(out, F.linear(x, w), atol=1e-4, rtol=1e-4)
    parts, counts = gemv_module.split_k_workspace(x.device)
    assert int(counts.abs().sum()) == 0
    again = torch.empty(m, n)
    gemv_module._launch_skinny(x, w, again, False, None, False, pre, split_k=splits)
    assert torch.equal(again, out)
    summed = res.clone()
    gemv_module._launch_skinny(x, w, summed, True, None, False, pre, split_k=splits)
    torch.testing.assert_close(summed, res + F.linear(x, w), atol=1e-4, rtol=1e-4)
    assert int(counts.abs().sum()) == 0


def test_the_split_k_plan_splits_narrow_long_products_only():
    """The code predictor's shapes at 64 rows: o_proj (1024 x 2048) and down (1024 x 3072) split 8 ways (16
    column tiles), qkv and gate_up (4096 / 6144 x 1024) less, the talker's 12288-wide gate_up not at all;
    VOXRT_GEMV's splitk caps it; a short K never splits below SPLIT_K_MIN_COLUMNS a split."""
    def plan(m, n, k, cap=None):
        return gemv_module.skinny_split_plan(m, n, k, cap=cap)
    assert plan(64, 1024, 2048) == (64, 64, 128, 8) and plan(64, 1024, 3072) == (64, 64, 128, 8)
    assert plan(64, 4096, 1024)[3] == 4 and plan(64, 6144, 1024)[3] == 2
    assert plan(64, 12288, 2048) == (*gemv_module.skinny_plan(64, 12288, 2048), 1)  # wide: unsplit, as before
    assert plan(64, 1024, 2048, cap=2)[3] == 2 and plan(64, 1024, 2048, cap=1)[3] == 1
    assert plan(8, 1024, 256)[3] == 1  # one split's worth of K
    assert gemv_module.split_k_plan(128, 1024, 3072, 64, 64, 128, cap=64) == 8  # 32 tiles x 8: 256 programs, no more
    assert plan(24, 32, 384, cap=64) == (*gemv_module.skinny_plan(24, 32, 384), 1)  # 384 columns: no two splits of 256


def test_split_k_reaches_the_engine_products_and_the_gated_mlp_takes_the_three_kernel_form(monkeypatch, skinny_on):
    """With the tensor-core product on, linear / add_linear_ above MAX_ROWS rows split over K by the plan (VOXRT_GEMV
    splitk=1 turns it off, the result the same), and the gated MLP there runs plain products around silu_mul (the
    rstd and SiLU forms, slow on tensor cores, are not used), equal to the layer."""
    g = torch.Generator().manual_seed(11)
    m, h, inter = 16, 512, 256
    launches = []
    real = gemv_module._skinny_kernel

    class Spy:
        def __getitem__(self, grid):
            def run(*args, **kw):
                launches.append((grid, kw.get("SPLIT_K", 1), kw["RSTD"], kw["SILU"]))
                return real[grid](*args, **kw)
            return run
    monkeypatch.setattr(gemv_module, "_skinny_kernel", Spy())
    x = torch.randn(m, h, generator=g)
    w = torch.randn(64, h, generator=g) / 20
    y = linear(x, w, impl="triton")
    torch.testing.assert_close(y, F.linear(x, w), atol=1e-4, rtol=1e-4)
    assert launches[-1][1] == 2  # one 64-column tile, K 512: two splits of 256
    monkeypatch.setenv("VOXRT_GEMV", "splitk=1")
    torch.testing.assert_close(linear(x, w, impl="triton"), y, atol=1e-5, rtol=1e-5)
    assert launches[-1][1] == 1
    monkeypatch.delenv("VOXRT_GEMV")
    launches.clear()
    norm_w = torch.rand(h, generator=g) + 0.5
    gate_up_w = torch.randn(2 * inter, h, generator=g) / 16
    down_w = torch.randn(h, inter, generator=g) / 12
    gate, up = F.linear(F.rms_norm(x, (h,), norm_w, 1e-6), gate_up_w).chunk(2, dim=-1)
    expected = x + F.linear(F.silu(gate) * up, down_w)
    out = x.clone()
    add_gated_mlp_(out, gate_up_w * norm_w[None, :], down_w, 1e-6, impl="triton")
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    assert len(launches) == 2 and not any(rstd or silu for _, _, rstd, silu in launches)


def test_the_split_k_workspace_is_never_made_inside_a_graph_capture(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(gemv_module, "_split_k_workspaces", {})
    with pytest.raises(RuntimeError, match="before a CUDA graph capture"):
        gemv_module.split_k_workspace(torch.device("cuda", 0))


def test_voxrt_gemv_splitk_is_checked(monkeypatch):
    monkeypatch.setenv("VOXRT_GEMV", "splitk=4")
    assert gemv_module.settings_split_k() == 4
    monkeypatch.setenv("VOXRT_GEMV", "splitk=3")
    with pytest.raises(ValueError, match="splitk a power of two up to 64"):
        gemv_module.settings_split_k()
