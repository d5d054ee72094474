"""The paged decode attention kernel (runtime/kernels/paged_decode.py) against plain attention over each
sequence's gathered K/V, in Triton's CPU interpreter (tests/conftest.py sets TRITON_INTERPRET)."""

from __future__ import annotations

import math

import pytest
import torch

from voxrt.engine.runtime.kernels.paged_decode import paged_decode_attention


def _case(lengths, page_size=16, hq=4, hkv=2, d=32, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    num_pages = sum(-(-n // page_size) for n in lengths) + 3
    cache = torch.randn(num_pages + 1, 2, page_size, hkv, d, generator=g).to(dtype)
    order = torch.randperm(num_pages, generator=g).tolist()  # pages scattered over the cache
    indptr, indices, last = [0], [], []
    for n in lengths:
        k = -(-n // page_size)
        indices += order[:k]
        order = order[k:]
        indptr.append(len(indices))
        last.append(n - (k - 1) * page_size)
    q = torch.randn(len(lengths), hq, d, generator=g).to(dtype)
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return q, cache, i32(indptr), i32(indices), i32(last)


def _plain(q, cache, indptr, indices, lengths):
    """softmax(q k^T / sqrt(d)) v per sequence over its tokens in order, GQA by repeating KV heads."""
    _, _, ps, hkv, d = cache.shape
    out = []
    for b, n in enumerate(lengths):
        pages = indices[indptr[b] : indptr[b + 1]].long()
        kv = cache[pages].permute(1, 0, 2, 3, 4).reshape(2, -1, hkv, d)[:, :n].float()
        k = kv[0].repeat_interleave(q.shape[1] // hkv, dim=1)  # [n, Hq, D]
        v = kv[1].repeat_interleave(q.shape[1] // hkv, dim=1)
        p = torch.softmax(torch.einsum("hd,nhd->hn", q[b].float(), k) / math.sqrt(d), -1)
        out.append(torch.einsum("hn,nhd->hd", p, v))
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_decode_equals_plain_attention_over_scattered_pages(dtype):
    # lengths: one token, a partial page, exactly one block (64), past a block boundary, a long one
    lengths = [1, 7, 64, 65, 150]
    q, cache, indptr, indices, last = _case(lengths, dtype=dtype)
    want = _plain(q, cache, indptr, indices, lengths)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    ref = paged_decode_attention(q, cache, indptr, indices, last, impl="torch")
    torch.testing.assert_close(ref.float(), want, **tol)
    got = paged_decode_attention(q, cache, indptr, indices, last, impl="triton")
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got.float(), want, **tol)


def test_paged_decode_with_qwen3_tts_heads_and_a_padding_row():
    """The talker's shape (16 query heads over 8 KV heads of 128) and a graph bucket's padding row: one token
    on the scratch page."""
    lengths = [33, 1]
    q, cache, indptr, indices, last = _case(lengths, hq=16, hkv=8, d=128, seed=3)
    want = _plain(q, cache, indptr, indices, lengths)
    got = paged_decode_attention(q, cache, indptr, indices, last, impl="triton")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_t", [16, 32, 128, 256])
def test_paged_decode_block_sizes_agree(block_t):
    """Every tokens-a-round the GPU sweep may choose (bench/gpu_kernels.py --only paged): one round shorter and
    longer than a page, a context ending inside a round and one spanning several."""
    lengths = [1, 15, 129, 300]
    q, cache, indptr, indices, last = _case(lengths, hq=4, hkv=2, d=32, seed=5)
    want = _plain(q, cache, indptr, indices, lengths)
    got = paged_decode_attention(q, cache, indptr, indices, last, impl="triton", block_t=block_t, num_warps=8,
                                 num_stages=2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_paged_decode_config_is_read_from_the_environment(monkeypatch):
    from voxrt.engine.runtime.kernels.paged_decode import kernel_config  # noqa: PLC0415

    monkeypatch.delenv("VOXRT_PAGED_DECODE_CONFIG", raising=False)
    assert kernel_config() == (64, 2, 3)  # the H100 sweep's (module docstring)
    assert kernel_config(num_warps=4) == (64, 4, 3)
    monkeypatch.setenv("VOXRT_PAGED_DECODE_CONFIG", "64,4")  # what the environment leaves out: Triton's stages
    assert kernel_config() == (64, 4, None)
    monkeypatch.setenv("VOXRT_PAGED_DECODE_CONFIG", "128,8")
    assert kernel_config() == (128, 8, None)
    assert kernel_config(block_t=32) == (32, 8, None)  # an argument wins over the environment
    monkeypatch.setenv("VOXRT_PAGED_DECODE_CONFIG", "64,4,3")
    assert kernel_config() == (64, 4, 3)
    for bad in ("48", "128,x", "0,4", "64,4,2,1", "8"):
        monkeypatch.setenv("VOXRT_PAGED_DECODE_CONFIG", bad)
        with pytest.raises(ValueError, match="VOXRT_PAGED_DECODE_CONFIG"):
            kernel_config()


def _rope_case(lengths, hq, hkv, d, dtype, with_x, seed=11):
    """A decode step: each sequence's new token is its last (page, offset); qkv rows of the packed projection."""
    from voxrt.engine.runtime.kernels.rope import rope_inv_freq  # noqa: PLC0415

    _, cache, indptr, indices, last = _case(lengths, hq=hq, hkv=hkv, d=d, dtype=dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    b = len(lengths)
    qkv = (torch.randn(b, (hq + 2 * hkv) * d, generator=g) * 3).to(dtype)
    q_norm = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    k_norm = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    x = (torch.randn(b, 96, generator=g) * 2).to(dtype) if with_x else None
    ps = cache.shape[2]
    positions = torch.tensor([n - 1 for n in lengths], dtype=torch.int64)
    page_idx = torch.tensor([int(indices[indptr[i] + (n - 1) // ps]) for i, n in enumerate(lengths)], dtype=torch.int64)
    page_off = positions % ps
    return dict(qkv=qkv, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, q_norm=q_norm, k_norm=k_norm,
                inv_freq=rope_inv_freq(d, 10000.0, torch.device("cpu")), eps=1e-6, positions=positions,
                page_idx=page_idx, page_off=page_off, cache=cache, indptr=indptr, indices=indices, last_len=last,
                x=x, x_eps=1e-6)


def _two_kernels(case, impl):
    """What runs without the knob: kernels/rope.py's q/k norm + rotary + K/V write, then the paged decode."""
    from voxrt.engine.runtime.kernels.rope import qk_norm_rope_paged  # noqa: PLC0415

    c = case
    q = qk_norm_rope_paged(c["qkv"], c["num_q_heads"], c["num_kv_heads"], c["head_dim"], c["q_norm"], c["k_norm"],
                           c["inv_freq"], c["eps"], c["positions"], c["page_idx"], c["page_off"], c["cache"], impl,
                           x=c["x"], x_eps=c["x_eps"])
    return paged_decode_attention(q.to(c["cache"].dtype), c["cache"], c["indptr"], c["indices"], c["last_len"],
                                  impl=impl)


@pytest.mark.parametrize("dtype,with_x", [(torch.float32, True), (torch.bfloat16, True), (torch.bfloat16, False)])
def test_paged_decode_with_the_rotary_equals_the_two_kernels(dtype, with_x):
    """The paged decode kernel with the rotary kernel's work folded in (VOXRT_PAGED_DECODE_ROPE=on) against the
    two kernels it replaces: the same K/V bits in the cache and the same output, for sequences of one token (a
    graph bucket's padding row), within a page, at a round's edge and over several rounds. Its torch impl (the
    two reference ops in turn) agrees within the dtype's rounding."""
    from voxrt.engine.runtime.kernels.paged_decode import paged_decode_rope_attention  # noqa: PLC0415

    lengths = [1, 7, 64, 65, 150]
    cases = {name: _rope_case(lengths, hq=4, hkv=2, d=32, dtype=dtype, with_x=with_x) for name in ("two", "one", "torch")}
    before = cases["one"]["cache"].clone()
    want = _two_kernels(cases["two"], "triton")
    got = paged_decode_rope_attention(**cases["one"], impl="triton")
    assert got.shape == (len(lengths), 4, 32) and got.dtype == dtype
    assert not torch.equal(cases["one"]["cache"], before)  # the new K/V were written
    torch.testing.assert_close(cases["one"]["cache"], cases["two"]["cache"], atol=0, rtol=0)
    torch.testing.assert_close(got.float(), want.float(), atol=1e-5, rtol=1e-5)
    ref = paged_decode_rope_attention(**cases["torch"], impl="torch")
    tol = dict(atol=4e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cases["torch"]["cache"].float(), cases["one"]["cache"].float(), **tol)
    torch.testing.assert_close(ref.float(), got.float(), **tol)


def test_paged_decode_with_the_rotary_at_the_talker_shape():
    """16 query heads over 8 KV heads of 128 (the Qwen3-TTS talker) in bf16, a padding row of one token."""
    from voxrt.engine.runtime.kernels.paged_decode import paged_decode_rope_attention  # noqa: PLC0415

    lengths = [33, 1]
    two = _rope_case(lengths, hq=16, hkv=8, d=128, dtype=torch.bfloat16, with_x=True, seed=3)
    one = _rope_case(lengths, hq=16, hkv=8, d=128, dtype=torch.bfloat16, with_x=True, seed=3)
    want = _two_kernels(two, "triton")
    got = paged_decode_rope_attention(**one, impl="triton")
    torch.testing.assert_close(one["cache"], two["cache"], atol=0, rtol=0)
    torch.testing.assert_close(got.float(), want.float(), atol=1e-5, rtol=1e-5)
