"""Test helpers shipped with gpuprof: synthetic trace builders for rule tests.

Nothing here is imported by ``gpuprof analyze``; it exists so that tests
(ours and those of people writing their own rules) can describe a training
loop in a few lines and get a realistic Kineto trace file out.
"""

from __future__ import annotations

from gpuprof.testing.tracegen import (
    DEFAULT_STREAM,
    KERNELS,
    NCCL_STREAM,
    TraceBuilder,
    gemm_kernel,
    nccl_kernel,
    simple_training,
    write_ranks,
)

__all__ = [
    "TraceBuilder",
    "KERNELS",
    "gemm_kernel",
    "nccl_kernel",
    "simple_training",
    "write_ranks",
    "DEFAULT_STREAM",
    "NCCL_STREAM",
]
