"""Invariants of a rewrite, checked after every rewrite (like ``graph.lint()``).

Takes: the forward and backward graph modules as the rewrite left them
(``CREATED_BY_KEY`` on its nodes, ``REPLACES_KEY`` on a rebuilt view). Gives:
nothing, or an ``OffloadInvariantError`` naming the node that breaks one of:

1. every rebuilt view has the size, stride, storage offset and dtype of the
   saved tensor it replaces, replayed along that tensor's view chain
   (``views.view_geometry``), not read from fake values;
2. every reload is waited on before any consumer reads it;
3. a host copy is read by reloads only;
4. no release before its copy is issued nor before the last forward read of
   any alias of the storage it frees;
5. host-pool slots of one graph never overlap and each fits its copy.

One walk over each graph; ``disabled_passes=("invariants",)`` skips it.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.fx as fx

from offload_pass.meta_keys import CHOSEN_KEY, CREATED_BY_KEY, REPLACES_KEY
from offload_pass.runtime import OPS, extent_bytes
from offload_pass.views import ViewGeometry, storage_root, view_geometry

__all__ = ["OffloadInvariantError", "check_rewrite"]


class OffloadInvariantError(AssertionError):
    """The rewritten graphs break an invariant; running them could give a
    wrong gradient. Always a bug of offload_pass: please report it."""


def _fail(graph_id: str, message: str) -> None:
    raise OffloadInvariantError(
        f"offload_pass: {graph_id}: {message}. This is a bug in offload_pass; compile without "
        "offload (or mark_not_offload the tensor) to continue, and please report it"
    )


def _ops(graph: fx.Graph, name: str) -> list[fx.Node]:
    return list(graph.find_nodes(op="call_function", target=OPS[name]))


def check_rewrite(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, graph_id: str = "graph") -> None:
    """Raise ``OffloadInvariantError`` if the rewritten graphs break an
    invariant listed in this module's docstring."""
    _check_forward(fw_gm.graph, graph_id)
    _check_backward(fw_gm.graph, bw_gm.graph, graph_id)


def _alias_readers(root: fx.Node) -> list[fx.Node]:
    """Forward nodes reading any alias of ``root``'s storage (the output and
    the rewrite's own nodes aside)."""
    readers, pending, seen = [], [root], {root}
    while pending:
        node = pending.pop()
        for user in node.users:
            if user.op == "output" or user.meta.get(CREATED_BY_KEY):
                continue
            readers.append(user)
            if user not in seen and storage_root(user)[0] is root:
                seen.add(user)
                pending.append(user)
    return readers


def _check_forward(graph: fx.Graph, graph_id: str) -> None:
    order = {n: i for i, n in enumerate(graph.nodes)}
    copied = {storage_root(host.args[0])[0] for host in _ops(graph, "offload")}
    for node in graph.nodes:
        if node.meta.get(CHOSEN_KEY) == "offload" and storage_root(node)[0] not in copied:
            _fail(graph_id, f"the plan offloads {node.name}, but no offload copies its storage to host")
    releases = {}
    for release in _ops(graph, "release"):
        source, host = release.args
        if host in releases:
            _fail(graph_id, f"host copy {host.name} is released twice ({releases[host].name}, {release.name})")
        releases[host] = release
    slots: list[tuple[int, int, fx.Node]] = []
    for host in _ops(graph, "offload"):
        source = host.args[0]
        if order[host] < order[source]:
            _fail(graph_id, f"{host.name} copies {source.name} before it is produced")
        release = releases.get(host)
        if release is None:
            _fail(graph_id, f"{host.name}: the device memory of {source.name} is never released")
            continue
        if order[release] < order[host]:
            _fail(graph_id, f"{release.name} frees {source.name} before its copy {host.name} is issued")
        late = [r for r in _alias_readers(storage_root(source)[0]) if order[r] > order[release]]
        if late:
            _fail(
                graph_id,
                f"{release.name} frees {source.name} before {late[0].name} reads its storage",
            )
        if len(host.args) >= 7:
            _, _, _, pool, pool_bytes, offset, slot_bytes = host.args[:7]
            val = source.meta.get("val")
            need = extent_bytes(val) if isinstance(val, torch.Tensor) else 0
            if slot_bytes < need or offset + slot_bytes > pool_bytes:
                _fail(
                    graph_id,
                    f"{host.name}: host slot [{offset}, {offset + slot_bytes}) of a {pool_bytes}-byte "
                    f"pool cannot hold {need} bytes",
                )
            slots.append((offset, offset + slot_bytes, host))
    slots.sort(key=lambda s: s[0])
    for (a0, a1, a), (b0, b1, b) in zip(slots, slots[1:]):
        if b0 < a1:
            _fail(graph_id, f"host slots of {a.name} [{a0}, {a1}) and {b.name} [{b0}, {b1}) overlap")


