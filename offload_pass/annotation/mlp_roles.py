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

A module whose forward a graph break cut, leaving none of its matmul layers
in the graph (Hugging Face's fp32 experts run them eagerly), has no roles
there: what it saves is kept and a warning says so, once per module.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.marking.backend_check import warn_once
from offload_pass.marking.roles import MLP_ROLES, roles_of
from offload_pass.meta_keys import REQUEST_KEY
from offload_pass.views import is_view_node, storage_root

__all__ = ["MLP_ROLES", "MlpRoles", "mlp_roles"]

aten = torch.ops.aten
# Matmuls, by qualified op name, and the position of their activation operand
# (the other is the weight). Hugging Face's experts run ``aten._grouped_mm`` in
# bf16 and, in other dtypes under compile, its own custom op of the same
# signature (``transformers::grouped_mm_fallback``): named here so that it is
# recognised without importing transformers.
_MATMUL_OPERAND = {
    "aten::mm": 0,
    "aten::bmm": 0,
    "aten::addmm": 1,
    "aten::baddbmm": 1,
    "aten::_grouped_mm": 0,
    "transformers::grouped_mm_fallback": 0,
}


def _operand(node: fx.Node) -> Optional[int]:
    """Position of a matmul node's activation operand; None for other nodes."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return None
    if target._overloadname != "default":
        return None
    return _MATMUL_OPERAND.get(target._schema.name)


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
    (modules, regions) whose MLP roles are settled in this graph: those with
    an MLP shape, and those in ``cut``."""

    of_storage: dict[fx.Node, tuple[str, fx.Node]]
    sources: set[str]
    # Sources asking for roles whose forward ran eagerly around this graph's
    # frame (a graph break) and that have no MLP and no fused op with roles
    # here: their matmuls ran outside the graph, so no tensor here has a role
    # and what they save is kept; a warning says so once per module.
    cut: frozenset[str] = frozenset()

    def role(self, root: fx.Node) -> tuple[Optional[str], Optional[fx.Node]]:
        return self.of_storage.get(root, (None, None))


def _source(node: fx.Node) -> Optional[str]:
    request = node.meta.get(REQUEST_KEY)
    return request.source if request is not None and request.roles else None


def _first_layer(second: fx.Node, source: str) -> list[fx.Node]:
    """Matmuls of ``source`` that ``second``'s activation operand is computed
    from, through that module's own ops (the activation, gating, views)."""
    found: list[fx.Node] = []
    start = second.args[_operand(second)]
    pending = [start] if isinstance(start, fx.Node) else []
    seen = set(pending)
    while pending:
        node = pending.pop()
        if node.op != "call_function" or node.meta.get(REQUEST_KEY) is None:
            continue
        if _operand(node) is not None:
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
        if _operand(node) is not None:
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
                for root in _roots(first.args[_operand(first)], "before"):
                    roles.setdefault(root, ("fc1", first))
                for root in _roots(first, "after", source):
                    roles.setdefault(root, ("act", first))
            for root in _roots(second.args[_operand(second)], "before"):
                roles.setdefault(root, ("fc2", second))
    cut = _cut_sources(graph, sources)
    for source, asked in sorted(cut.items()):
        _warn_cut(source, asked)
    return MlpRoles(roles, sources | set(cut), frozenset(cut))


def _cut_sources(graph: fx.Graph, found: set[str]) -> dict[str, tuple[str, ...]]:
    """Sources (-> the roles they ask for) whose module ran eagerly around
    this graph's frame and that have neither an MLP (``found``) nor a fused
    op with roles in it: the graph holds a piece of the module, cut off by a
    graph break, and its matmuls ran elsewhere."""
    eager: dict[str, tuple[str, ...]] = {}
    fused: set[str] = set()
    for node in graph.nodes:
        request = node.meta.get(REQUEST_KEY)
        if request is None or not request.roles:
            continue
        if roles_of(node.target) is not None:
            fused.add(request.source)
        if request.eager:
            eager.setdefault(request.source, request.roles)
    return {s: r for s, r in eager.items() if s not in found and s not in fused}


def _warn_cut(source: str, roles: tuple[str, ...]) -> None:
    warn_once(
        f"offload_pass: {source} asks for roles {list(roles)}, but its forward ran eagerly under "
        "torch.compile (a graph break in or around it) and the graph compiled from it holds none "
        "of its matmul layers: they ran outside any compiled graph, so no tensor of it has a role "
        "and what it saves there is kept. Hugging Face's experts do this in fp32, where their "
        "transformers::grouped_mm_fallback op has a backward torch.compile cannot trace; in bf16 "
        "they run aten._grouped_mm, where roles apply. TORCH_LOGS=graph_breaks shows the breaks."
    )
