"""Execution on torch: the model-program interface, attention backends, sampling, CUDA graphs, the
model runner and the in-process engine core."""
