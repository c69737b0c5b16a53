"""Stage 3c, the cost model: how long things take on a device.

Takes: a device (for its measured speeds) and graph modules. Gives:

- ``device_profile(device, bandwidth_gbps=None, measure=True)``: copy bandwidth per
  direction, matmul throughput and memory bandwidth of the device, and the
  host's time to launch a small kernel. Measured
  once per device and torch version, cached in ``$OFFLOAD_PASS_CACHE_DIR``
  (default ``~/.cache/offload_pass``); ``OffloadConfig.bandwidth_gbps``
  overrides the copy bandwidth (one figure, or a (device->host, host->device)
  pair: ``shared_links.measure_shared_bandwidth`` gives one). CPU graphs
  get fixed figures (their copies are synchronous, the schedule only has
  to be deterministic there).
- ``estimate_node_ms(gm, profile)``: a roofline estimate per node: FLOPs from
  ``torch.utils.flop_counter``'s formulas over the fake tensors (and theirs
  for SDPA over the CPU's fused attention, which they lack; fused causal
  attention at the share of pairs its mask leaves, ``causal_attention``), else bytes
  read and written over memory bandwidth; views and fused-away pointwise ops
  cost nothing.

``step_model.node_times`` starts from these figures (measured kernels replace
some), and the step simulator and the schedules work from its ``NodeTimes``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Optional, Union

import torch
import torch.fx as fx

from offload_pass.registry import REGISTRY
from offload_pass.views import is_view_node
from offload_pass.planning.causal_attention import argument, causal_share, is_nested
from offload_pass.planning.inductor_model import fused_away
from offload_pass.planning.rng_wrappers import rng_wrapped
from offload_pass.units import size_hint

__all__ = ["DeviceProfile", "copy_gbps", "device_profile", "estimate_node_ms"]

log = logging.getLogger("offload_pass")



@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    d2h_gbps: float  # pinned device->host copy, GB/s (1e9 bytes)
    h2d_gbps: float
    matmul_tflops: dict  # dtype name -> dense matmul TFLOP/s
    memory_gbps: float  # device memory bandwidth (read + write), GB/s
    launch_us: float  # per-kernel floor
    source: str  # "measured", "cache <path>", "cpu defaults", "+ bandwidth_gbps from config"
    # The host's time to issue one small kernel (dispatch and launch), the
    # unit of the step simulator's host clock (step_model.py). 0: no host
    # clock (CPU graphs run where they are issued).
    host_launch_us: float = 0.0

    def bytes_per_ms(self, direction: str) -> float:
        return (self.d2h_gbps if direction == "d2h" else self.h2d_gbps) * 1e6


# Bumped when the measurement changes, so older cache entries are not used.
_PROFILE_VERSION = 3
_CPU_PROFILE = DeviceProfile(10.0, 10.0, {"float32": 0.2, "bfloat16": 0.2, "float16": 0.2}, 20.0, 5.0, "cpu defaults")
_HOST_LAUNCHES = 200


def _cache_path() -> Path:
    root = os.environ.get("OFFLOAD_PASS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "offload_pass")
    return Path(root) / "device_profile.json"


def _measure_cuda(device: torch.device) -> DeviceProfile:
    """About a second, once per device: pinned copies both ways, a bf16, fp16
    and fp32 matmul, and a device-to-device copy. Runs outside the fake /
    proxy modes of the compile that asks (else it would time fake copies)."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch._C._DisableFuncTorch():
        profile = _measure_cuda_real(device)
    # A real pinned copy on PCIe or NVLink-C2C is well under 1 TB/s.
    if not all(0 < v < 1000 for v in (profile.d2h_gbps, profile.h2d_gbps)):
        raise RuntimeError(f"offload_pass: implausible copy bandwidth measured on {device}: {profile}")
    return profile


