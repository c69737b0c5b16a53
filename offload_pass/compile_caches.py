"""Compile caches for measurements and tests: graphs always compiled, kernels reused.

Takes: a directory. Gives: ``graph_caches_off``, which turns off every cache
that could serve a compiled graph without compiling it (Inductor's FX graph
cache, AOTAutograd's cache, their remote forms, Dynamo's profile-guided
shapes, the calibrations kept on disk) and points Inductor's kernel cache at the directory.

Why not ``torch._inductor.config.force_disable_caches``: it also gives every
compile a fresh kernel cache, so each compile builds every kernel again
(cc1plus on the CPU, Triton on CUDA), although a kernel is keyed by its
source and compiler flags and a hit is the very binary a build would give
(the tests would build the same small kernels test after test). A graph
cache is what may not be hit: a warm one would skip the partitioner, so a
test or a benchmark variant would see another compile's plan (PyTorch's own offloading pass runs as a joint-graph
pre-pass, which the FX graph cache does not key on). Not part of the
pipeline: ``tests/conftest.py``, the ranks of ``tests/test_distributed.py``
and ``benchmarks/bench_offload.py`` call it before their first compile.
"""

from __future__ import annotations

import os

import torch

__all__ = ["graph_caches_off"]


def graph_caches_off(kernel_dir: str) -> None:
    """Every graph cache off for this process; kernels cached in
    ``kernel_dir`` (a directory new to the process keeps another run's
    kernels out, though a hit would build the same binary). The
    configs are set, not the environment variables: torch reads those at
    import."""
    torch._inductor.config.force_disable_caches = False
    torch._inductor.config.fx_graph_cache = False
    torch._inductor.config.fx_graph_remote_cache = False
    torch._functorch.config.enable_autograd_cache = False
    torch._functorch.config.enable_remote_autograd_cache = False
    torch._dynamo.config.automatic_dynamic_local_pgo = False
    torch._dynamo.config.automatic_dynamic_remote_pgo = False
    os.makedirs(kernel_dir, exist_ok=True)
    # Read at each use (runtime.cache_dir_utils.cache_dir), so it holds from the next compile on.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = kernel_dir
    # Nor a calibration another run fitted (feedback/disk.py): each run plans from what it measured.
    os.environ["OFFLOAD_PASS_CALIBRATION_CACHE"] = "0"
