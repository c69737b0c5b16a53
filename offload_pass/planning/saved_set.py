"""Stage 3a, saved set: the partitioner's saved tensors as plain records.

Takes: the forward and backward graphs the partitioner produced (with the
joint graph's REQUEST_KEY / TENSOR_REQUEST_KEY meta copied onto their nodes).
Gives: one ``SavedTensor`` per value the forward saves for backward, traced
back through views / getitems to the node that owns its storage, attributed to
that node's module and fused-op role, with what the user asked for it. The
records are plain data, so ``plan.plan_saved_tensors`` is testable without
tracing anything.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Optional, Sequence

import torch
import torch.fx as fx

from offload_pass.annotation.annotations import Request
from offload_pass.enums import Decision, SavedKind
from offload_pass.meta_keys import REQUEST_KEY, TENSOR_REQUEST_KEY
from offload_pass.views import storage_root
from offload_pass.annotation.mlp_roles import MLP_ROLES, MlpRoles, mlp_roles
from offload_pass.marking.naming import module_name
from offload_pass.marking.roles import roles_of

__all__ = [
    "SavedTensor", "collect_saved_tensors", "is_tangent", "saved_positions", "check_requested_roles", "tensor_bytes",
    "traced_modules",
]


@dataclasses.dataclass(frozen=True)
class SavedTensor:
    name: str  # node name in the forward graph (and placeholder name in backward)
    position: int  # index in the forward graph's output tuple
    kind: SavedKind
    op: str  # op that produced the storage owner
    module: str  # qualified path of the module that produced it ("" if unknown)
    role: Optional[str]  # fused-op sub-op role, if any
    shape: tuple  # ints, or strings for symbolic sizes
    dtype: str
    nbytes: int  # 0 when symbolic
    storage: str  # name of the node owning the storage
    storage_nbytes: int
    is_view: bool
    symbolic: bool
    asked: Optional[Decision]  # None: not marked
    asked_by: str
    backward_first_use: int = -1  # index of its first consumer in the backward graph
    # A host (CPU) tensor in a graph that runs on an accelerator: already
    # where a copy would put it.
    on_host: bool = False
    # A view with a lazy conjugate / negative bit (aten._conj, autograd saves
    # them for complex parameters): the runtime ops cannot take one.
    lazy_bit: bool = False
    # A view whose dtype differs from its storage owner's (view_as_real,
    # view(dtype)): it cannot be rebuilt as as_strided of the owner.
    reinterpreted: bool = False
    # A view laid densely over its whole storage from offset 0 (a reshape or
    # permute of all of it): copying the owner moves exactly its bytes, and
    # Inductor then computes the owner in its own layout, as without offload
    # (an offload op reading the reshape of an unrealized pointwise would make
    # Inductor compute it in the reshaped layout instead: another loop, and
    # gradients that can differ in the last bit).
    spans_storage: bool = False


def _val(node: fx.Node) -> object:
    return node.meta.get("val")


def _op_name(node: fx.Node) -> str:
    if node.op == "placeholder":
        return "placeholder"
    if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
        return f"{_op_name(node.args[0])}[{node.args[1]}]"
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        packet = target._schema.name.replace("::", ".")
        return packet
    return getattr(target, "__name__", str(target))


def _concrete(value: object) -> Optional[int]:
    """An int, or None for a symbolic size. Never ``int()`` a SymInt here:
    that would specialize the graph on its current value (a recompile per shape)."""
    return value if isinstance(value, int) else None


def tensor_bytes(val: torch.Tensor) -> tuple[int, bool]:
    """A tensor's bytes (numel x element size, a view's own) and whether its
    size is symbolic (then 0 bytes): ``SavedTensor.nbytes``' rule."""
    numel = _concrete(val.numel())
    if numel is None:
        return 0, True
    return numel * val.element_size(), False


def _storage_bytes(val: torch.Tensor) -> int:
    nbytes = _concrete(val.untyped_storage().nbytes())
    if nbytes is None:
        return 0
    return nbytes


def is_tangent(node: fx.Node) -> bool:
    """A backward placeholder that is a gradient the backward receives, not a
    saved value: AOTAutograd names those ``tangents_N`` (its partitioner
    tells them apart by that name too)."""
    return node.op == "placeholder" and node.name.startswith("tangents_")


