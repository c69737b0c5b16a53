"""mode="budget" down to its floor: block cuts beside PyTorch's recompute levels.

Two facts, each able to fail:
- the front the planner predicts for a GPU (planned offline under the
  "h200" profile, so copies free memory as they would there) is at or under
  every budget above the floor, its step does not grow as the budget does,
  a budget below the floor is refused with the floor named, and a budget in
  bytes plans as the same fraction does;
- deep plans train like plain Inductor: budgets drawn at random (seeded) on
  two models we did not tune for, gradients compared. A partition that
  recomputes is not bit-identical to plain Inductor's (Inductor fuses the
  recomputed ops into other kernels), so the comparison is to 1e-6 / 1e-5,
  as for PyTorch's own recompute levels.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from offload_pass import OffloadConfig
from offload_pass.enums import Decision, NoteCode
from offload_pass.examples.models import llama_shape, make_decoder
from offload_pass.offline import plan_offline
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.reasons import Reason

from helpers import assert_same_training

pytestmark = pytest.mark.xdist_group("deep_budgets")

_FRONT = {}


def _planned(budget):
    """The tiny Llama shape's plan for the H200 at ``budget`` (cached per budget)."""
    if budget not in _FRONT:
        model, inputs = llama_shape(512, 3, 128, 4, 2, 384, 512, 1)
        made = plan_offline(model, kwargs=inputs, config=OffloadConfig(mode="budget", memory_budget=budget))
        (_FRONT[budget],) = made.plans
    return _FRONT[budget]


def _note(plan, code):
    return [n for n in plan.notes if n.code == code]


def test_the_predicted_front_stays_within_every_budget_above_the_floor():
    below = _planned(0.02)
    (missed,) = _note(below, NoteCode.OUT_OF_REACH)
    floor = missed["floor"]
    assert floor is not None and below.prediction.peak == floor
    assert "(its floor): ask for at least that" in below.selection
    baseline = below.baseline.timeline_peak
    front = []
    for budget in (0.9, 0.6, 0.4):
        plan = _planned(budget)
        if budget * baseline < floor:
            continue
        assert plan.prediction.peak <= int(budget * baseline), (budget, str(plan))
        assert not _note(plan, NoteCode.OUT_OF_REACH), plan.selection
        # Nothing was marked: each copy says mode="budget" chose it, and for what budget.
        assert all(plan.entry(n).code == Reason.BUDGET_CHOSEN for n in plan.offloaded), str(plan)
        assert all(dict(plan.entry(n).detail)["budget"] == plan.budget for n in plan.offloaded)
        front.append((budget, plan.prediction.step_ms))
    assert len(front) >= 2, f"floor {floor / baseline:.2f} of the peak leaves too few budgets to compare"
    steps = [step for _, step in sorted(front)]
    assert steps == sorted(steps, reverse=True), front  # a larger budget is never slower


def test_a_budget_in_bytes_plans_as_its_fraction_does():
    fraction = _planned(0.4)
    in_bytes = _planned(int(0.4 * fraction.baseline.timeline_peak))
    assert in_bytes.recompute_level == fraction.recompute_level
    assert in_bytes.prediction.peak == fraction.prediction.peak
    assert {g.storage for g in in_bytes.groups} == {g.storage for g in fraction.groups}


def test_a_plan_on_a_block_cut_says_so_entry_by_entry():
    plan = next((p for p in map(_planned, (0.4, 0.6, 0.02)) if isinstance(p.recompute_level, BlockCut)), None)
    assert plan is not None, "no budget drawn kept a block cut"
    recomputed = [e for e in plan.entries if e.decision == Decision.RECOMPUTE]
    assert recomputed and all(e.code == Reason.BLOCK_RECOMPUTED for e in recomputed)
    assert all(f"{plan.recompute_level}" in e.reason for e in recomputed)


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, max_position_embeddings=256, use_cache=False,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _llama_step(compiled, batch):
    loss = compiled(**batch).loss
    loss.backward()
    return loss


_DRAWS = random.Random(58)
CASES = [
    ("decoder", round(_DRAWS.uniform(0.05, 0.5), 2)),
    ("hf_llama", round(_DRAWS.uniform(0.05, 0.5), 2)),
]


