"""Blocks and block cuts: the repeated layers of a joint graph, and the
partitions that recompute whole blocks from their inputs (mode="budget"'s
deep end).

The tags must reach the partitioner and leave the joint graph as it was
(PyTorch's partitioner replaces the joint's graph with a CSE'd copy, tags
and all); a cut of every block must save, of the blocks, only the tensors
that pass between them; random ops are never recomputed; attention's
outputs are saved where the cut keeps attention.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.utils.checkpoint import CheckpointPolicy

from offload_pass.examples.models import make_decoder
from offload_pass.planning.blocks import ATTENTION_OPS, BlockCut, cut_tags, find_blocks, forward_nodes

pytestmark = pytest.mark.xdist_group("blocks")


def _joint(model: torch.nn.Module, *inputs: torch.Tensor, check=None):
    """The joint graph AOTAutograd hands the partitioner; ``check(joint,
    joint_inputs, kwargs)`` runs there (the partitioner needs the compile's
    fake mode) and its result is returned with the joint."""
    captured = {}

    def partition(joint, joint_inputs, **kwargs):
        captured.update(joint=joint, result=None if check is None else check(joint, joint_inputs, kwargs))
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm, partition_fn=partition)
    out = torch.compile(model, backend=backend)(*inputs)
    out = out.logits if hasattr(out, "logits") else out
    out.float().pow(2).mean().backward()
    return captured["joint"], captured["result"]


def _tiny_llama(layers: int = 2, dropout: float = 0.0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=64, max_position_embeddings=64, use_cache=False, attention_dropout=dropout,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config).train(), torch.randint(0, 64, (2, 16))


def _tags(graph: fx.Graph) -> dict:
    return {n.name: (n.meta.get("recompute"), n.meta.get("ac_graph_id")) for n in graph.nodes}


def _saved(fw_gm: fx.GraphModule) -> list[fx.Node]:
    """The forward's saved tensors: its outputs past the user-visible ones that are activations (not placeholders)."""
    (out,) = fw_gm.graph.find_nodes(op="output")
    return [a for a in out.args[0] if isinstance(a, fx.Node) and a.op != "placeholder"]


def test_find_blocks_names_the_repeated_layers():
    joint, _ = _joint(make_decoder(layers=3, hidden=32, heads=4), torch.randn(2, 16, 32))
    blocks = find_blocks(joint.graph)
    assert blocks is not None and blocks.container == "layers" and len(blocks) == 3
    forward = set(forward_nodes(joint.graph))
    assert all(n in forward for block in blocks.nodes for n in block)
    order = {n: i for i, n in enumerate(joint.graph.nodes)}
    firsts = [min(order[n] for n in block) for block in blocks.nodes]
    assert firsts == sorted(firsts)  # in execution order

    model, ids = _tiny_llama(layers=2)
    joint, _ = _joint(model, ids)
    blocks = find_blocks(joint.graph)
    assert blocks is not None and blocks.container == "model.layers" and len(blocks) == 2


def test_a_graph_without_a_module_list_has_no_blocks():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8))
    joint, _ = _joint(model, torch.randn(4, 8))
    assert find_blocks(joint.graph) is None


def _decoder_and_input():
    return make_decoder(layers=3, hidden=32, heads=4), torch.randn(2, 16, 32)


def test_cut_tags_leave_the_joint_as_it_was_after_the_partitioner_replaced_its_graph():
    def check(joint, inputs, kwargs):
        before, graph_before = _tags(joint.graph), joint.graph
        with cut_tags(joint, find_blocks(joint.graph), BlockCut(3, 3)) as tagged:
            assert tagged > 0
            min_cut_rematerialization_partition(joint, inputs, **kwargs)
        assert joint.graph is not graph_before  # the partitioner's CSE'd copy, tagged while copied
        after = _tags(joint.graph)
        assert {k: v for k, v in after.items() if k in before} == {k: before[k] for k in after if k in before}
        assert not any(n.meta.get("ac_graph_id") is not None for n in joint.graph.nodes)
        return True

    assert _joint(*_decoder_and_input(), check=check)[1]


