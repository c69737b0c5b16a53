"""Blocks: the repeated layers of a joint graph, and partitions that recompute whole blocks from their inputs.

Takes: the joint graph AOTAutograd hands the partitioner (Dynamo's
``nn_module_stack`` on its forward nodes). Gives:

- ``find_blocks(graph)``: the model's repeated layers (the children of the
  module list with the most indexed children in the graph, e.g.
  ``model.layers.0`` .. ``model.layers.31``), each with its forward nodes,
  in execution order; ``None`` where the graph has fewer than two.
- ``BlockCut``: a partition that recomputes the last ``count`` of them in
  backward from their inputs (``keep_attention``: attention's outputs saved,
  so its s² kernel is not run twice; ``rest``: the
  ``activation_memory_budget`` the partitioner applies to the nodes not
  tagged), a recompute choice of mode="budget" beside PyTorch's
  ``activation_memory_budget`` levels.
- ``cut_tags(joint, blocks, cut)``: a context manager that tags those
  blocks' nodes with PyTorch's activation-checkpointing policies
  (``node.meta["recompute"]``, ``"ac_graph_id"``) for the min-cut
  partitioner, and puts the graph back as it was on exit.

Why this way: the deep end of the memory range is what users reach with
activation checkpointing plus offloaded block inputs (recompute each block
from its input, keep that input on the host). PyTorch's partitioner already
honours checkpointing tags, places the recompute just before each block's
backward and saves the boundary tensors between tagged regions; what it
cannot do is choose which blocks to tag. Tagging the last blocks first
leaves the early blocks, whose saved tensors wait longest for the backward
and are the cheapest to copy out and back in time, to offload.

Never tagged: nodes the user's own checkpointing already tagged, random
ops (recomputing them would draw new numbers: a wrong gradient),
collectives, and ops with side effects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import re
from collections import defaultdict
from typing import Iterator, Optional

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

from offload_pass.marking.naming import clean_dynamo_path
from offload_pass.planning.saved_set import is_tangent

__all__ = ["ATTENTION_OPS", "BlockCut", "Blocks", "cut_policies", "cut_tags", "find_blocks", "forward_nodes"]

_TAG_KEYS = ("recompute", "ac_graph_id")
_INDEXED = re.compile(r"^(.*)\.(\d+)$")

# The fused attention kernels whose outputs ``BlockCut.keep_attention`` saves.
ATTENTION_OPS = frozenset(
    name for name in (
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_flash_attention_forward", "_efficient_attention_forward",
    )
)


@dataclasses.dataclass(frozen=True)
class BlockCut:
    """Recompute the last ``count`` of the graph's ``of`` blocks from their
    inputs; with ``keep_attention``, attention's outputs are saved. ``rest``:
    the ``activation_memory_budget`` PyTorch's partitioner applies to every
    node not tagged (the other blocks' light recompute; None: as configured)."""

    count: int
    of: int
    keep_attention: bool = False
    rest: Optional[float] = None

    def __post_init__(self) -> None:
        if not 0 < self.count <= self.of:
            raise ValueError(f"BlockCut: count must be in 1..{self.of}, got {self.count}")
        if self.rest is not None and not 0 <= self.rest <= 1:
            raise ValueError(f"BlockCut: rest must be an activation_memory_budget in 0..1 or None, got {self.rest}")

    def blocks_text(self) -> str:
        """The blocks it recomputes, as a sentence reads them."""
        what = "all but attention" if self.keep_attention else "all"
        return f"last {self.count} of {self.of} blocks recomputed ({what})"

    def rest_text(self) -> str:
        """The partition of the nodes not tagged ("" where as configured)."""
        return "" if self.rest is None else f"the rest under activation_memory_budget={self.rest:g}"

    def __str__(self) -> str:
        return self.blocks_text() + (f", {self.rest_text()}" if self.rest is not None else "")

    def __format__(self, spec: str) -> str:
        return str(self)


@dataclasses.dataclass(frozen=True)
class Blocks:
    """The repeated layers of a graph: ``container`` (e.g. ``model.layers``)
    and each block's forward nodes, in execution order."""

    container: str
    nodes: tuple[tuple[fx.Node, ...], ...]

    def __len__(self) -> int:
        return len(self.nodes)


def forward_nodes(graph: fx.Graph) -> list[fx.Node]:
    """The joint graph's call_function nodes that do not depend on a tangent (the forward)."""
    backward: set[fx.Node] = set()
    for node in graph.nodes:
        if is_tangent(node):
            backward.add(node)
        elif node.op == "call_function" and any(a in backward for a in node.all_input_nodes):
            backward.add(node)
    return [n for n in graph.nodes if n.op == "call_function" and n not in backward]


def _indexed_modules(node: fx.Node) -> list[tuple[str, int]]:
    """(container, index) of every module on the node's stack named ``container.N``, outermost first."""
    found = []
    for path, *_rest in (node.meta.get("nn_module_stack") or {}).values():
        if isinstance(path, str):
            match = _INDEXED.match(clean_dynamo_path(path))
            if match:
                found.append((match.group(1), int(match.group(2))))
    return found


def find_blocks(graph: fx.Graph) -> Optional[Blocks]:
    """The children of the module list with the most indexed children among
    the forward's nodes (two at least; ties: the outermost), each with the
    forward nodes traced inside it; None where no module list has two."""
    members: dict[str, dict[int, list[fx.Node]]] = defaultdict(lambda: defaultdict(list))
    depth: dict[str, int] = {}
    for node in forward_nodes(graph):
        for level, (container, index) in enumerate(_indexed_modules(node)):
            members[container][index].append(node)
            depth[container] = min(depth.get(container, level), level)
    candidates = [c for c in members if len(members[c]) >= 2]
    if not candidates:
        return None
    container = max(candidates, key=lambda c: (len(members[c]), -depth[c]))
    order = {n: i for i, n in enumerate(graph.nodes)}
    by_index = members[container]
    ranked = sorted(by_index, key=lambda i: min(order[n] for n in by_index[i]))
    return Blocks(container, tuple(tuple(by_index[i]) for i in ranked))


def _never_tagged(node: fx.Node) -> bool:
    """Random ops (attention without dropout is not one), collectives, ops
    with side effects, nodes a user's checkpointing tagged already, and the
    outputs of a multi-output op that is never tagged."""
    if "recompute" in node.meta:
        return True
    target = node.target
    if target is operator.getitem and isinstance(node.args[0], fx.Node):
        return _never_tagged(node.args[0])
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.is_mutable or target.namespace in ("_c10d_functional", "c10d_functional", "_dtensor"):
        return True
    return torch.Tag.nondeterministic_seeded in target.tags and not (_is_attention(node) and _dropout(node) == 0)


def _dropout(node: fx.Node) -> object:
    """An attention kernel's ``dropout_p`` (0 where not given)."""
    for index, argument in enumerate(node.target._schema.arguments):
        if argument.name == "dropout_p":
            if argument.name in node.kwargs:
                return node.kwargs[argument.name]
            return node.args[index] if index < len(node.args) else argument.default_value
    return 0


def _is_attention(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target._opname in ATTENTION_OPS


def _output_of_attention(node: fx.Node) -> bool:
    """A getitem of an attention kernel: left to the partitioner, which
    saves what the backward reads of a kernel banned from recompute."""
    return node.target is operator.getitem and isinstance(node.args[0], fx.Node) and _is_attention(node.args[0])


def cut_policies(blocks: Blocks, cut: BlockCut) -> list[tuple[int, fx.Node, CheckpointPolicy]]:
    """The tags ``cut_tags`` gives: (block rank, node, policy) for every node
    of the last ``cut.count`` blocks it tags, in block order; attention's
    kernels ``MUST_SAVE`` where ``cut.keep_attention``, the rest
    ``PREFER_RECOMPUTE`` (which PyTorch's partitioner reads as must-recompute)."""
    first = len(blocks) - cut.count
    # Chosen before any is tagged: a getitem follows its op as the user's tags left it.
    return [
        (rank, node, CheckpointPolicy.MUST_SAVE if cut.keep_attention and _is_attention(node)
         else CheckpointPolicy.PREFER_RECOMPUTE)
        for rank, block in enumerate(blocks.nodes[first:], start=first) for node in block
        if not (_never_tagged(node) or (cut.keep_attention and _output_of_attention(node)))
    ]


@contextlib.contextmanager
def cut_tags(joint: fx.GraphModule, blocks: Blocks, cut: BlockCut) -> Iterator[int]:
    """Tag the last ``cut.count`` blocks' forward nodes for recompute (each
    block its own ``ac_graph_id``, so the partitioner saves the tensors that
    pass between them); attention's kernels ``MUST_SAVE`` where
    ``cut.keep_attention``. Yields the number of nodes tagged; on exit every
    node's tags are as before (the partitioner's own included)."""
    if blocks.nodes[0][0].graph is not joint.graph:
        raise ValueError(
            "cut_tags: the blocks were found on another graph than the joint's (the partitioner replaces it with "
            "a copy): find_blocks(joint.graph) just before"
        )
    if cut.of != len(blocks):
        raise ValueError(f"BlockCut is for {cut.of} blocks, the graph has {len(blocks)} in {blocks.container}")
    # The partitioner writes these keys too (the boundary tensors it saves)
    # and replaces the joint's graph with its CSE'd copy, tags and all: on
    # exit, every node of the graph the joint then has, matched by name,
    # gets back the keys it had.
    before = {n.name: {k: n.meta[k] for k in _TAG_KEYS if k in n.meta} for n in joint.graph.nodes}
    chosen = cut_policies(blocks, cut)
    try:
        for rank, node, policy in chosen:
            node.meta["recompute"] = policy
            node.meta["ac_graph_id"] = rank
        yield len(chosen)
    finally:
        for graph in {id(g): g for g in (joint.graph, blocks.nodes[0][0].graph)}.values():
            for node in graph.nodes:
                for key in _TAG_KEYS:
                    node.meta.pop(key, None)
                node.meta.update(before.get(node.name, {}))
