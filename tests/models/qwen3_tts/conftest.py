"""Fixtures shared by the Qwen3-TTS parity tests."""

from __future__ import annotations

import pytest
import torch

from tiny_talker import cached_checkpoint, load_program


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny matmuls on two threads cost 50x more than on one (thread hand-offs), on this CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ckpt():
    """A tiny random reference checkpoint in the released layout, and our program loaded from it."""
    tiny = cached_checkpoint(seed=0)
    return tiny.directory, tiny.model, tiny.tokenizer, load_program(tiny.directory)