def test_a_cut_of_every_block_saves_of_the_blocks_only_what_passes_between_them():
    def check(joint, inputs, kwargs):
        stale = find_blocks(joint.graph)
        plain = {n.name for n in _saved(min_cut_rematerialization_partition(joint, inputs, **kwargs)[0])}
        blocks = find_blocks(joint.graph)  # on the graph the partitioner left (a copy)
        forward = set(forward_nodes(joint.graph))
        block_of = {n.name: i for i, block in enumerate(blocks.nodes) for n in block}
        # A block's tensors another block (or the rest of the forward) reads.
        crossing = {
            n.name for block in blocks.nodes for n in block
            if any(block_of.get(u.name) != block_of[n.name] for u in n.users if u in forward)
        }
        with pytest.raises(ValueError, match="found on another graph"):
            with cut_tags(joint, stale, BlockCut(3, 3)):
                pass
        with cut_tags(joint, blocks, BlockCut(3, 3)):
            fw_gm, _ = min_cut_rematerialization_partition(joint, inputs, **kwargs)
        inside = {n.name for n in _saved(fw_gm) if n.name in block_of}
        assert inside <= crossing, f"saved from inside a recomputed block: {sorted(inside - crossing)}"
        assert inside and len(inside) < len({n for n in plain if n in block_of})
        return True

    assert _joint(*_decoder_and_input(), check=check)[1]


def test_a_cut_of_the_last_blocks_leaves_the_first_to_the_partitioner():
    joint, _ = _joint(*_decoder_and_input())
    blocks = find_blocks(joint.graph)
    with cut_tags(joint, blocks, BlockCut(1, 3)):
        tags = {n.name: n.meta.get("ac_graph_id") for block in blocks.nodes for n in block}
    assert {tags[n.name] for n in blocks.nodes[2]} - {None} == {2}
    assert {tags[n.name] for block in blocks.nodes[:2] for n in block} == {None}
    with pytest.raises(ValueError, match="count must be in 1..3"):
        BlockCut(4, 3)
    with pytest.raises(ValueError, match="BlockCut is for 2 blocks, the graph has 3 in layers"):
        with cut_tags(joint, blocks, BlockCut(1, 2)):
            pass


@pytest.mark.parametrize("keep_attention", [False, True])
def test_attention_is_recomputed_or_saved_as_the_cut_says(keep_attention):
    model, ids = _tiny_llama(layers=2)
    joint, _ = _joint(model, ids)
    blocks = find_blocks(joint.graph)
    attention = [n for block in blocks.nodes for n in block if getattr(n.target, "_opname", None) in ATTENTION_OPS]
    assert attention, "the tiny Llama's forward has no fused attention kernel"
    with cut_tags(joint, blocks, BlockCut(2, 2, keep_attention)):
        for node in attention:
            want = CheckpointPolicy.MUST_SAVE if keep_attention else CheckpointPolicy.PREFER_RECOMPUTE
            assert node.meta["recompute"] == want
            for user in node.users:
                assert user.target is operator.getitem
                assert ("recompute" in user.meta) is not keep_attention


def test_random_ops_are_never_tagged():
    model, ids = _tiny_llama(layers=2, dropout=0.5)
    joint, _ = _joint(model, ids)
    blocks = find_blocks(joint.graph)
    with cut_tags(joint, blocks, BlockCut(2, 2)):
        seeded = [
            n for block in blocks.nodes for n in block
            if isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags
        ]
        assert seeded, "attention dropout drew no random numbers in the forward"
        assert all("recompute" not in n.meta for n in seeded), [n.name for n in seeded if "recompute" in n.meta]


def _fake(peak):
    from types import SimpleNamespace

    prediction = SimpleNamespace(peak=peak, step_ms=1.0, peak_offset=0)
    return SimpleNamespace(plan=SimpleNamespace(
        prediction=prediction, graph_id="g", recompute_level=None, offloaded_bytes=0,
    ))