def saved_positions(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> dict[str, int]:
    """Saved value name -> its index in the forward output tuple.

    The partitioner appends the saved values to the forward outputs and makes
    them the backward's first placeholders, under the same names. Backward
    inputs that are no forward node (tangents, RNG states of checkpointed
    regions) are not saved activations and are left alone."""
    outputs = list(fw_gm.graph.find_nodes(op="output")[0].args[0])
    last_index = {out.name: i for i, out in enumerate(outputs) if isinstance(out, fx.Node)}
    return {
        n.name: last_index[n.name]
        for n in bw_gm.graph.find_nodes(op="placeholder")
        if not is_tangent(n) and n.name in last_index
    }


def _role_of(
    node: fx.Node, root: fx.Node, chain: list[fx.Node], mlp: MlpRoles
) -> tuple[Optional[str], Optional[fx.Node]]:
    """(role, fused node) of a saved tensor: an output role if the storage
    comes out of a fused op, else an input role if it is passed to one, else
    its role in a marked MLP written with matmuls (``mlp_roles``)."""
    if root.target is operator.getitem and isinstance(root.args[0], fx.Node):
        fused = root.args[0]
        roles = roles_of(fused.target)
        if roles is not None and root.args[1] in roles.outputs:
            return roles.outputs[root.args[1]], fused
    for candidate in chain:
        for user in candidate.users:
            roles = roles_of(user.target)
            if roles is None:
                continue
            for pos, arg in enumerate(user.args):
                if arg is candidate and pos in roles.inputs:
                    return roles.inputs[pos], user
    return mlp.role(root)


def _request(node: Optional[fx.Node]) -> Optional[Request]:
    if node is None:
        return None
    request = node.meta.get(REQUEST_KEY)
    if request is None and node.target is operator.getitem and isinstance(node.args[0], fx.Node):
        request = node.args[0].meta.get(REQUEST_KEY)
    return request


def _asked(chain: list[fx.Node], root: fx.Node, role: Optional[str], fused: Optional[fx.Node]) -> tuple[Optional[str], str]:
    tensor_marks: set[str] = set()
    for n in chain:
        tensor_marks |= set(n.meta.get(TENSOR_REQUEST_KEY, ()))
    if "keep" in tensor_marks:
        return Decision.KEEP, "mark_not_offload"
    if "offload" in tensor_marks:
        return Decision.OFFLOAD, "mark_offload"
    opinions: list[tuple[str, str]] = []
    producer = _request(root)
    producer_is_fused = fused is not None and (
        root is fused or (root.target is operator.getitem and root.args[0] is fused)
    )
    if producer is not None:
        said, source = producer.opinion_and_source(role if producer_is_fused else None)
        if said:
            opinions.append((said, source))
    if fused is not None and not producer_is_fused:
        consumer = _request(fused)
        if consumer is not None:
            said, source = consumer.opinion_and_source(role)
            if said:
                opinions.append((said, f"{source} (role {role!r})"))
    for mode in (Decision.KEEP, Decision.OFFLOAD):  # keep wins at the same level
        for said, source in opinions:
            if said == mode:
                return mode, source
    # Marked, but for other roles: say so rather than "not marked".
    for request in (producer, _request(fused) if fused is not None else None):
        if request is not None and request.roles:
            return None, f"{request.source} selects roles {list(request.roles)}, not {role!r}"
    return None, ""


@dataclasses.dataclass(frozen=True)
class _GraphFacts:
    """What every saved record of one forward graph reads."""

    placeholders: list
    static: set
    output_roots: set
    mlp: MlpRoles
    module_prefix: str
    on_accelerator: bool


def _kind(root: fx.Node, facts: _GraphFacts) -> SavedKind:
    if root.op == "placeholder":
        return SavedKind.PARAMETER if facts.placeholders.index(root) in facts.static else SavedKind.INPUT
    return SavedKind.OUTPUT if root.name in facts.output_roots else SavedKind.ACTIVATION


def _saved_record(node: fx.Node, position: int, first_use: int, facts: _GraphFacts) -> SavedTensor:
    """The record of one saved value (``first_use``: its first backward point, -1 if none)."""
    name, val = node.name, _val(node)
    if not isinstance(val, torch.Tensor):
        return SavedTensor(name, position, SavedKind.SYMINT, "sym", "", None, (), type(val).__name__,
                           0, name, 0, False, True, None, "", first_use)
    root, chain = storage_root(node)
    role, fused = _role_of(node, root, chain, facts.mlp)
    asked, asked_by = _asked(chain, root, role, fused)
    nbytes, symbolic = tensor_bytes(val)
    root_val = _val(root)
    owned = isinstance(root_val, torch.Tensor)
    storage_nbytes = _storage_bytes(root_val) if owned else nbytes
    reinterpreted = owned and root_val.dtype != val.dtype
    return SavedTensor(
        name=name,
        position=position,
        kind=_kind(root, facts),
        op=_op_name(root),
        module=module_name(root if root.op != "placeholder" else node, facts.module_prefix),
        role=role,
        shape=tuple(int(s) if isinstance(s, int) else str(s) for s in val.shape),
        dtype=str(val.dtype).replace("torch.", ""),
        nbytes=nbytes,
        storage=root.name,
        storage_nbytes=storage_nbytes,
        is_view=root is not node,
        symbolic=symbolic,
        asked=asked,
        asked_by=asked_by,
        backward_first_use=first_use,
        on_host=facts.on_accelerator and val.device.type == "cpu",
        lazy_bit=val.is_conj() or val.is_neg(),
        reinterpreted=reinterpreted,
        spans_storage=(
            root is not node and owned and not reinterpreted and not symbolic
            and nbytes == storage_nbytes and _concrete(val.storage_offset()) == 0
            and torch._prims_common.is_non_overlapping_and_dense_or_false(val)
        ),
    )


def collect_saved_tensors(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    static_input_indices: Sequence[int] = (),
    module_prefix: str = "",
    mlp: Optional[MlpRoles] = None,
) -> list[SavedTensor]:
    """``module_prefix`` names the module whose forward this graph's frame is
    (a frame compiled on its own after a graph break), since Dynamo names
    modules relative to the frame. ``mlp``: ``mlp_roles`` of the forward
    graph, if the caller has it already."""
    positions = saved_positions(fw_gm, bw_gm)
    fw_nodes = {n.name: n for n in fw_gm.graph.nodes}
    outputs = list(fw_gm.graph.find_nodes(op="output")[0].args[0])
    num_user_outputs = min(positions.values()) if positions else len(outputs)
    output_roots = {
        storage_root(o)[0].name for o in outputs[:num_user_outputs] if isinstance(o, fx.Node)
    }
    on_accelerator = any(
        isinstance(_val(n), torch.Tensor) and _val(n).device.type != "cpu" for n in fw_gm.graph.nodes
    )
    bw_order = {n: i for i, n in enumerate(bw_gm.graph.nodes)}
    first_use = {
        n.name: min(bw_order[u] for u in n.users)
        for n in bw_gm.graph.find_nodes(op="placeholder")
        if n.users
    }
    mlp = mlp if mlp is not None else mlp_roles(fw_gm.graph)
    facts = _GraphFacts(
        placeholders=list(fw_gm.graph.find_nodes(op="placeholder")), static=set(static_input_indices),
        output_roots=output_roots, mlp=mlp, module_prefix=module_prefix, on_accelerator=on_accelerator,
    )
    records = []
    for name, position in sorted(positions.items(), key=lambda kv: kv[1]):
        records.append(_saved_record(fw_nodes[name], position, first_use.get(name, -1), facts))
    return records


def traced_modules(fw_gm: fx.GraphModule, module_prefix: str = "") -> frozenset[str]:
    """The modules (qualified names, as ``SavedTensor.module`` names them)
    that have an op in the forward graph ``fw_gm``: a marked module among
    them ran inside a compiled graph, whatever it saved."""
    return frozenset(
        module_name(n, module_prefix) for n in fw_gm.graph.nodes
        if n.op == "call_function" and (n.meta.get("nn_module_stack") or n.meta.get("fwd_nn_module_stack"))
    )


def check_requested_roles(graph: fx.Graph, mlp: MlpRoles) -> None:
    """A mark with ``roles=`` must name roles that the fused ops under it
    have, or ``MLP_ROLES`` where it covers an MLP written with matmuls
    (``graph``: the forward graph, so backward matmuls do not count). A
    source in ``mlp.cut`` is not checked: a graph break left its matmul
    layers and fused ops outside this graph, so its roles cannot be seen
    here; ``mlp_roles`` has said so, and what it saves is kept."""
    requested: dict[str, set[str]] = {}
    available: dict[str, set[str]] = {source: set(MLP_ROLES) for source in mlp.sources - mlp.cut}
    for node in graph.nodes:
        request = node.meta.get(REQUEST_KEY)
        if request is None or not request.roles:
            continue
        requested.setdefault(request.source, set()).update(request.roles)
        roles = roles_of(node.target)
        if roles is not None:
            available.setdefault(request.source, set()).update(roles.all_roles)
    for source, wanted in sorted(requested.items()):
        if source in mlp.cut:
            continue
        have = available.get(source, set())
        unknown = wanted - have
        if unknown:
            listing = f"its roles are {sorted(have)}" if have else (
                "it covers no fused op with roles and no MLP of two matmul layers (roles "
                f"{list(MLP_ROLES)}: input of the first matmul, its output, input of the second)"
            )
            raise ValueError(
                f"offload_pass: {source} asks for roles {sorted(unknown)} but {listing} "
                "(register fused ops with offload_pass.register_saved_roles)"
            )
