"""Execution on torch: the model-program interface, attention backends, sampling, CUDA graphs, the
model runner and the in-process engine core."""

from voxrt.engine.runtime.cublas import configure_workspace

configure_workspace()  # before any GPU work of the process (runtime/cublas.py: no split-K; the user's value wins)