@pytest.mark.parametrize(
    "peaks, budget, want",
    [
        # count -> predicted peak of its plan (count 0: offload alone); the smallest count within the budget.
        ({0: 100, **{c: 100 - 10 * c for c in range(1, 9)}}, 45, 6),
        ({0: 100, **{c: 100 - 10 * c for c in range(1, 9)}}, 90, 1),
        ({0: 100, **{c: 100 - 10 * c for c in range(1, 9)}}, 20, 8),
        # Not linear: most of the drop in the last blocks.
        ({0: 100, 1: 99, 2: 98, 3: 97, 4: 96, 5: 95, 6: 60, 7: 40, 8: 20}, 50, 7),
    ],
)
def test_the_cut_search_finds_the_fewest_blocks_within_the_budget_in_few_partitions(peaks, budget, want):
    from offload_pass.pipeline.deep_cuts import _smallest_cut

    tried = []

    def run(request, seen):
        tried.append(request.level.count)
        return _fake(peaks[request.level.count])

    found = _smallest_cut(_fake(peaks[0]), run, budget, 8, False, set(), 8, _fake(peaks[8]))
    reaching = [a.plan.prediction.peak for a in found if a.plan.prediction.peak <= budget]
    assert min(reaching, default=peaks[8]) == peaks[want], tried
    assert len(tried) <= 4, tried  # bisection would take 3; the line through the ends lands in 1-2 on linear drops


def test_a_calibration_moves_a_cut_by_the_offset_of_the_nearest_partition_measured():
    from offload_pass.planning.calibration import Calibration

    calibration = Calibration(partition_offsets=((None, 5), (0.5, 7), (BlockCut(3, 4), 9)))
    assert calibration.offset_for(BlockCut(3, 4)) == 9  # its own
    assert calibration.offset_for(BlockCut(4, 4)) == 9  # every block cut: nearest the deepest partitions
    assert calibration.offset_for(0.0) == 9
    assert calibration.offset_for(BlockCut(1, 4)) == 7  # a quarter of the blocks: nearest level 0.5
    # The other three under level 0.4: 0.75 x 0.4, nearest the deepest partitions.
    assert calibration.offset_for(BlockCut(1, 4, True, 0.4)) == 9
    assert calibration.offset_for(0.9) == 5


@pytest.mark.parametrize(
    "first_peak, deepest_peak, want",
    [
        # Offload alone reaches the budget (100) at a cost: the deepest cuts alone, attention recomputed then kept.
        (90, 40, [(8, False), (8, True)]),
        # The deepest cut misses (out of reach, the lowest peak is kept): the
        # deepest with attention kept too, which may hold that peak faster; no count search.
        (90, 120, [(8, False), (8, True)]),
        (130, 120, [(8, False), (8, True)]),
        # Offload alone misses, the deepest reaches: the fewest blocks, for both attention choices.
        (130, 40, "search"),
    ],
)
def test_the_deep_cuts_tried_follow_what_offload_alone_reaches(first_peak, deepest_peak, want):
    from offload_pass.pipeline.deep_cuts import deep_attempts

    tried = []

    def run(request, seen):
        cut = request.level
        tried.append((cut.count, cut.keep_attention))
        return _fake(deepest_peak if cut.count == cut.of else (first_peak + deepest_peak) / 2)

    blocks = [object()] * 8
    attempts = deep_attempts(_fake(first_peak), run, 100, blocks, set())
    assert len(attempts) == len(tried)
    if want == "search":
        assert tried[0] == (8, False) and (8, True) in tried and len(tried) > 2, tried
        assert any(count < 8 for count, _ in tried), tried
    else:
        assert tried == want


def test_a_deepest_cut_that_saves_a_set_tried_still_tries_attention_kept():
    from offload_pass.pipeline.deep_cuts import deep_attempts

    tried = []

    def run(request, seen):
        cut = request.level
        tried.append((cut.count, cut.keep_attention))
        return None if not cut.keep_attention else _fake(40)  # the full cut repeats a set tried before

    attempts = deep_attempts(_fake(130), run, 100, [object()] * 8, set())
    assert tried == [(8, False), (8, True)]
    assert [a.plan.prediction.peak for a in attempts] == [40]



