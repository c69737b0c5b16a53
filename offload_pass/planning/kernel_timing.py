"""Measured times of the kernels Inductor calls rather than generates.

Takes: a graph's nodes (a CUDA graph before the rewrite). Gives: a
``KernelTime`` per node name for the nodes whose op is an extern kernel
(matmuls, attention, grouped GEMMs, convolutions): each signature (op,
sizes, strides, dtypes) run on the device once, on random inputs of its
shape, for its time on the device (CUDA events) and the host's time to issue
it (the wall clock around the same calls), kept in ``REGISTRY.kernel_times``.
The other nodes (pointwise and reductions, which Inductor fuses into kernels
of its own) keep the cost model's estimate.

Why: the roofline estimate of a GEMM assumes the peak matmul throughput the
device profile measured on 4096x4096; real shapes run well below it, and
these kernels carry most of a transformer step's time. An extern kernel's
host path can also cost several launches, which is the step's time where
the device outruns the host.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.planning.rng_wrappers import rng_wrapped
from offload_pass.registry import REGISTRY

__all__ = ["MEASURED_OPS", "KernelTime", "measured_kernel_times"]

log = logging.getLogger("offload_pass")

_aten = torch.ops.aten
# Packets of the extern kernels measured; looked up by name so that an op a
# torch version lacks is simply absent.
MEASURED_OPS = frozenset(
    getattr(_aten, name)
    for name in (
        "mm", "addmm", "bmm", "baddbmm", "_grouped_mm", "_scaled_mm", "convolution", "convolution_backward",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
        "_flash_attention_forward", "_flash_attention_backward",
        "_efficient_attention_forward", "_efficient_attention_backward",
    )
    if hasattr(_aten, name)
)

_WARMUP, _REPS = 2, 5


@dataclasses.dataclass(frozen=True)
class KernelTime:
    device_ms: float  # the kernel on the device
    host_ms: float  # the host's call that issues it (dispatch, allocation, launch)


def measured_kernel_times(gm: fx.GraphModule) -> dict[str, KernelTime]:
    """The measured times of every extern-kernel node of ``gm`` on its CUDA
    device (a node that cannot be run alone, e.g. with symbolic sizes, is
    left out and keeps its estimate)."""
    from torch.utils._python_dispatch import _disable_current_modes

    # Outside the fake / proxy modes of the compile that asks (else it would
    # time fake kernels).
    with _disable_current_modes(), torch._C._DisableFuncTorch():
        return _measure_graph(gm)


def _measure_graph(gm: fx.GraphModule) -> dict[str, KernelTime]:
    """Each measured op's time by node name; an RNG wrapper timed as the op
    it runs (``rng_wrappers.rng_wrapped``), sharing that op's signature, so
    a recomputed kernel and the one it repeats are the same figure."""
    out = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        op = rng_wrapped(node) or node
        if getattr(op.target, "overloadpacket", None) not in MEASURED_OPS:
            continue
        key = _signature(op)
        if key is None:
            continue
        if key not in REGISTRY.kernel_times:
            REGISTRY.kernel_times[key] = _measure(op)
        if REGISTRY.kernel_times[key] is not None:
            out[node.name] = REGISTRY.kernel_times[key]
    return out


def _signature(node: fx.Node) -> Optional[str]:
    """The op and its arguments' sizes, strides, dtypes and constants; None
    when a size is symbolic or an input is not on a CUDA device."""
    parts = [str(node.target), *sorted(node.kwargs)]
    for value in (*node.args, *(node.kwargs[k] for k in sorted(node.kwargs))):
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, fx.Node):
                val = v.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    parts.append(repr(val) if isinstance(val, (int, float, bool)) else "?")
                    continue
                if val.device.type != "cuda" or not all(isinstance(s, int) for s in (*val.shape, *val.stride())):
                    return None
                parts.append(f"{val.dtype}{tuple(val.shape)}{tuple(val.stride())}")
            else:
                parts.append(repr(v))
    return "|".join(parts)


def _materialize(value: object, node: fx.Node) -> object:
    """A real tensor for each fake one: normal floats, integers that index
    safely (zeros; a grouped GEMM's offsets split its rows evenly)."""
    if isinstance(value, fx.Node):
        val = value.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return val
        real = torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype, device=val.device)
        if val.dtype.is_floating_point:
            return real.normal_()
        if val.dim() == 1 and node.target.overloadpacket is _aten._grouped_mm:
            rows = _grouped_rows(node)
            groups = val.shape[0]
            return torch.arange(1, groups + 1, device=val.device, dtype=val.dtype) * (rows // max(groups, 1))
        return real.zero_()
    if isinstance(value, (list, tuple)):
        return type(value)(_materialize(v, node) for v in value)
    return value


def _grouped_rows(node: fx.Node) -> int:
    first = node.args[0].meta.get("val")
    return int(first.shape[-2]) if first.dim() == 2 else int(first.shape[0])


def _measure(node: fx.Node) -> Optional[KernelTime]:
    try:
        args = _materialize(node.args, node)
        kwargs = {k: _materialize(v, node) for k, v in node.kwargs.items()}
        for _ in range(_WARMUP):
            node.target(*args, **kwargs)
        torch.cuda.synchronize(node.meta["val"].device if isinstance(node.meta.get("val"), torch.Tensor) else None)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        host_start = time.perf_counter()
        for _ in range(_REPS):
            node.target(*args, **kwargs)
        host_ms = (time.perf_counter() - host_start) * 1e3 / _REPS
        end.record()
        end.synchronize()
        return KernelTime(start.elapsed_time(end) / _REPS, host_ms)
    except Exception as error:  # an op that cannot run alone keeps its estimate
        log.debug("offload_pass: could not time %s (%s): %s", node.name, node.target, error)
        return None
