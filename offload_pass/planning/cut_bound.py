"""A lower bound on a block cut's step, known before its partition is made.

Takes: the joint graph, its blocks (``blocks.find_blocks``), a
``BlockCut``, the joint's number of forward outputs and the first
partition's ``NodeTimes`` and time between forward and backward. Gives
``cut_step_bound``: milliseconds below which the step simulator predicts no
partition of that cut, with offload or without.

Why: a partition of an 8B-sized joint graph costs seconds to tens of
seconds, and mode="budget"'s search keeps the fastest partition within the
budget. A cut whose bound stands above the step of a partition the search
already found within the budget cannot be kept: it is not partitioned.

How: the step simulator's step is at least the compute stream's time, the
sum of its nodes' times, and at least the host's, which issues each node
before it runs; offload only adds to both. Every partition runs
in its forward each forward node the forward's outputs are computed from,
and in its backward each backward node. A cut runs again in the backward
every tagged node the backward reads, and the tagged nodes those are
computed from, back to what PyTorch's partitioner saves of a cut: untagged
nodes, attention's outputs where kept (``MUST_SAVE``), and the boundary
between two tagged blocks (a tagged node read by a later block's tagged
node; ``cleanup_recompute_tags``). Only nodes whose time no partition
changes are counted (``inductor_model.written_whatever_partition``): a
pointwise result costs nothing where Inductor fuses it into its consumers,
and which consumers share its graph depends on the partition. Times are
the first partition's (calibrated, measured where kernels were), by node
name; a node it does not hold counts 0. Where the user's own checkpointing
tagged the forward, no bound is given (the boundaries of its regions, which
the partitioner saves too, are not modelled).
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

from offload_pass.planning.blocks import BlockCut, Blocks, cut_policies, forward_nodes
from offload_pass.planning.inductor_model import written_whatever_partition
from offload_pass.planning.step_model import NodeTimes

__all__ = ["cut_step_bound", "recomputed_by_cut"]


def _ancestors(roots: Iterable[fx.Node], within: set[fx.Node]) -> set[fx.Node]:
    """``roots`` of ``within`` and every node of ``within`` they are computed from."""
    found: set[fx.Node] = set()
    stack = [r for r in roots if r in within]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(n for n in node.all_input_nodes if n in within and n not in found)
    return found


def _outputs(graph: fx.Graph, num_fwd_outputs: int) -> tuple[list[fx.Node], list[fx.Node]]:
    """The joint's forward outputs and its gradients (the nodes among them)."""
    (out,) = graph.find_nodes(op="output")
    values = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    nodes = [(i, v) for i, v in enumerate(values) if isinstance(v, fx.Node)]
    return [v for i, v in nodes if i < num_fwd_outputs], [v for i, v in nodes if i >= num_fwd_outputs]


def recomputed_by_cut(
    graph: fx.Graph, blocks: Blocks, cut: BlockCut, backward: set[fx.Node]
) -> set[fx.Node]:
    """The tagged nodes every partition of ``cut`` runs again in the
    backward (``backward``: the joint's backward nodes): those a backward
    node reads and those they are computed from, up to what the partitioner
    saves (see the module docstring)."""
    policies = {node: (rank, policy) for rank, node, policy in cut_policies(blocks, cut)}

    def recomputed(node: fx.Node) -> bool:
        rank, policy = policies.get(node, (None, CheckpointPolicy.MUST_SAVE))
        if policy == CheckpointPolicy.MUST_SAVE:
            return False
        # A boundary: read by a later block's node tagged for recompute.
        return not any(
            policies.get(u, (-1, CheckpointPolicy.MUST_SAVE))[1] != CheckpointPolicy.MUST_SAVE
            and policies[u][0] > rank for u in node.users
        )

    candidates = {n for n in policies if recomputed(n)}
    read = [n for n in candidates if any(u in backward for u in n.users)]
    return _ancestors(read, candidates)


def cut_step_bound(
    graph: fx.Graph, blocks: Blocks, cut: BlockCut, num_fwd_outputs: int, times: NodeTimes, between_ms: float = 0.0
) -> Optional[float]:
    """The step no partition of ``cut`` runs faster than, as the step
    simulator predicts it (see the module docstring); None where the user's
    own checkpointing tagged forward nodes (its regions' boundaries, which
    the partitioner saves too, are not modelled)."""
    forward = set(forward_nodes(graph))
    if any(n.meta.get("recompute") is not None for n in forward):
        return None
    fw_out, grads = _outputs(graph, num_fwd_outputs)
    backward = {n for n in graph.nodes if n.op == "call_function" and n not in forward}
    ran_forward = _ancestors(fw_out, forward)
    ran_backward = _ancestors(grads, backward)
    again = recomputed_by_cut(graph, blocks, cut, backward) & ran_forward
    # Forward nodes run in the forward and again in the backward, backward nodes once.
    in_forward = [n for n in ran_forward if written_whatever_partition(n, ran_forward.__contains__)] + [
        n for n in again if written_whatever_partition(n, (again | ran_backward).__contains__)
    ]
    in_backward = [n for n in ran_backward if written_whatever_partition(n, ran_backward.__contains__)]

    def total(forward_ms: dict[str, float], backward_ms: dict[str, float]) -> float:
        return sum(forward_ms.get(n.name, 0.0) for n in in_forward) + sum(
            backward_ms.get(n.name, 0.0) for n in in_backward
        )

    # The compute stream runs every node; the host issues every node before it runs.
    return between_ms + max(total(times.forward, times.backward), total(times.host_forward, times.host_backward))