def test_a_pruned_cut_counts_as_reaching_and_the_count_search_looks_below_it():
    # Counts 3 and up cannot beat a partition already within the budget
    # (pruned); the fewest blocks within it (2) are still found, and no
    # count above a pruned one is partitioned.
    from offload_pass.pipeline.deep_cuts import _smallest_cut
    from offload_pass.planning.trial import Pruned

    peaks = {c: 100 - 10 * c for c in range(0, 9)}
    tried = []

    def run(request, seen):
        count = request.level.count
        tried.append(count)
        return Pruned(request.level, 1.0, 0.5, False) if count >= 3 else _fake(peaks[count])

    found = _smallest_cut(_fake(peaks[0]), run, 80, 8, False, set(), 8)
    assert len(found) == len([c for c in tried if c < 3])
    assert min(c for c in tried if c < 3 and peaks[c] <= 80) == 2 and 1 in tried, tried
    pruned = [c for c in tried if c >= 3]
    assert pruned, tried
    assert all(c < min(pruned) for c in tried if c not in pruned), tried


@pytest.mark.parametrize(
    "steps, top, want",
    [
        # count -> predicted step within the budget (count 0: the level alone); the least is found.
        ({k: abs(k - 12) + 100 for k in range(33)}, 32, 12),  # the 8B shape at 16k: a valley at 12 of 32
        ({k: 200 - k for k in range(33)}, 32, 32),  # falls to the deepest
        ({0: 100, **{k: 100 + k for k in range(1, 33)}}, 32, 1),  # rises from the first block: the fewest tried
        ({k: abs(k - 3) + 100 for k in range(9)}, 8, 3),
        ({0: 100, 1: 90}, 1, 1),
    ],
)
def test_the_mixed_cut_search_finds_the_fastest_count_in_few_partitions(steps, top, want):
    from offload_pass.pipeline.deep_cuts import MIX_PARTITIONS, _golden_counts

    tried = []

    def value(count):
        assert 1 <= count <= top, count  # count 0 is known, none past top is partitioned
        tried.append(count)
        return steps[count]

    _golden_counts(value, top, MIX_PARTITIONS)
    assert len(tried) <= MIX_PARTITIONS, tried
    assert min(tried, key=lambda k: (steps[k], k)) == want, tried


def test_the_mixed_cut_search_treats_a_miss_as_slowest_and_ties_toward_fewer_blocks():
    from offload_pass.pipeline.deep_cuts import MIX_PARTITIONS, _golden_counts

    # Every count from 10 up is pruned or misses the budget (infinite): the search moves below it.
    steps = {k: (float("inf") if k >= 10 else 100 - k) for k in range(33)}
    tried = []
    _golden_counts(lambda k: tried.append(k) or steps[k], 32, MIX_PARTITIONS)
    assert min(tried, key=lambda k: (steps[k], k)) == 9, tried


def _level_attempt(level, peak, step, baseline_step=100.0):
    from types import SimpleNamespace

    prediction = SimpleNamespace(peak=peak, step_ms=step, peak_offset=0)
    return SimpleNamespace(plan=SimpleNamespace(
        prediction=prediction, graph_id="g", recompute_level=level, offloaded_bytes=0,
        baseline=SimpleNamespace(step_ms=baseline_step),
    ))


@pytest.mark.parametrize(
    "levels, budget, want_rests",
    [
        # (level, peak, step) of the partitions made; the fastest within the budget (100) is mixed with the cuts,
        # then the lightest level partitioned where it is another, within the budget alone or not.
        ([(None, 90, 150.0), (0.9, 95, 120.0), (0.6, 80, 130.0)], 100, [0.9]),
        ([(None, 90, 150.0), (0.6, 80, 130.0), (0.9, 120, 110.0)], 100, [0.6, 0.9]),
        ([(None, 90, 150.0), (0.9, 120, 110.0)], 100, [None, 0.9]),  # 0.9 misses alone: its cuts may reach
        ([(None, 90, 150.0)], 100, [None]),  # no level partitioned
        ([(None, 90, 101.0), (0.9, 95, 101.5)], 100, []),  # within 2 % of no offload: nothing searched
        ([(None, 190, 150.0), (0.9, 120, 110.0)], 100, []),  # nothing within the budget
        ([(None, 90, 150.0), (BlockCut(8, 8, True), 60, 105.0)], 100, [None]),  # a cut is never the level mixed
        ([(None, 90, 150.0), (BlockCut(8, 8, True), 60, 101.0)], 100, []),  # a cut within 2 %: nothing to gain
    ],
)
def test_mixed_cuts_take_the_fastest_level_within_the_budget_then_the_lightest(levels, budget, want_rests):
    from offload_pass.pipeline.deep_cuts import MIX_PARTITIONS, mixed_attempts

    requests = []

    def run(request, seen):
        requests.append(request.level)
        return _level_attempt(request.level, 50, 200.0 - request.level.count)

    attempts = [_level_attempt(*made) for made in levels]
    made = mixed_attempts(attempts, run, budget, [object()] * 8, set())
    rests = [r.rest for r in requests]
    assert [rest for i, rest in enumerate(rests) if rest not in rests[:i]] == want_rests, requests
    assert rests == sorted(rests, key=want_rests.index), requests  # one family after the other
    for rest in want_rests:
        family = [r for r in requests if r.rest == rest]
        assert 0 < len(family) <= MIX_PARTITIONS and all(r.keep_attention and r.of == 8 for r in family), requests
        # The step falls with the count here: the deepest is reached (planned here or before).
        assert max(r.count for r in family) == 8 or BlockCut(8, 8, True, rest) in {lv for lv, _, _ in levels}
    assert len(made) == len(requests) == len(set(requests))
    made_before = {level for level, _, _ in levels}
    assert not made_before & set(requests), requests  # a cut planned already is not partitioned again


