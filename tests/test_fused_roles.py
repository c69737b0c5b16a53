"""Fused grouped MLP: each saved tensor follows the marker of its own sub-op."""

import itertools

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass.examples.grouped_mlp import MoEBlock
from offload_pass.planning.reasons import Reason

from helpers import assert_same_training

ROLES = ("fc1", "act", "fc2")
SUBSETS = [s for n in range(1, 4) for s in itertools.combinations(ROLES, n)]


class MoEStack(nn.Module):
    def __init__(self, layers=2, hidden=32, ffn=64, experts=4):
        super().__init__()
        self.layers = nn.ModuleList(MoEBlock(hidden, ffn, experts) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x.pow(2).mean()


def role_decisions(plan):
    return {(e.module, e.role): e.decision for e in plan.entries if e.role is not None}


@pytest.mark.parametrize("roles", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_each_role_subset_offloads_exactly_its_tensors(roles):
    torch.manual_seed(0)
    x = torch.randn(16, 32)
    backend = assert_same_training(
        MoEStack(), lambda m: offload_pass.offload_modules(m, "layers.*.experts", roles=list(roles)), (x,)
    )
    plan = backend.plans[-1]
    got = role_decisions(plan)
    # fc1's saved tensor is the routed input, produced by the block (not the
    # experts module): the role still selects it.
    want = {}
    for layer in (0, 1):
        want[(f"layers.{layer}", "fc1")] = "offload" if "fc1" in roles else "keep"
        for role in ("act", "fc2"):
            want[(f"layers.{layer}.experts", role)] = "offload" if role in roles else "keep"
    assert got == want, plan
    # Nothing outside the selected roles moves.
    assert all(e.decision == "keep" for e in plan.entries if e.role is None), plan
    not_selected = [e for e in plan.entries if e.role is not None and e.role not in roles]
    assert all(e.code == Reason.OTHER_ROLES for e in not_selected), plan


def test_unknown_role_lists_the_roles():
    model = MoEStack()
    with pytest.raises(ValueError, match=r"has no role \['gate'\]; its roles are \['act', 'fc1', 'fc2'\]"):
        offload_pass.offload_modules(model, "layers.0.experts", roles=["gate"])


def test_keep_role_inside_offloaded_module():
    x = torch.randn(16, 32)

    def mark(m):
        offload_pass.offload_modules(m, "layers.*")
        offload_pass.keep_modules(m, "layers.*.experts", roles=["fc1"])

    plan = assert_same_training(MoEStack(), mark, (x,)).plans[-1]
    got = role_decisions(plan)
    assert got[("layers.0", "fc1")] == "keep"
    assert got[("layers.0.experts", "act")] == "offload"
    index = plan.entry("index")
    assert index.code == Reason.KEPT_BY_MARK and dict(index.detail)["by"].startswith("module layers.0.experts")


def test_register_saved_roles_accepts_every_op_form():
    from offload_pass.examples.grouped_mlp import grouped_mlp_fwd
    from offload_pass.marking.roles import register_saved_roles, roles_of

    op = torch.ops.offload_pass.grouped_mlp_fwd
    for form in (grouped_mlp_fwd, op, op.default):
        entry = register_saved_roles(form, inputs={0: "fc1"}, outputs={1: "act", 2: "fc2"})
        assert roles_of(op.default) == entry
    with pytest.raises(TypeError, match="is not an op"):
        register_saved_roles("grouped_mlp_fwd", inputs={0: "x"})
    with pytest.raises(ValueError, match="give at least one input or output role"):
        register_saved_roles(op)
