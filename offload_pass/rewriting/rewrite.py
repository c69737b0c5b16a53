"""Stage 4, the rewrite: apply an ``OffloadPlan`` to the forward and backward graphs.

Takes: the partitioner's forward and backward graph modules, the plan and the
config. Gives: their graphs, edited in place and linted, in modules that
generate their code when first run or read (``_code_deferred``):

forward   x = producer(...)
          x_host = offload_pass.offload(x, ...)     right after the producer, into its
                                                    slot of the graph's host pool
          ...                                       where the copy is predicted to have landed
          offload_pass.release(x, x_host)           (or ``max_inflight`` copies later); x's
                                                    memory is freed here
          return (..., x_host, ...)                 the host copy is what backward gets

backward  x_host = placeholder                      same position as before
          x_dev = offload_pass.reload(x_host, dev)  where the cost model schedules it
                                                    (or ``prefetch`` reloads ahead of first use)
          offload_pass.wait_reload(x_dev)           right before the first consumer
          consumer(x_dev)

Nodes made here carry ``meta[CREATED_BY_KEY] = "rewrite"`` (meta_keys).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch.fx._lazy_graph_module import _LazyGraphModule

from offload_pass.meta_keys import CHOSEN_KEY, CREATED_BY_KEY, LAYOUT_FREE_KEY, REPLACES_KEY
from offload_pass.config import OffloadConfig
from offload_pass.enums import CopyKind, PassName
from offload_pass.planning.lifetimes import CopyLifetime
from offload_pass.planning.plan import OffloadPlan
from offload_pass.rewriting import copy_source  # noqa: F401  (Inductor's layout of offload's input)
from offload_pass.rewriting import reload_alignment  # noqa: F401  (Inductor's alignment of reloads)
from offload_pass.runtime import OPS, PAGE_BYTES, extent_bytes
from offload_pass.planning.saved_set import saved_positions

__all__ = ["rewrite_graphs", "host_pool_layout"]


@dataclasses.dataclass
class _Copy:
    source: str  # forward node copied to host
    group: str  # storage of its plan group (the key of the reload schedule)
    members: list[str]  # saved values it stands for
    # member -> (size, stride, storage offset) to rebuild it as a view of the
    # reloaded source; None means the member is the source itself.
    views: dict[str, Optional[tuple]]
    # Whether the host copy may hold its source in any dense layout Inductor
    # gives it (rewriting/copy_source.py): nothing reads it by its traced
    # strides (no view rebuilt from it, no ``as_strided`` on it in the backward).
    layout_free: bool = False


# Ops that address their input's storage by strides they are given.
_AS_STRIDED = (torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_.default)


def _copies(plan: OffloadPlan, fw_nodes: dict[str, fx.Node], bw_gm: fx.GraphModule) -> list[_Copy]:
    placeholders = {n.name: n for n in bw_gm.graph.find_nodes(op="placeholder")}

    def read_by_strides(name: str) -> bool:
        node = placeholders.get(name)
        return node is None or any(user.target in _AS_STRIDED for user in node.users)

    copies = []
    for group in plan.groups:
        if group.copy == CopyKind.STORAGE:
            root = fw_nodes[group.storage]
            root_offset = root.meta["val"].storage_offset()
            views = {}
            for name in group.members:
                val = fw_nodes[name].meta["val"]
                views[name] = (tuple(val.size()), tuple(val.stride()), val.storage_offset() - root_offset)
            copies.append(_Copy(group.storage, group.storage, list(group.members), views))
        else:
            for name in group.members:
                copies.append(_Copy(name, group.storage, [name], {name: None}, not read_by_strides(name)))
    return copies


def _concrete_extent(val: torch.Tensor) -> Optional[int]:
    """Bytes the host copy of ``val`` spans (its sizes and strides from the
    first element); None when a size is symbolic (it may change per call)."""
    if not all(isinstance(d, int) for d in (*val.size(), *val.stride())):
        return None
    return extent_bytes(val) or None


def host_pool_layout(extents: list[tuple[str, Optional[int]]]) -> tuple[str, int, dict[str, tuple[int, int]]]:
    """Lay copies out in one host buffer: ``extents`` is (copied node, bytes
    or None) in issue order. Gives (layout key, pool bytes, node -> (offset,
    slot bytes)); copies of unknown size get no slot. Slots are whole pages
    (4096 bytes), one after the other; layouts with the same slots get the
    same key (and may share buffers: a slot is only reused once free)."""
    slots: dict[str, tuple[int, int]] = {}
    total = 0
    for name, nbytes in extents:
        if nbytes is None:
            continue
        size = -(-nbytes // PAGE_BYTES) * PAGE_BYTES
        slots[name] = (total, size)
        total += size
    key = hashlib.sha1(repr(list(slots.values())).encode()).hexdigest()[:12] if slots else ""
    return key, total, slots


def _new_node(graph: fx.Graph, target, args: tuple, fake_mode, name: Optional[str] = None) -> fx.Node:
    node = graph.create_node("call_function", target, args, name=name)
    node.meta[CREATED_BY_KEY] = "rewrite"
    fake_args = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
    with fake_mode:
        node.meta["val"] = target(*fake_args)
    return node


def _rewrite_forward(
    fw_gm: fx.GraphModule,
    copies: list[_Copy],
    lifetimes: dict[str, CopyLifetime],
    positions: dict[str, int],
    config: OffloadConfig,
    release_after: Optional[dict[str, str]],
    host_cap: int = -1,
) -> Optional[tuple[int, int]]:
    """Returns the host pool's bytes and its number of slots (None: no pool)."""
    graph = fw_gm.graph
    points = [n for n in graph.nodes if n.op != "output"]  # as the lifetimes count them
    nodes = {n.name: n for n in graph.nodes}
    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])
    issued, host_pool = _insert_offloads(graph, copies, nodes, config, fake_mode, host_cap)

    group_of = {c.source: c.group for c in copies}
    groups = set(group_of.values())
    last_use = {g: points[lifetimes[g].last_forward_use] for g in groups}
    scheduled = None if release_after is None else {g: nodes[release_after[g]] for g in groups}
    anchors = _release_anchors(graph, issued, group_of, last_use, config.max_inflight, scheduled)
    for (source, host), anchor in zip(issued, anchors):
        with graph.inserting_after(anchor):
            _new_node(graph, OPS["release"], (source, host), fake_mode)

    # The backward gets the host copies in place of the saved values.
    hosts = {source.name: host for source, host in issued}
    output = graph.find_nodes(op="output")[0]
    args = list(output.args[0])
    for copy in copies:
        for member in copy.members:
            args[positions[member]] = hosts[copy.source]
    output.args = (tuple(args),)
    return host_pool