@pytest.mark.parametrize(
    "levels, want_rests",
    [
        # The deepest cut with attention kept planned within the budget: its family is searched after the level's.
        ([(None, 90, 150.0), (0.9, 95, 120.0), (BlockCut(8, 8, True), 60, 130.0)], [0.9, None]),
        # It missed the budget (or was not planned): the level's family alone.
        ([(None, 90, 150.0), (0.9, 95, 120.0), (BlockCut(8, 8, True), 120, 130.0)], [0.9]),
        ([(None, 90, 150.0), (0.9, 95, 120.0)], [0.9]),
        # Offload alone is the fastest within: its family is the level's, searched once (then level 0.9's).
        ([(None, 90, 150.0), (0.9, 120, 110.0), (BlockCut(8, 8, True), 60, 130.0)], [None, 0.9]),
    ],
)
def test_the_cuts_with_nothing_else_recomputed_are_searched_where_their_deepest_reached_the_budget(levels, want_rests):
    # A family searched only for the fewest blocks that reach the budget
    # could give a looser budget a slower plan than a tighter one's: where
    # its deepest member reached the budget, its count is searched on the
    # step as the mixed cuts' is.
    from offload_pass.pipeline.deep_cuts import MIX_PARTITIONS, mixed_attempts

    requests = []

    def run(request, seen):
        requests.append(request.level)
        return _level_attempt(request.level, 50, 200.0 - request.level.count + (0 if request.level.rest else 10))

    attempts = [_level_attempt(*made) for made in levels]
    made = mixed_attempts(attempts, run, 100, [object()] * 8, set())
    rests = [r.rest for r in requests]
    assert [rest for i, rest in enumerate(rests) if rest not in rests[:i]] == want_rests, requests
    for rest in want_rests:
        family = [r for r in requests if r.rest == rest]
        assert 0 < len(family) <= MIX_PARTITIONS and all(r.keep_attention and r.of == 8 for r in family), requests
    assert len(made) == len(requests) == len(set(requests))
    assert BlockCut(8, 8, True) not in requests  # planned before: not partitioned again


def test_a_mixed_cut_reads_as_its_blocks_and_the_rest_level():
    cut = BlockCut(12, 32, True, 0.9)
    assert str(cut) == "last 12 of 32 blocks recomputed (all but attention), the rest under activation_memory_budget=0.9"
    assert str(BlockCut(12, 32, True)) == "last 12 of 32 blocks recomputed (all but attention)"
    with pytest.raises(ValueError, match="rest must be an activation_memory_budget in 0..1"):
        BlockCut(1, 2, rest=1.5)
    from offload_pass.planning.reasons import Reason, detail, sentence

    assert sentence(Reason.BLOCK_RECOMPUTED, detail(cut=cut, peak=2**30)) == (
        "recomputed in backward: last 12 of 32 blocks recomputed (all but attention) from their inputs, "
        "the rest under activation_memory_budget=0.9, to reach the budget (predicted peak 1.00 GiB)"
    )
