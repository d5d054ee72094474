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