def _insert_offloads(
    graph: fx.Graph, copies: list[_Copy], nodes: dict[str, fx.Node], config: OffloadConfig, fake_mode,
    host_cap: int = -1,
) -> tuple[list[tuple[fx.Node, fx.Node]], Optional[tuple[int, int]]]:
    """Inserts each copy's offload right after its source, into its slot of
    the host pool. Gives (source, host copy) in issue order (graph order),
    and the pool's bytes and number of slots (None: no pool)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    in_order = sorted(copies, key=lambda c: order[nodes[c.source]])
    pool, pool_bytes, slots = host_pool_layout(
        []
        if PassName.HOST_POOL in config.disabled_passes
        else [(c.source, _concrete_extent(nodes[c.source].meta["val"])) for c in in_order]
    )
    issued: list[tuple[fx.Node, fx.Node]] = []
    for copy in in_order:
        source = nodes[copy.source]
        slot = (pool, pool_bytes, *slots[copy.source]) if copy.source in slots else ()
        with graph.inserting_after(source):
            host = _new_node(
                graph, OPS["offload"], (source, config.pin_memory, host_cap, *slot), fake_mode, f"{source.name}_host"
            )
        host.meta[LAYOUT_FREE_KEY] = copy.layout_free
        issued.append((source, host))
    return issued, ((pool_bytes, len(slots)) if slots else None)


def _release_anchors(
    graph: fx.Graph,
    issued: list[tuple[fx.Node, fx.Node]],
    group_of: dict[str, str],
    last_use: dict[str, fx.Node],
    max_inflight: int,
    scheduled: Optional[dict[str, fx.Node]],
) -> list[fx.Node]:
    """The node each copy of ``issued`` is released after. ``last_use``: each
    group's last forward use; ``scheduled``: the cost model's release point
    of each group (None: the fixed schedule, ``max_inflight``)."""
    # Release copy i right after copy i + max_inflight is issued (the copy
    # stream stays busy with the ones in between) or before the outputs, but
    # never before the last forward use of its storage.
    output = graph.find_nodes(op="output")[0]
    pos = {n: i for i, n in enumerate(graph.nodes)}
    anchors = []
    for i, (source, host) in enumerate(issued):
        group = group_of[source.name]
        if scheduled is not None:
            target = scheduled[group]
        else:
            j = i + max_inflight
            target = issued[j][1] if j < len(issued) else output.prev
        # Never before the copy is issued, nor before the last use, nor before
        # the copies of the same storage's other members ("each": they read it).
        siblings = [h for s, h in issued if group_of[s.name] == group]
        anchors.append(max(target, last_use[group], host, *siblings, key=pos.__getitem__))
    return anchors


def _rewrite_backward(
    bw_gm: fx.GraphModule,
    copies: list[_Copy],
    lifetimes: dict[str, CopyLifetime],
    fw_nodes: dict[str, fx.Node],
    config: OffloadConfig,
    reload_before: Optional[dict[str, str]],
) -> None:
    graph = bw_gm.graph
    points = list(graph.nodes)  # as the lifetimes count them (the output last)
    placeholders = {n.name: n for n in graph.find_nodes(op="placeholder")}
    by_name = {n.name: n for n in graph.nodes}
    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])
    first_compute = next(n for n in graph.nodes if n.op != "placeholder")

    first_use = {id(c): lifetimes[c.group].first_use_of(c.members) for c in copies}
    used = sorted((c for c in copies if first_use[id(c)] is not None), key=lambda c: first_use[id(c)])
    anchors = [points[first_use[id(c)]] for c in used]
    for j, copy in enumerate(used):
        source_val = fw_nodes[copy.source].meta["val"]
        host_ph = placeholders[copy.members[0]]
        for m in copy.members:
            placeholders[m].meta["val"] = _host_fake(source_val, fake_mode)
        consumer = anchors[j]
        if reload_before is not None:
            issue_at = by_name[reload_before[copy.group]]
        else:
            k = j - config.prefetch
            issue_at = anchors[k] if k >= 0 else first_compute
        with graph.inserting_before(issue_at):
            # A copy rebuilt as views addresses its storage from offset 0;
            # one that stands for a single view keeps that view's alignment.
            align = 0 if any(v is not None for v in copy.views.values()) else _alignment(source_val)
            args = (host_ph, source_val.device, align) if align else (host_ph, source_val.device)
            dev = _new_node(graph, OPS["reload"], args, fake_mode, f"{copy.source}_reload")
            dev.meta[REPLACES_KEY] = copy.source
        with graph.inserting_before(consumer):
            _new_node(graph, OPS["wait_reload"], (dev,), fake_mode)
            for m in copy.members:
                view = copy.views[m]
                if view is None:
                    replacement = dev
                else:
                    replacement = _new_node(
                        graph, torch.ops.aten.as_strided.default, (dev, *view), fake_mode, f"{m}_view"
                    )
                    replacement.meta[REPLACES_KEY] = m
                placeholders[m].replace_all_uses_with(
                    replacement, delete_user_cb=lambda user: user.meta.get(CREATED_BY_KEY) != "rewrite"
                )


# Reloads keep the address alignment of the tensor they stand for, modulo
# this many bytes (the CUDA caching allocator aligns blocks to 512, the CPU
# allocator to 64): a view at another alignment can run another kernel path
# (MKL, vectorized loops) and round differently, a gradient one ulp off.
ALIGN_BYTES = 256


def _alignment(val: torch.Tensor) -> int:
    """Elements past an ``ALIGN_BYTES`` boundary at which ``val`` starts in
    its storage (0 for a symbolic offset)."""
    offset = val.storage_offset()
    if not isinstance(offset, int):
        return 0
    misaligned = offset * val.element_size() % ALIGN_BYTES
    return misaligned // val.element_size() if misaligned % val.element_size() == 0 else 0


def _host_fake(val: torch.Tensor, fake_mode) -> torch.Tensor:
    with fake_mode:
        return OPS["offload"](val)


def rewrite_graphs(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    plan: OffloadPlan,
    lifetimes: dict[str, CopyLifetime],
    config: OffloadConfig,
    reload_before: Optional[dict[str, str]] = None,
    release_after: Optional[dict[str, str]] = None,
    host_cap: int = -1,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The cost model's schedule, when given: ``release_after[storage]``: the
    forward node after which that group's device memory is released;
    ``reload_before[storage]``: the backward node before which its reload is
    issued. None: ``config.max_inflight`` / ``config.prefetch`` (fixed).
    ``host_cap``: the pinned host bytes the offload op lets the copies
    hold as it runs (-1: none; the plan was cut to the same limit, so this
    only guards it). Records the host pool's size in ``plan.host_pool``."""
    if not plan.groups:
        return fw_gm, bw_gm
    positions = saved_positions(fw_gm, bw_gm)
    fw_nodes = {n.name: n for n in fw_gm.graph.nodes}
    for entry in plan.entries:
        if entry.name in fw_nodes:
            fw_nodes[entry.name].meta[CHOSEN_KEY] = entry.decision
    copies = _copies(plan, fw_nodes, bw_gm)
    plan.host_pool = _rewrite_forward(fw_gm, copies, lifetimes, positions, config, release_after, host_cap)
    _rewrite_backward(bw_gm, copies, lifetimes, fw_nodes, config, reload_before)
    for gm in (fw_gm, bw_gm):
        gm.graph.lint()
    return _code_deferred(fw_gm), _code_deferred(bw_gm)


def _code_deferred(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``'s graph (and ``meta``) in a module that generates its Python
    code when it is first run or its code read (torch.fx's lazy graph
    module, as Inductor's passes use). mode="budget"'s search rewrites
    every partition it plans and keeps one, and the backward PyTorch's
    partitioner hands over is a plain module, which generates the code of
    an 8B-sized graph (about 0.4 s) at every ``recompile``."""
    lazy = _LazyGraphModule.from_graphmodule(gm)
    if lazy is not gm:
        lazy.meta = gm.meta
    lazy.recompile()
    return lazy
