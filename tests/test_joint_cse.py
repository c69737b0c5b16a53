"""The partitioner's CSE made once per joint (``pipeline/joint_cse.py``).

mode="budget"'s search partitions one joint many times, and PyTorch's
partitioner replaces the joint's graph with its CSE'd copy each time. Where
the graph is already that pass's output the pipeline skips the pass: this
holds only if the pass gives such a graph back unchanged, and the
partitions made so must be those PyTorch makes with the pass, at every
level and block cut, tags included.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.fx as fx
from torch._functorch.compile_utils import fx_graph_cse
from torch._functorch.partitioners import min_cut_rematerialization_partition

from offload_pass.examples.models import make_decoder
from offload_pass.pipeline import joint_cse
from offload_pass.planning.blocks import BlockCut, cut_tags, find_blocks
from tests.test_blocks import _joint, _tiny_llama

pytestmark = pytest.mark.xdist_group("blocks")


def _text(graph: fx.Graph) -> list:
    """Each node as it reads: name, op, target, inputs by name, tags."""
    def plain(value):
        return fx.node.map_arg(value, lambda n: n.name)

    return [
        (n.name, n.op, str(n.target), str(plain(n.args)), str(plain(n.kwargs)), n.meta.get("recompute"),
         n.meta.get("ac_graph_id"))
        for n in graph.nodes
    ]


def _models():
    torch.manual_seed(0)
    yield "decoder", make_decoder(layers=3, hidden=32, heads=4), (torch.randn(2, 16, 32),)
    model, ids = _tiny_llama(layers=3)
    yield "llama", model, (ids,)


@pytest.mark.parametrize("name", ["decoder", "llama"])
def test_the_partitioners_cse_gives_a_graph_it_made_back_unchanged(name):
    model, inputs = next((m, i) for n, m, i in _models() if n == name)

    def check(joint, joint_inputs, kwargs):
        min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)  # the joint's graph is now the CSE'd copy
        made = joint.graph
        return _text(made), _text(fx_graph_cse(made)), len([n for n in made.nodes if n.op == "call_function"])

    _, (made, again, ops) = _joint(model, *inputs, check=check)
    assert ops > 50 and again == made


@pytest.mark.parametrize("name", ["decoder", "llama"])
def test_partitions_without_cse_again_are_pytorchs(name):
    # One joint partitioned as the search does (levels, then block cuts, one
    # after the other, the pass skipped after the first) against a fresh copy
    # of the joint partitioned by PyTorch as shipped for each.
    model, inputs = next((m, i) for n, m, i in _models() if n == name)
    levels = [None, 0.5, BlockCut(3, 3), BlockCut(2, 3, True, 0.5), 0.1]

    def partitions(joint, joint_inputs, kwargs, partition, fresh):
        out = []
        for level in levels:
            one = copy.deepcopy(joint) if fresh else joint
            cut = level if isinstance(level, BlockCut) else None
            budget = cut.rest if cut is not None else level
            with torch._functorch.config.patch(**({} if budget is None else {"activation_memory_budget": budget})):
                with cut_tags(one, find_blocks(one.graph), cut) if cut is not None else contextlib.nullcontext():
                    fw_gm, bw_gm = partition(one, joint_inputs, **kwargs)
            out.append((fw_gm.code, bw_gm.code))
        return out

    skipped = []

    def counting(joint, joint_inputs, **kwargs):
        skipped.append(joint.graph in joint_cse._MADE_BY_CSE)
        return joint_cse.partition_joint(joint, joint_inputs, **kwargs)

    def check(joint, joint_inputs, kwargs):
        shipped = partitions(joint, joint_inputs, kwargs, min_cut_rematerialization_partition, fresh=True)
        once = partitions(joint, joint_inputs, kwargs, counting, fresh=False)
        return shipped, once

    _, (shipped, once) = _joint(model, *inputs, check=check)
    assert skipped == [False] + [True] * (len(levels) - 1)
    assert len({fw for fw, _ in shipped}) >= 3  # the levels and cuts differ: the comparison is not of one partition
    assert once == shipped
