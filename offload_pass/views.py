"""Views: which node owns a tensor's storage, and where in it a view lies.

Takes: FX graphs with fake values (``node.meta["val"]``). Gives:
``storage_root`` (the node owning a view's storage, and the chain to it),
``view_geometry`` (size, stride, storage offset and dtype of a view, replayed
from its storage root), and ``retrace_view_vals``, which makes every view's
fake value agree with that replay.

Why replay instead of reading ``meta["val"]``: Inductor's joint-graph pattern
matcher traces its replacements on fresh storages at offset 0 and copies
those fake values onto the nodes it inserts, so a saved q / k / v view can
claim offset 0 while it lies further into one ``addmm`` output; a view rebuilt
from such a value reads the wrong elements, without an error. The graph's
structure is right, so the geometry is replayed from it.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode

__all__ = [
    "ViewGeometry",
    "is_view_node",
    "view_base",
    "storage_root",
    "view_geometry",
    "retrace_saved_views",
    "retrace_view_vals",
]


def is_view_node(node: fx.Node) -> bool:
    """True if ``node``'s output aliases its first tensor argument's storage."""
    if node.op != "call_function":
        return False
    target = node.target
    if target is torch.ops.aten.alias.default or target is torch.ops.aten.detach.default:
        return True
    if isinstance(target, torch._ops.OpOverload):
        return _aliasing(target)[0]
    if target is operator.getitem:
        producer = node.args[0]
        if isinstance(producer, fx.Node) and isinstance(producer.target, torch._ops.OpOverload):
            # split / unbind return views of their input; getitem picks one.
            return _aliasing(producer.target)[1]
    return False


# An op's schema by identity (ops live as long as the process): the
# planning asks of thousands of nodes per partition, and reading a schema
# costs more than the rest of the test.
_ALIASING: dict[int, tuple[torch._ops.OpOverload, tuple[bool, bool]]] = {}


def _aliasing(op: torch._ops.OpOverload) -> tuple[bool, bool]:
    """Whether ``op`` returns one value that views an input without writing
    it, and whether its first return aliases an input."""
    known = _ALIASING.get(id(op))
    if known is None or known[0] is not op:
        returns = op._schema.returns
        first = returns[0].alias_info if returns else None
        single_view = len(returns) == 1 and first is not None and not first.is_write
        known = _ALIASING[id(op)] = (op, (single_view, first is not None))
    return known[1]


def view_base(node: fx.Node) -> Optional[fx.Node]:
    if node.target is operator.getitem:
        producer = node.args[0]
        base = producer.args[0] if isinstance(producer, fx.Node) and producer.args else None
    else:
        base = node.args[0] if node.args else None
    return base if isinstance(base, fx.Node) else None


def storage_root(node: fx.Node) -> tuple[fx.Node, list[fx.Node]]:
    """The node that owns ``node``'s storage, and the chain from ``node`` to it."""
    chain = [node]
    while is_view_node(chain[-1]):
        base = view_base(chain[-1])
        if base is None:
            break
        chain.append(base)
    return chain[-1], chain


@dataclasses.dataclass(frozen=True)
class ViewGeometry:
    """Where a tensor lies in its storage: what ``as_strided`` needs to
    rebuild it from the storage owner (offset relative to the owner's own)."""

    size: tuple
    stride: tuple
    storage_offset: int
    dtype: torch.dtype

    @classmethod
    def of(cls, val: torch.Tensor, base_offset: int = 0) -> "ViewGeometry":
        return cls(tuple(val.size()), tuple(val.stride()), val.storage_offset() - base_offset, val.dtype)

    def __str__(self) -> str:
        return (
            f"size {list(self.size)}, stride {list(self.stride)}, storage offset "
            f"{self.storage_offset}, {str(self.dtype).replace('torch.', '')}"
        )


def _concrete(val: object) -> bool:
    """A tensor whose sizes, strides and offset are plain ints (replaying a
    symbolic view could add guards after Dynamo has finished)."""
    return isinstance(val, torch.Tensor) and all(
        isinstance(d, int) for d in (*val.size(), *val.stride(), val.storage_offset())
    )


def _apply(node: fx.Node, base: object, fake_mode) -> object:
    """Run view op ``node`` under ``fake_mode`` with ``base`` as its first
    argument and the recorded values of its other arguments."""
    rest = fx.node.map_arg((node.args[1:], node.kwargs), lambda a: a.meta["val"])
    with fake_mode:
        return node.target(base, *rest[0], **rest[1])


def _replay_chain(node: fx.Node) -> Optional[torch.Tensor]:
    """``node``'s value replayed along its view chain from the storage
    root's fake value; None when a value is missing or symbolic."""
    root, chain = storage_root(node)
    current = root.meta.get("val")
    if not _concrete(current):
        return None
    fake_mode = detect_fake_mode([current])
    for n in reversed(chain[:-1]):
        if n.target is operator.getitem:
            producer, index = n.args
            current = _apply(producer, current, fake_mode)[index]  # type: ignore[index]
        else:
            current = _apply(n, current, fake_mode)
    return current if _concrete(current) else None


def view_geometry(node: fx.Node) -> Optional[ViewGeometry]:
    """``node``'s geometry in its storage root's storage, replayed along the
    view chain from the root (offset relative to the root's own offset);
    None when a size is symbolic or a fake value is missing."""
    root, _ = storage_root(node)
    val = _replay_chain(node)
    if val is None:
        return None
    return ViewGeometry.of(val, root.meta["val"].storage_offset())


def retrace_view_vals(graph: fx.Graph) -> list[str]:
    """Replace the fake value of every view whose recorded geometry differs
    from the one replayed from its storage root; returns the names changed.

    Walks the graph in order so each view replays from already corrected
    bases. Views of symbolic size keep their values (see ``_concrete``)."""
    fake_mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes])
    if fake_mode is None:
        return []
    changed = []
    for node in graph.nodes:
        multi_output_view = (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and any(u.target is operator.getitem and is_view_node(u) for u in node.users)
        )
        if not (is_view_node(node) or multi_output_view):
            continue
        base = node.args[0]
        base_val = base.meta.get("val") if isinstance(base, fx.Node) else None
        try:
            if node.target is operator.getitem:
                if not isinstance(base_val, (list, tuple)):
                    continue
                val = base_val[node.args[1]]
            elif _concrete(base_val):
                val = _apply(node, base_val, fake_mode)
            else:
                continue
        except Exception:  # an op the fake mode cannot replay: keep what tracing recorded
            continue
        old = node.meta.get("val")
        if _differs(old, val):
            node.meta["val"] = val
            changed.append(node.name)
    return changed


def _differs(old: object, new: object) -> bool:
    if isinstance(new, (list, tuple)):
        return not isinstance(old, (list, tuple)) or len(old) != len(new) or any(
            _differs(o, n) for o, n in zip(old, new)
        )
    if not (_concrete(old) and _concrete(new)):
        return False
    return ViewGeometry.of(old) != ViewGeometry.of(new)  # type: ignore[arg-type]


def retrace_saved_views(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> list[str]:
    """``retrace_view_vals`` over a forward, and the backward inputs its
    corrected views are saved as given the same values: the names changed."""
    changed = retrace_view_vals(fw_gm.graph)
    if changed:
        fw_nodes = {n.name: n for n in fw_gm.graph.nodes}
        for placeholder in bw_gm.graph.find_nodes(op="placeholder"):
            if placeholder.name in changed:
                placeholder.meta["val"] = fw_nodes[placeholder.name].meta["val"]
    return changed