def _timed(fn, reps: int) -> float:
    """Seconds per call of ``fn`` (after one warm-up call), from CUDA events."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


_COPY_BYTES = 256 << 20


def copy_gbps(device: torch.device, nbytes: int = _COPY_BYTES) -> tuple[float, float]:
    """(device->host, host->device) GB/s of ``nbytes`` copied between
    ``device`` and pinned host memory: the copies the plans price."""
    with torch.cuda.device(device):
        dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        d2h = nbytes / _timed(lambda: host.copy_(dev, non_blocking=True), 4) / 1e9
        h2d = nbytes / _timed(lambda: dev.copy_(host, non_blocking=True), 4) / 1e9
    return d2h, h2d


def _measure_cuda_real(device: torch.device) -> DeviceProfile:
    nbytes = _COPY_BYTES
    d2h, h2d = copy_gbps(device, nbytes)
    with torch.cuda.device(device):
        dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
        other = torch.empty_like(dev)
        memory = 2 * nbytes / _timed(lambda: other.copy_(dev), 8) / 1e9
        tflops = {}
        n = 4096
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            a = torch.randn(n, n, device=device, dtype=dtype)
            tflops[str(dtype).replace("torch.", "")] = 2 * n**3 / _timed(lambda: a @ a, 5) / 1e12
        del dev, other
        # The host's side of a launch: a kernel too small to keep the device
        # busy, issued back to back (the median of three rounds).
        small = torch.zeros(1024, device=device)
        rounds = []
        for _ in range(3):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            for _ in range(_HOST_LAUNCHES):
                small.add_(1.0)
            rounds.append((time.perf_counter() - start) * 1e6 / _HOST_LAUNCHES)
        torch.cuda.synchronize(device)
    return DeviceProfile(d2h, h2d, tflops, memory, 5.0, "measured", sorted(rounds)[1])


def device_profile(
    device: torch.device, bandwidth_gbps: Union[None, float, tuple[float, float]] = None, measure: bool = True
) -> Optional[DeviceProfile]:
    """The speeds of ``device``: measured once, then from the cache file
    (and from ``REGISTRY.device_profiles`` within a process). ``measure=False``:
    None where that would take a measurement (a graph with nothing to copy
    does not pay for one)."""
    if device.type != "cuda":
        profile = _CPU_PROFILE
    else:
        name = f"{torch.cuda.get_device_name(device)} | torch {torch.__version__} | v{_PROFILE_VERSION}"
        profile = REGISTRY.device_profiles.get(name)
        if profile is None:
            path = _cache_path()
            try:
                cached = json.loads(path.read_text()).get(name)
            except (OSError, ValueError):
                cached = None
            if cached:
                profile = DeviceProfile(**{**cached, "source": f"cache {path}"})
            elif not measure:
                return None
            else:
                profile = _measure_cuda(device)
                log.info("offload_pass: measured %s: %s", name, profile)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    table = json.loads(path.read_text()) if path.exists() else {}
                    table[name] = {k: v for k, v in dataclasses.asdict(profile).items() if k != "source"}
                    path.write_text(json.dumps(table, indent=2))
                except (OSError, ValueError) as error:
                    log.warning("offload_pass: could not cache the device profile in %s: %s", path, error)
            REGISTRY.device_profiles[name] = profile
    if bandwidth_gbps is not None:
        d2h, h2d = bandwidth_gbps if isinstance(bandwidth_gbps, tuple) else (bandwidth_gbps, bandwidth_gbps)
        profile = dataclasses.replace(
            profile, d2h_gbps=d2h, h2d_gbps=h2d, source=profile.source + " + bandwidth_gbps from config"
        )
    return profile


def _hinted(value: object) -> object:
    """``value`` with every symbolic tensor replaced by a meta tensor of its
    hinted sizes (None where a size has no hint)."""
    if isinstance(value, torch.Tensor):
        sizes = [size_hint(s) for s in value.shape]
        if any(s is None for s in sizes):
            return None
        if all(isinstance(s, int) for s in value.shape):
            return value
        return torch.empty(sizes, dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_hinted(v) for v in value)
    return value


def _tensor_bytes(value: object) -> int:
    value = _hinted(value)
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _cpu_flash_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_flash_backward_flops(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


# Formulas torch.utils.flop_counter lacks. The CPU's fused attention (what
# SDPA becomes on the CPU, and on the meta device when planning offline)
# does the work of the CUDA kernels, which grows with the square of the
# sequence: priced by PyTorch's SDPA formulas (full attention; ``_flops``
# scales a causal one by its share).
_EXTRA_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}


def _bshd_flops(node: fx.Node) -> Optional[int]:
    """The dense kernels under SDPA (``_flash_attention_*``,
    ``_efficient_attention_*``) take (batch, seq, heads, dim); torch's
    formulas read dense inputs as SDPA's (batch, heads, seq, dim), so they
    are priced here by SDPA's formulas over the transposes. None for other
    ops and for nested inputs (torch's formulas unbind those)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    if getattr(node.target, "overloadpacket", None) not in _BSHD or is_nested(node):
        return None
    shapes = [argument(node, name) for name in ("query", "key", "value", "grad_out", "grad_out_")]
    if not all(isinstance(v, torch.Tensor) and v.dim() == 4 for v in shapes[:3]):
        return None
    hinted = [_hinted(v) for v in shapes]
    if any(v is None for v in hinted[:3]):
        return None
    query, key, value, *grads = [v.transpose(1, 2).shape if v is not None else None for v in hinted]
    grad = next((g for g in grads if g is not None), None)
    if grad is None:
        return sdpa_flop_count(query, key, value)
    return sdpa_backward_flop_count(grad, query, key, value)


_BSHD = frozenset(
    getattr(torch.ops.aten, name)
    for name in ("_flash_attention_forward", "_flash_attention_backward",
                 "_efficient_attention_forward", "_efficient_attention_backward")
    if hasattr(torch.ops.aten, name)
)


def _flops(node) -> int:
    """The FLOPs of ``node`` (0 for ops without a formula; an RNG wrapper is
    handed in as the op it runs, ``rng_wrappers.Wrapped``). Fused causal
    attention skips the pairs above its mask's diagonal: full attention's
    count times ``causal_attention.causal_share`` (1 for other ops)."""
    from torch.utils.flop_counter import flop_registry

    packet = getattr(node.target, "overloadpacket", None)
    formula = flop_registry.get(packet) or _EXTRA_FLOPS.get(packet)
    if formula is None:
        return 0
    try:
        flops = _bshd_flops(node)
        if flops is None:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: _hinted(n.meta.get("val")))
            flops = formula(*args, out_val=_hinted(node.meta.get("val")), **kwargs)
        return int(int(flops) * causal_share(node))
    except Exception:  # a formula that cannot read odd arguments (or a size without hint)
        return 0


