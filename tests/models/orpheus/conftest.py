"""Fixtures shared by the Orpheus tests: tiny random checkpoints written once per module by the references."""

from __future__ import annotations

import pytest
import torch

from orpheus_tiny import TINY_SNAC_512, write_llama, write_snac


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny matmuls on two threads cost far more than on one (thread hand-offs), on this CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def llama_ckpt(tmp_path_factory):
    """(directory, reference LlamaForCausalLM) of a tiny random Orpheus-shaped LM, tied head as released."""
    directory = tmp_path_factory.mktemp("orpheus-lm")
    return directory, write_llama(directory, seed=0)


@pytest.fixture(scope="module")
def snac_ckpt(tmp_path_factory):
    """(directory, reference SNAC) with the release's 512 samples a latent frame (2048 a frame), narrow."""
    directory = tmp_path_factory.mktemp("snac")
    return directory, write_snac(directory, TINY_SNAC_512, seed=1)
