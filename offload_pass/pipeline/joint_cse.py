"""PyTorch's partitioner, its common-subexpression pass made once per joint graph.

Takes: the joint graph module, its inputs and the partitioner's keyword
arguments, as ``min_cut_rematerialization_partition`` takes them. Gives
``partition_joint``: that partitioner's forward and backward modules, its
``fx_graph_cse`` pass skipped where the joint's graph is one it made.

Why: the partitioner starts by replacing the joint's graph with its CSE'd
copy (``functorch.config.cse``), and mode="budget"'s search partitions the
same joint up to ten times: every partition after the first walks and
copies a graph in which nothing is left to merge (one to two seconds on an
8B-sized joint, each time). A graph that pass made holds no two nodes of
one target on the same inputs, so the pass would give it back unchanged:
``tests/test_joint_cse.py`` checks both that and that the partitions are
the same. Where CSE is off in the config, nothing is recorded or skipped.
"""

from __future__ import annotations

import contextlib
import weakref

import torch
import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition

__all__ = ["partition_joint"]

# The graphs the partitioner's CSE made, while they live.
_MADE_BY_CSE: "weakref.WeakSet[fx.Graph]" = weakref.WeakSet()


def partition_joint(joint: fx.GraphModule, inputs, **kwargs) -> tuple[fx.GraphModule, fx.GraphModule]:
    """``min_cut_rematerialization_partition(joint, inputs, **kwargs)``, its
    CSE pass skipped where ``joint``'s graph is that pass's own output."""
    made = joint.graph in _MADE_BY_CSE
    skip = torch._functorch.config.patch(cse=False) if made else contextlib.nullcontext()
    with skip:
        fw_gm, bw_gm = min_cut_rematerialization_partition(joint, inputs, **kwargs)
    if not made and torch._functorch.config.cse:
        _MADE_BY_CSE.add(joint.graph)
    return fw_gm, bw_gm
