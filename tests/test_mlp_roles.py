"""roles=["fc1" | "act" | "fc2"] on expert and MLP code written with matmuls.

fc1 is the input of the first-layer matmuls, act their output (the
activation's input), fc2 the input of the second-layer matmul. Real expert
code runs both layers through the same op (``torch._grouped_mm``), so roles
follow the structure, not the op: a torchtitan-style experts block (w1 / w3,
SiLU-gated, w2) and a dense gated MLP of ``nn.Linear`` are tested here; this
package's fused ``GroupedMLP`` in test_fused_roles.py and Hugging Face's
grouped_mm experts in test_real_models.py.
"""

import copy
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import offload_pass
from offload_pass.planning.reasons import Reason

ROLES = ("fc1", "act", "fc2")
SUBSETS = [s for n in range(1, 4) for s in itertools.combinations(ROLES, n)]


class TitanExperts(nn.Module):
    def __init__(self, experts=3, hidden=8, ffn=16):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(experts, hidden, ffn) * 0.3)
        self.w3 = nn.Parameter(torch.randn(experts, hidden, ffn) * 0.3)
        self.w2 = nn.Parameter(torch.randn(experts, ffn, hidden) * 0.3)

    def forward(self, x, offs):
        h = F.silu(torch._grouped_mm(x, self.w1, offs=offs)) * torch._grouped_mm(x, self.w3, offs=offs)
        return torch._grouped_mm(h, self.w2, offs=offs)


class TitanBlock(nn.Module):
    """Routes tokens (sorted by expert) through ``TitanExperts``."""

    def __init__(self, hidden=8):
        super().__init__()
        self.router = nn.Linear(hidden, 3)
        self.experts = TitanExperts(hidden=hidden)

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        order = self.router(tokens).argmax(-1).argsort()
        routed = tokens[order] * 1.5
        offs = torch.tensor([4, 8, 12], dtype=torch.int32, device=x.device)
        out = torch.empty_like(routed).index_copy(0, order, self.experts(routed, offs))
        return x + out.view_as(x)


class GatedMLP(nn.Module):
    def __init__(self, hidden=8, ffn=16):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DenseBlock(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.mlp = GatedMLP(hidden)

    def forward(self, x):
        return x + self.mlp(self.norm(x) * 2)


class Stack(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.layers = nn.ModuleList(block() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x.float().pow(2).mean()


# (model, dtype, pattern): grouped_mm's fake implementation takes bf16 only.
CASES = {
    "torchtitan_experts": (TitanBlock, torch.bfloat16, "layers.*.experts"),
    "dense_gated_mlp": (DenseBlock, torch.float32, "layers.*.mlp"),
}


def _train(model, backend, x):
    torch._dynamo.reset()
    loss = torch.compile(model, backend=backend)(x)
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    block, dtype, pattern = CASES[request.param]
    torch.manual_seed(0)
    model = Stack(block).to(dtype)
    x = torch.randn(2, 6, 8, dtype=dtype)
    want = _train(copy.deepcopy(model), "inductor", x)
    return model, x, pattern, want


@pytest.mark.parametrize("roles", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_each_role_subset_offloads_exactly_its_tensors(case, roles):
    model, x, pattern, (want_loss, want) = case
    model = copy.deepcopy(model)
    offload_pass.offload_modules(model, pattern, roles=list(roles))
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    loss, grads = _train(model, backend, x)
    assert torch.equal(loss, want_loss)
    for name in want:  # the router gets no gradient (argsort)
        assert (grads[name] is None and want[name] is None) or torch.equal(grads[name], want[name]), name
    (plan,) = backend.plans
    by_role = {role: {e.name for e in plan.entries if e.role == role} for role in ROLES}
    # Every role has its tensors in each layer: the first layer's two
    # matmul outputs (act), their shared input (fc1), the gated product (fc2).
    assert [len(by_role[r]) for r in ROLES] == [2, 4, 2], plan
    acts = {plan.entry(n).op for n in by_role["act"]}
    assert acts <= {"aten._grouped_mm", "aten.mm"}, plan
    assert {plan.entry(n).op for n in by_role["fc2"]} == {"aten.mul"}, plan
    assert set(plan.offloaded) == set().union(*(by_role[r] for r in roles)), plan
    unselected = [e for e in plan.entries if e.role is not None and e.role not in roles]
    assert all(e.decision == "keep" and e.code == Reason.OTHER_ROLES for e in unselected), plan
    assert all(e.decision == "keep" for e in plan.entries if e.role is None), plan


def test_roles_on_a_module_without_an_mlp_name_what_is_there():
    torch.manual_seed(0)
    model = Stack(DenseBlock)
    offload_pass.offload_modules(model, "layers.*.norm", roles=["fc1"])
    with pytest.raises(Exception, match=r"module layers\.\d\.norm asks for roles \['fc1'\] but it covers no "
                                        r"fused op with roles and no MLP of two matmul layers"):
        torch.compile(model, backend=offload_pass.make_backend(min_bytes=0))(torch.randn(2, 6, 8)).backward()