def estimate_node_ms(gm: fx.GraphModule, profile: DeviceProfile) -> list[float]:
    """Estimated run time of each node of ``gm`` (placeholders and outputs: 0).
    Views and the pointwise results Inductor fuses into their consumers
    (``inductor_model.fused_away``) launch no kernel and cost 0: counting them
    would make a forward look slower than it runs and move each release
    earlier than its copy can land."""
    times = []
    for node in gm.graph.nodes:
        if (
            node.op != "call_function"
            or node.target.__module__ == "_operator"
            or is_view_node(node)
            or fused_away(node)
        ):
            times.append(0.0)
            continue
        op = rng_wrapped(node) or node  # a wrapper priced as the op it runs (its output traced once)
        val = op.meta.get("val")
        dtype = next(
            (v.dtype for v in (val if isinstance(val, (list, tuple)) else [val]) if isinstance(v, torch.Tensor)),
            torch.float32,
        )
        tflops = profile.matmul_tflops.get(str(dtype).replace("torch.", ""), min(profile.matmul_tflops.values()))
        moved = _tensor_bytes(val) + sum(_tensor_bytes(a.meta.get("val")) for a in node.all_input_nodes)
        ms = max(_flops(op) / (tflops * 1e9), moved / (profile.memory_gbps * 1e6))
        times.append(ms + profile.launch_us / 1e3)
    return times
