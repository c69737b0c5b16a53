"""Stage 3c, the cost model: how long things take, and where each release
and reload goes.

Takes: a device (for its measured speeds), the forward and backward graphs,
the plan's copy groups and the simulated memory without offload. Gives:

- ``device_profile(device, bandwidth_gbps=None)``: copy bandwidth per
  direction, matmul throughput and memory bandwidth of the device. Measured
  once per device and torch version, cached in ``$OFFLOAD_PASS_CACHE_DIR``
  (default ``~/.cache/offload_pass``); ``OffloadConfig.bandwidth_gbps``
  overrides the copy bandwidth. CPU graphs get fixed figures (their copies are
  synchronous, the schedule only has to be deterministic there).
- ``estimate_node_ms(gm, profile)``: a roofline estimate per node: FLOPs from
  ``torch.utils.flop_counter``'s formulas over the fake tensors, else bytes
  read and written over memory bandwidth; views and fused-away pointwise ops
  cost nothing.
- ``schedule_reloads(...)`` / ``schedule_releases(...)``: pure functions over
  those numbers. Each reload is issued just early enough to land before its
  consumer (reloads queue on one host->device stream); each release goes
  where its copy-out is predicted to have landed. Neither may lift device
  memory above a ceiling (the step's peak with every copy off the device from
  its last forward use to its first backward use).
- ``release_schedule`` / ``reload_schedule``: the same on real graphs;
  releases go to slots that split no fused kernel, reloads count their bytes
  from where Inductor's generated code runs them.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.fx as fx

from offload_pass.views import is_view_node, storage_root
from offload_pass.planning.inductor_model import fused_away, in_place_slots, safe_slots
from offload_pass.units import size_hint

__all__ = [
    "CopyOut", "DeviceProfile", "Reload", "device_profile", "estimate_node_ms", "release_schedule",
    "reload_schedule", "schedule_releases", "schedule_reloads",
]

log = logging.getLogger("offload_pass")

# The estimates are rough (no fusion, no overlap between kernels); reloads
# start this much earlier than the estimate says they must.
RELOAD_MARGIN = 1.25


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    d2h_gbps: float  # pinned device->host copy, GB/s (1e9 bytes)
    h2d_gbps: float
    matmul_tflops: dict  # dtype name -> dense matmul TFLOP/s
    memory_gbps: float  # device memory bandwidth (read + write), GB/s
    launch_us: float  # per-kernel floor
    source: str  # "measured", "cache <path>", "cpu defaults", "+ bandwidth_gbps from config"

    def bytes_per_ms(self, direction: str) -> float:
        return (self.d2h_gbps if direction == "d2h" else self.h2d_gbps) * 1e6


# Bumped when the measurement changes, so older cache entries are not used.
_PROFILE_VERSION = 2
_CPU_PROFILE = DeviceProfile(10.0, 10.0, {"float32": 0.2, "bfloat16": 0.2, "float16": 0.2}, 20.0, 5.0, "cpu defaults")
_profiles: dict[str, DeviceProfile] = {}


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


def _measure_cuda_real(device: torch.device) -> DeviceProfile:
    nbytes = 256 << 20
    with torch.cuda.device(device):
        dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        other = torch.empty_like(dev)

        def timed(fn, reps: int) -> float:
            """Seconds per call, from CUDA events."""
            fn()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps

        d2h = nbytes / timed(lambda: host.copy_(dev, non_blocking=True), 4) / 1e9
        h2d = nbytes / timed(lambda: dev.copy_(host, non_blocking=True), 4) / 1e9
        memory = 2 * nbytes / timed(lambda: other.copy_(dev), 8) / 1e9
        tflops = {}
        n = 4096
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            a = torch.randn(n, n, device=device, dtype=dtype)
            tflops[str(dtype).replace("torch.", "")] = 2 * n**3 / timed(lambda: a @ a, 5) / 1e12
        del dev, host, other
    return DeviceProfile(d2h, h2d, tflops, memory, 5.0, "measured")


def device_profile(device: torch.device, bandwidth_gbps: Optional[float] = None) -> DeviceProfile:
    """The speeds of ``device``: measured once, then from the cache file."""
    if device.type != "cuda":
        profile = _CPU_PROFILE
    else:
        name = f"{torch.cuda.get_device_name(device)} | torch {torch.__version__} | v{_PROFILE_VERSION}"
        profile = _profiles.get(name)
        if profile is None:
            path = _cache_path()
            try:
                cached = json.loads(path.read_text()).get(name)
            except (OSError, ValueError):
                cached = None
            if cached:
                profile = DeviceProfile(**{**cached, "source": f"cache {path}"})
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
            _profiles[name] = profile
    if bandwidth_gbps is not None:
        profile = dataclasses.replace(
            profile, d2h_gbps=bandwidth_gbps, h2d_gbps=bandwidth_gbps, source=profile.source + " + bandwidth_gbps from config"
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


def _flops(node: fx.Node) -> int:
    from torch.utils.flop_counter import flop_registry

    packet = getattr(node.target, "overloadpacket", None)
    formula = flop_registry.get(packet)
    if formula is None:
        return 0
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: _hinted(n.meta.get("val")))
    try:
        return int(formula(*args, out_val=_hinted(node.meta.get("val")), **kwargs))
    except Exception:  # a formula that cannot read odd arguments (or a size without hint)
        return 0


def group_bytes(group, nodes_by_name: dict[str, fx.Node]) -> int:
    """A copy's bytes; with symbolic sizes (0 in the plan) the hinted sizes
    of its members, so a dynamic graph's copies are not scheduled as free."""
    if group.nbytes:
        return group.nbytes
    return sum(_tensor_bytes(nodes_by_name[m].meta.get("val")) for m in group.members if m in nodes_by_name)