def _check_backward(fw_graph: fx.Graph, bw_graph: fx.Graph, graph_id: str) -> None:
    order = {n: i for i, n in enumerate(bw_graph.nodes)}
    fw_nodes = {n.name: n for n in fw_graph.nodes}
    waits: dict[fx.Node, fx.Node] = {}
    for wait in _ops(bw_graph, "wait_reload"):
        waits[wait.args[0]] = wait
    for reload in _ops(bw_graph, "reload"):
        host = reload.args[0]
        wait = waits.get(reload)
        if wait is None:
            _fail(graph_id, f"reload {reload.name} is never waited on")
            continue
        readers = [u for u in reload.users if u is not wait]
        for view in [u for u in readers if u.meta.get(REPLACES_KEY)]:
            readers += list(view.users)
        early = [r for r in readers if order[r] < order[wait]]
        if early:
            _fail(graph_id, f"{early[0].name} reads {reload.name} before {wait.name} waits for its copy")
        _check_views(reload, host, fw_nodes, graph_id)
    for placeholder in bw_graph.find_nodes(op="placeholder"):
        reloads = [u for u in placeholder.users if u.target is OPS["reload"]]
        if reloads and len(reloads) != len(placeholder.users):
            other = next(u for u in placeholder.users if u.target is not OPS["reload"])
            _fail(graph_id, f"{other.name} reads the host copy {placeholder.name} instead of its reload")


def _check_views(reload: fx.Node, host: fx.Node, fw_nodes: dict[str, fx.Node], graph_id: str) -> None:
    """Invariant 1 for every saved value that ``reload`` stands for."""
    source = fw_nodes.get(reload.meta.get(REPLACES_KEY, ""))
    if source is None:
        _fail(graph_id, f"reload {reload.name} does not say which forward value it reloads")
    source_geometry = view_geometry(source)
    for user in reload.users:
        member_name = user.meta.get(REPLACES_KEY)
        if member_name is None:
            continue
        member = fw_nodes.get(member_name)
        if member is None:
            _fail(graph_id, f"{user.name} rebuilds {member_name!r}, which the forward graph lacks")
        want = view_geometry(member)
        if want is None or source_geometry is None:
            continue  # symbolic sizes: such members are copied one by one, never rebuilt
        # The reloaded source starts at offset 0 of its own storage.
        want = ViewGeometry(want.size, want.stride, want.storage_offset - source_geometry.storage_offset, want.dtype)
        got = _rebuilt_geometry(user)
        if got != want:
            _fail(graph_id, f"{user.name} rebuilds {member_name} as {got}, but it was saved as {want}")


def _rebuilt_geometry(node: fx.Node) -> Optional[ViewGeometry]:
    """What an ``as_strided(reloaded, size, stride, offset)`` rebuilds, from
    its arguments (its fake value would repeat the same arithmetic)."""
    if node.target is not torch.ops.aten.as_strided.default:
        return None
    base, size, stride, *offset = node.args
    return ViewGeometry(tuple(size), tuple(stride), offset[0] if offset else 0, base.meta["val"].dtype)