@pytest.mark.parametrize("model, budget", CASES)
def test_deep_plans_train_like_plain_inductor(model, budget):
    # On the CPU a copy costs the step simulator next to nothing, so offload
    # alone wins every budget it can reach; with no tensor large enough to
    # copy (min_bytes), recompute must reach it: the deep plans under test.
    settings = dict(mode="budget", memory_budget=budget, min_bytes=1 << 40)
    if model == "decoder":
        backend = assert_same_training(
            make_decoder(layers=3, hidden=32, heads=4), lambda m: None, (torch.randn(4, 128, 32),), **settings
        )
    else:
        ids = torch.randint(0, 128, (2, 128), generator=torch.Generator().manual_seed(1))
        backend = assert_same_training(
            _tiny_llama(), lambda m: None, {"input_ids": ids, "labels": ids}, step=_llama_step, **settings
        )
    for plan in backend.plans:  # each plan reaches its budget or names its floor
        assert plan.prediction.peak <= plan.budget or _note(plan, NoteCode.OUT_OF_REACH)[0]["floor"], str(plan)
    levels = [p.recompute_level for p in backend.plans]
    assert any(isinstance(level, BlockCut) for level in levels), levels


def test_copies_chosen_by_the_budget_say_so():
    import offload_pass

    torch._dynamo.reset()
    backend = offload_pass.make_backend(mode="budget", memory_budget=0.4, min_bytes=0)
    model = make_decoder(layers=2, hidden=32, heads=4)
    torch.compile(model, backend=backend)(torch.randn(4, 128, 32)).backward()
    (plan,) = backend.plans
    assert plan.offloaded, str(plan)
    assert {plan.entry(n).code for n in plan.offloaded} == {Reason.BUDGET_CHOSEN}, str(plan)
    assert "chosen by mode=budget (nothing marked)" in str(plan)


def test_a_mixed_cut_with_its_copies_trains_bit_for_bit_like_the_graph_unpartitioned_by_us():
    # The last 2 of 4 blocks recomputed, attention kept, every other node
    # under activation_memory_budget=0.9, and the copies the budget chooses
    # under the H200 profile (so there are some): run on real fp32 CPU
    # tensors with no kernel compiled, recompute runs the same aten ops on
    # the same inputs, so losses and gradients equal PyTorch's own
    # partition's exactly.
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from transformers import LlamaConfig, LlamaForCausalLM

    from offload_pass.pipeline.passes import PassContext, PlanRequest, run_attempt
    from offload_pass.planning.profiles import named_profile

    cut, made = BlockCut(2, 4, True, 0.9), []

    def ours(joint, joint_inputs, **kwargs):
        for level in (dataclasses.replace(cut, rest=None), cut):  # the first: to see that ``rest`` partitions
            ctx = PassContext(
                OffloadConfig(mode="budget", memory_budget=0.45), joint, joint_inputs, kwargs, "graph 0", "", None,
                False, request=PlanRequest(level=level), profile=named_profile("h200"),
            )
            made.append(run_attempt(ctx))
        return made[-1].fw_gm, made[-1].bw_gm

    def trained(partition):
        config = LlamaConfig(
            hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=512, max_position_embeddings=1024, use_cache=False, attn_implementation="sdpa",
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        ids = torch.randint(0, 512, (1, 1024), generator=torch.Generator().manual_seed(1))
        torch._dynamo.reset()
        backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm, partition_fn=partition)
        loss = torch.compile(model, backend=backend)(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss, {name: p.grad for name, p in model.named_parameters()}

    loss, grads = trained(ours)
    plain, state = made
    assert state.plan.recompute_level == cut and state.plan.offloaded, str(state.plan)
    # The rest under level 0.9 recomputes more of the first blocks: fewer activations saved.
    assert {t.name for t in state.saved} < {t.name for t in plain.saved} or len(state.saved) < len(plain.saved)
    want_loss, want = trained(min_cut_rematerialization_partition)
    assert torch.equal(loss, want_loss)
    assert grads.keys() == want.keys() and all(g is not None for g in grads.values())
    assert max(g.abs().max().item() for g in want.values()) > 1e-3  # gradients a comparison can fail on
    for name in want:
        assert torch.equal(grads[name], want[name]), name


def test_mixed_cuts_are_searched_where_the_plan_costs_and_can_be_turned_off_by_name():
    # A 4-layer fp32 Llama at 2048 tokens, budget 0.5 under the H200 profile:
    # level 0.9 reaches it 8 % over the step without offload, so cuts of the
    # last blocks with the rest under 0.9 are tried; "mixed_cuts" disabled, none is.
    model, inputs = llama_shape(2048, 4, 256, 4, 2, 768, 512, 1, dtype=torch.float32)

    def mixed_tried(*disabled):
        torch._dynamo.reset()
        config = OffloadConfig(mode="budget", memory_budget=0.5, disabled_passes=disabled)
        (plan,) = plan_offline(model, kwargs=inputs, config=config).plans
        return [t.level for t in plan.recompute_trials if isinstance(t.level, BlockCut) and t.level.rest is not None]

    tried = mixed_tried()
    assert tried and all(cut.keep_attention and cut.rest == 0.9 for cut in tried), tried
    assert mixed_tried("mixed_cuts") == []