def estimate_node_ms(gm: fx.GraphModule, profile: DeviceProfile) -> list[float]:
    """Estimated run time of each node of ``gm`` (placeholders and outputs: 0).
    Views and the pointwise results Inductor fuses into their consumers
    (``timeline.fused_away``) launch no kernel and cost 0: counting them
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
        val = node.meta.get("val")
        dtype = next(
            (v.dtype for v in (val if isinstance(val, (list, tuple)) else [val]) if isinstance(v, torch.Tensor)),
            torch.float32,
        )
        tflops = profile.matmul_tflops.get(str(dtype).replace("torch.", ""), min(profile.matmul_tflops.values()))
        moved = _tensor_bytes(val) + sum(_tensor_bytes(a.meta.get("val")) for a in node.all_input_nodes)
        ms = max(_flops(node) / (tflops * 1e9), moved / (profile.memory_gbps * 1e6))
        times.append(ms + profile.launch_us / 1e3)
    return times


@dataclasses.dataclass(frozen=True)
class Reload:
    key: str  # the copy's storage name
    nbytes: int
    consumer: int  # index of its first consumer among the backward's nodes


def schedule_reloads(
    node_ms: Sequence[float],
    base_live: Sequence[int],
    reloads: Sequence[Reload],
    h2d_bytes_per_ms: float,
    ceiling: int,
    first: int = 0,
    margin: float = RELOAD_MARGIN,
    prefetch_bytes: Optional[int] = None,
    safe: Optional[Sequence[bool]] = None,
) -> dict[str, int]:
    """For each reload, the index of the backward node it is issued before.

    ``node_ms[i]``: estimated time of node i. ``base_live[i]``: device bytes
    alive at node i with every reload landing exactly at its consumer.
    ``reloads`` in order of their consumers. ``first``: the first index a
    reload may be issued at (after the placeholders).

    Time: copies run one after the other on the host->device stream, so the
    latest start of each is computed from the last reload backwards; a reload
    is issued before the last node that starts no later than that.
    Memory: issuing at i keeps its bytes alive over [i, consumer); the issue
    point moves later until that fits under ``ceiling`` everywhere, and until
    the bytes of reloads issued but not yet consumed, this one included, are
    at most ``prefetch_bytes`` (a reload alone may always be issued).
    Issue points never move backwards (the stream is in order).
    ``safe[i]``: does an op placed right after node i run there
    (``timeline.in_place_slots``)? An op placed elsewhere runs after the last
    node before it that does: its bytes are alive from there. Such a point
    moves there (a reload a little early costs no time) when its bytes fit
    under ``ceiling`` and ``prefetch_bytes`` from there, else later, after
    the next node that runs in place.
    """
    start = [0.0]
    for ms in node_ms:
        start.append(start[-1] + ms)
    latest: list[float] = []
    bound = float("inf")
    for r in reversed(reloads):
        bound = min(start[r.consumer], bound) - margin * r.nbytes / h2d_bytes_per_ms
        latest.append(bound)
    latest.reverse()

    live = list(base_live)
    issue: dict[str, int] = {}
    outstanding: list[tuple[int, int]] = []  # (consumer, bytes) of reloads issued
    floor = first

    def runs_from(i: int) -> int:
        # Issued before node i, i.e. right after node i - 1: where it runs.
        if safe is not None:
            while i > first and not safe[i - 1]:
                i -= 1
        return i

    for r, latest_start in zip(reloads, latest):
        consumer = max(r.consumer, floor)
        # The last node starting no later than latest_start, but not before floor.
        at = bisect.bisect_right(start, latest_start, floor, consumer + 1) - 1
        at = max(at, floor)
        # Memory: move past the last point in [at, consumer) it would overflow.
        for k in range(consumer - 1, at - 1, -1):
            if live[k] + r.nbytes > ceiling:
                at = k + 1
                break
        if prefetch_bytes is not None:
            # Wait for earlier reloads to be consumed until this one fits.
            pending = sorted((c, b) for c, b in outstanding if c > at)
            held = sum(b for _, b in pending)
            for c, b in pending:
                if held + r.nbytes <= prefetch_bytes:
                    break
                at, held = max(at, min(c, consumer)), held - b
        start_at = runs_from(at)
        if start_at < at:
            # It would run at ``start_at``: keep it there if its bytes fit
            # from there, else issue it after the next node that runs in place.
            ahead = sum(b for c, b in outstanding if c > start_at)
            if all(live[k] + r.nbytes <= ceiling for k in range(start_at, at)) and (
                prefetch_bytes is None or ahead == 0 or ahead + r.nbytes <= prefetch_bytes
            ):
                at = max(start_at, floor)
            else:
                while at < consumer and runs_from(at) < at:
                    at += 1
            start_at = runs_from(at)
        outstanding.append((consumer, r.nbytes))
        for k in range(start_at, consumer):
            live[k] += r.nbytes
        issue[r.key] = at
        floor = at
    return issue


def reload_schedule(
    bw_gm: fx.GraphModule,
    groups: Sequence,
    backward_live: Sequence[int],
    ceiling: int,
    profile: DeviceProfile,
    prefetch_bytes: Optional[int] = None,
) -> dict[str, str]:
    """The cost model's schedule for one backward graph: ``{storage: name of
    the backward node its reload is issued before}``.

    ``groups``: the plan's ``OffloadGroup``s. ``backward_live[i]``: predicted
    device bytes at backward node i with every reload landing at its consumer.
    """
    nodes = [n for n in bw_gm.graph.nodes if n.op != "output"]
    index = {n: i for i, n in enumerate(nodes)}
    placeholders = {n.name: n for n in nodes if n.op == "placeholder"}
    first = next((i for i, n in enumerate(nodes) if n.op != "placeholder"), len(nodes))
    reloads = []
    for group in groups:
        uses = [index[u] for m in group.members if m in placeholders for u in placeholders[m].users if u in index]
        if uses:
            reloads.append(Reload(group.storage, group_bytes(group, placeholders), min(uses)))
    reloads.sort(key=lambda r: r.consumer)
    node_ms = estimate_node_ms(bw_gm, profile)[: len(nodes)]
    issue = schedule_reloads(
        node_ms, backward_live, reloads, profile.bytes_per_ms("h2d"), ceiling, first,
        prefetch_bytes=prefetch_bytes, safe=in_place_slots(nodes),
    )
    return {key: nodes[i].name for key, i in issue.items()}


@dataclasses.dataclass(frozen=True)
class CopyOut:
    key: str  # the copy's storage name
    nbytes: int
    issued: int  # index of the node after which the copy starts (its producer)
    free_from: int  # first index after which the release may go (last forward use)


def schedule_releases(
    node_ms: Sequence[float],
    base_live: Sequence[int],
    copies: Sequence[CopyOut],
    d2h_bytes_per_ms: float,
    ceiling: int,
    margin: float = RELOAD_MARGIN,
    safe: Optional[Sequence[bool]] = None,
) -> dict[str, int]:
    """For each forward copy, the index of the node its release goes after.

    ``base_live[i]``: device bytes at forward node i with every offloaded
    tensor freed right after ``free_from``. ``safe[i]``: may a release go
    after node i without splitting a fused kernel (default: everywhere).

    Copies run one after the other on the device->host stream from the end of
    their producer, so they land in issue order. The forward is walked in
    order on an estimated clock that includes the waits the releases cause.
    After each safe node, every copy past its last forward use that has
    landed is released: the compute stream's wait for it costs nothing.
    Holding a copy keeps its bytes alive; before a node where the copies
    still held would lift memory above ``ceiling``, the oldest of them are
    released at the last safe slot before it, as few as bring memory under
    the ceiling (the compute stream then waits for the newest of those).
    Oldest first because they land first, so the wait is the shortest, and
    because waiting for one copy waits for every older one too: releasing
    those at the same point costs nothing more. A release never goes before
    ``free_from``; what is left at the end is released after the last node.
    """
    last = len(node_ms) - 1
    if last < 0:
        return {}
    safe = list(safe) if safe is not None else [True] * len(node_ms)
    safe[last] = True
    order = sorted(copies, key=lambda c: c.issued)
    rank = {c.key: i for i, c in enumerate(order)}
    issued_at: dict[int, list[CopyOut]] = {}
    for c in order:
        issued_at.setdefault(c.issued, []).append(c)
    held: list[CopyOut] = []  # issued and not released, in issue order
    landed: dict[str, float] = {}
    ends: list[float] = []  # estimated end of each node, waits included
    release: dict[str, int] = {}
    clock = stream_free = 0.0
    for k, ms in enumerate(node_ms):
        holding = [c for c in held if c.free_from < k]
        over = base_live[k] + sum(c.nbytes for c in holding) - ceiling
        slot = k - 1
        while slot >= 0 and not safe[slot]:
            slot -= 1
        if over > 0 and slot >= 0:
            newest, freed = None, 0
            for c in holding:
                if freed >= over:
                    break
                if c.free_from <= slot:
                    newest, freed = c, freed + c.nbytes
            if newest is not None:
                go = [c for c in held if c.free_from <= slot and rank[c.key] <= rank[newest.key]]
                for c in go:
                    release[c.key] = slot
                    held.remove(c)
                # The compute stream waits after ``slot`` for the newest one;
                # what ran since then runs that much later.
                clock += max(0.0, landed[newest.key] - ends[slot])
        clock += ms
        ends.append(clock)
        for c in issued_at.get(k, ()):
            stream_free = max(clock, stream_free) + margin * c.nbytes / d2h_bytes_per_ms
            landed[c.key] = stream_free
            held.append(c)
        if safe[k]:
            for c in [c for c in held if c.free_from <= k and (landed[c.key] <= clock or k == last)]:
                release[c.key] = k
                held.remove(c)
    for c in held:  # last used by the last node
        release[c.key] = max(c.free_from, last)
    return release


def release_schedule(
    fw_gm: fx.GraphModule,
    groups: Sequence,
    forward_live: Sequence[int],
    ceiling: int,
    profile: DeviceProfile,
) -> dict[str, str]:
    """The cost model's release points for one forward graph: ``{storage:
    name of the forward node its release goes after}``.

    ``forward_live[i]``: predicted device bytes at forward node i with every
    offloaded tensor freed right after its last forward use.
    """
    nodes = [n for n in fw_gm.graph.nodes if n.op != "output"]
    index = {n: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    last_use: dict[fx.Node, int] = {}
    for node in nodes:
        for arg in node.all_input_nodes:
            root = storage_root(arg)[0]
            last_use[root] = index[node]
    copies = []
    for group in groups:
        root = storage_root(by_name[group.members[0]])[0]
        issued = index[root]
        nbytes = group_bytes(group, by_name)
        copies.append(CopyOut(group.storage, nbytes, issued, max(issued, last_use.get(root, issued))))
    node_ms = estimate_node_ms(fw_gm, profile)[: len(nodes)]
    # A release inside a fused chain would split its kernel (one more round
    # trip to memory, and in low precision another rounding): releases go
    # after the chain, or before it where after would lift memory above the
    # ceiling.
    safe = safe_slots(nodes)
    release = schedule_releases(
        node_ms, forward_live, copies, profile.bytes_per_ms("d2h"), ceiling, safe=safe
    )
    return {key: nodes[i].name for key, i in release.items()}
