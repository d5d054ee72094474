"""Host-to-device copies that never stall the host.

A copy from pageable host memory makes the CUDA stream wait for all earlier work before it starts, so the
host could not prepare step N+1 while the GPU runs step N. Staging through pinned memory (torch's caching
host allocator reuses the blocks) keeps the copy asynchronous.
"""

from __future__ import annotations

import torch


def upload_into(dst: torch.Tensor, host: torch.Tensor) -> None:
    """Copies a CPU tensor into `dst` (its leading rows when `host` is shorter), asynchronously on CUDA."""
    view = dst[: host.shape[0]] if host.dim() and host.shape[0] != dst.shape[0] else dst
    if dst.device.type == "cuda":
        host = host.pin_memory()
    view.copy_(host, non_blocking=True)


def upload(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)
