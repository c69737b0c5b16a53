"""MLP roles: fc1 / act / fc2 in expert and MLP code written with matmuls.

Takes: a forward graph whose nodes carry ``REQUEST_KEY`` (what the user
asked). Gives: ``mlp_roles(graph)``: for each marked module whose mark selects
roles (``offload_modules(m, "layers.*.experts", roles=["fc1"])``), the storage
owners of its

- ``fc1``: the input of a first-layer matmul (the routed tokens),
- ``act``: a first-layer matmul's output (the activation's input),
- ``fc2``: the input of the second-layer matmul (the activation's output),

each also through ops that only mask, cast or view it (``where``, dtype
conversions, views: Hugging Face masks padding rows around each matmul),

with the matmul that makes each one so. A second-layer matmul is one whose
input is computed, inside the same module, from the module's other matmuls:
Hugging Face's grouped_mm experts, a torchtitan-style SiLU-gated block and a
dense gated MLP all have this shape. The structure decides, not the op and
position (both layers are the same op); fused ops registered with
``register_saved_roles`` are attributed by the registry instead.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.marking.roles import MLP_ROLES
from offload_pass.meta_keys import REQUEST_KEY
from offload_pass.views import is_view_node, storage_root

__all__ = ["MLP_ROLES", "MlpRoles", "mlp_roles"]

aten = torch.ops.aten
# Matmuls and the position of their activation operand (the other is the weight).
_MATMULS = {
    aten.mm.default: 0,
    aten.bmm.default: 0,
    aten.addmm.default: 1,
    aten.baddbmm.default: 1,
}
if hasattr(aten, "_grouped_mm"):
    _MATMULS[aten._grouped_mm.default] = 0

# Ops that pass values through unchanged but for masking, dtype or layout:
# Hugging Face's grouped_mm experts mask padding rows with ``where`` around
# each matmul, and compute the activation in fp32. A role follows its tensor
# through them.
_PASS_THROUGH = {
    aten.where.self,
    aten.clone.default,
    aten.masked_fill.Scalar,
    aten.masked_fill.Tensor,
    aten._to_copy.default,
    torch.ops.prims.convert_element_type.default,
}


def _passes_through(node: fx.Node) -> bool:
    return node.op == "call_function" and (node.target in _PASS_THROUGH or is_view_node(node))


def _roots(node: object, direction: str, source: Optional[str] = None) -> list[fx.Node]:
    """Storage owners of ``node`` and of what it passes through: ``"before"``,
    the values it was passed through from; ``"after"``, the values that ops
    of ``source`` pass it through to."""
    if not isinstance(node, fx.Node):
        return []
    found, pending = [], [node]
    while pending:
        current = pending.pop()
        root = storage_root(current)[0]
        if direction == "after":
            if root not in found:
                found.append(root)
            pending.extend(
                user for user in current.users
                if _passes_through(user) and _source(user) == source and user not in found
            )
        elif root not in found:
            found.append(root)
            if _passes_through(root):
                pending.extend(a for a in root.all_input_nodes if _is_float(a))
    return found


def _is_float(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


@dataclasses.dataclass
class MlpRoles:
    """Storage owner -> (role, the matmul it belongs to); and the mark sources
    (modules, regions) that have an MLP shape at all."""

    of_storage: dict[fx.Node, tuple[str, fx.Node]]
    sources: set[str]

    def role(self, root: fx.Node) -> tuple[Optional[str], Optional[fx.Node]]:
        return self.of_storage.get(root, (None, None))


def _source(node: fx.Node) -> Optional[str]:
    request = node.meta.get(REQUEST_KEY)
    return request.source if request is not None and request.roles else None


def _first_layer(second: fx.Node, source: str) -> list[fx.Node]:
    """Matmuls of ``source`` that ``second``'s activation operand is computed
    from, through that module's own ops (the activation, gating, views)."""
    found: list[fx.Node] = []
    start = second.args[_MATMULS[second.target]]
    pending = [start] if isinstance(start, fx.Node) else []
    seen = set(pending)
    while pending:
        node = pending.pop()
        if node.op != "call_function" or node.meta.get(REQUEST_KEY) is None:
            continue
        if node.target in _MATMULS:
            if _source(node) == source:
                found.append(node)
            continue
        if node.meta[REQUEST_KEY].source != source:
            continue
        for arg in node.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                pending.append(arg)
    return sorted(found, key=lambda n: n.name)


def mlp_roles(graph: fx.Graph) -> MlpRoles:
    by_source: dict[str, list[fx.Node]] = {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _MATMULS:
            source = _source(node)
            if source is not None:
                by_source.setdefault(source, []).append(node)
    roles: dict[fx.Node, tuple[str, fx.Node]] = {}
    sources = set()
    for source, matmuls in by_source.items():
        for second in matmuls:
            firsts = _first_layer(second, source)
            if not firsts:
                continue
            sources.add(source)
            for first in firsts:
                for root in _roots(first.args[_MATMULS[first.target]], "before"):
                    roles.setdefault(root, ("fc1", first))
                for root in _roots(first, "after", source):
                    roles.setdefault(root, ("act", first))
            for root in _roots(second.args[_MATMULS[second.target]], "before"):
                roles.setdefault(root, ("fc2", second))
    return MlpRoles(roles, sources)
