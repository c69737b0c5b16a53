"""Opt-out keeps a tensor on device in every path: each test fails if the
opt-out were a no-op (the same model without it offloads that tensor)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import offload_pass
from offload_pass import runtime
from offload_pass.examples.grouped_mlp import MoEBlock
from offload_pass.planning.reasons import Reason, detail

from helpers import assert_same_training


def decision(plan, name):
    return plan.entry(name).decision


def both(model_fn, mark_with, mark_without, x):
    """Plans with and without the opt-out; both trainings match Inductor."""
    with_opt_out = assert_same_training(model_fn(), mark_with, (x,)).plans[-1]
    torch._dynamo.reset()
    without = assert_same_training(model_fn(), mark_without, (x,)).plans[-1]
    return with_opt_out, without


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(16, 16)
        self.outer = nn.Linear(16, 16)

    def forward(self, x):
        return self.outer(self.inner(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(16, 16)

    def forward(self, x):
        return self.head(self.block(x)).sum()


def test_keep_modules_under_an_offloaded_parent():
    x = torch.randn(8, 16)
    kept, plain = both(
        Net,
        lambda m: (offload_pass.offload_modules(m, "block"), offload_pass.keep_modules(m, "block.inner")),
        lambda m: offload_pass.offload_modules(m, "block"),
        x,
    )
    # addmm is block.inner's output, saved as block.outer's input.
    assert plan_module(plain, "addmm") == "block.inner"
    assert decision(plain, "addmm") == "offload"
    assert decision(kept, "addmm") == "keep"
    assert decision(kept, "addmm_1") == "offload"


def plan_module(plan, name):
    return plan.entry(name).module


class RegionAroundKept(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(16, 16)

    def forward(self, x):
        with offload_pass.offload_region():
            h = self.block(x)
        return self.head(h).sum()


def test_keep_modules_inside_an_offload_region():
    x = torch.randn(8, 16)
    kept, plain = both(
        RegionAroundKept,
        lambda m: offload_pass.keep_modules(m, "block.inner"),
        lambda m: None,
        x,
    )
    assert decision(plain, "addmm") == "offload"
    assert decision(kept, "addmm") == "keep"
    assert (kept.entry("addmm").code, kept.entry("addmm").detail) == (Reason.KEPT_BY_MARK, detail(by="module block.inner"))


class NotOffloadedInRegion(nn.Module):
    def __init__(self, opt_out):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.opt_out = opt_out

    def forward(self, x):
        with offload_pass.offload_region():
            h = self.a(x)
            if self.opt_out:
                h = offload_pass.mark_not_offload(h)
            g = self.b(h)
        return self.c(g).sum()


def test_mark_not_offload_inside_a_region():
    x = torch.randn(8, 16)
    kept = assert_same_training(NotOffloadedInRegion(True), lambda m: None, (x,)).plans[-1]
    torch._dynamo.reset()
    plain = assert_same_training(NotOffloadedInRegion(False), lambda m: None, (x,)).plans[-1]
    assert decision(plain, "addmm") == "offload"
    assert decision(kept, "addmm") == "keep"
    assert (kept.entry("addmm").code, kept.entry("addmm").detail) == (Reason.KEPT_BY_MARK, detail(by="mark_not_offload"))


class Attn(nn.Module):
    def __init__(self, keep_k):
        super().__init__()
        self.qkv = nn.Linear(16, 48, bias=False)
        self.keep_k = keep_k

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 2, 8).unbind(2)
        if self.keep_k:
            k = offload_pass.mark_not_offload(k)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.sum()


def test_mark_not_offload_on_one_view_keeps_the_shared_storage():
    x = torch.randn(2, 8, 16)
    kept = assert_same_training(Attn(True), lambda m: offload_pass.offload_modules(m, m), (x,)).plans[-1]
    torch._dynamo.reset()
    plain = assert_same_training(Attn(False), lambda m: offload_pass.offload_modules(m, m), (x,)).plans[-1]
    qkv = lambda plan: [e for e in plan.entries if e.op == "aten.mm"]
    assert len(qkv(plain)) == 3 and all(e.decision == "offload" for e in qkv(plain))
    assert len(qkv(kept)) == 3 and all(e.decision == "keep" for e in qkv(kept))
    reasons = sorted((e.code, e.detail) for e in qkv(kept))
    assert reasons[0] == (Reason.KEPT_BY_MARK, detail(by="mark_not_offload"))
    assert all(code == Reason.SHARES_STORAGE for code, _ in reasons[1:])


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = MoEBlock(32, 64, 4)

    def forward(self, x):
        return self.block(x).pow(2).mean()


def test_keep_role_beats_role_selection():
    x = torch.randn(16, 32)
    kept, plain = both(
        MoE,
        lambda m: (
            offload_pass.offload_modules(m, "block.experts"),
            offload_pass.keep_modules(m, "block.experts", roles=["act"]),
        ),
        lambda m: offload_pass.offload_modules(m, "block.experts"),
        x,
    )
    act = lambda plan: next(e for e in plan.entries if e.role == "act")
    assert act(plain).decision == "offload"
    assert act(kept).decision == "keep"


def test_opt_out_of_an_unsaved_tensor_is_harmless():
    class M(nn.Module):
        def __init__(self, mark):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)
            self.mark = mark

        def forward(self, x):
            h = self.a(x)
            s = h.sum()  # not saved for backward
            if self.mark:
                s = offload_pass.mark_not_offload(s)
            return self.b(h).sum() + s

    x = torch.randn(8, 16)
    marked = assert_same_training(M(True), lambda m: offload_pass.offload_modules(m, m), (x,)).plans[-1]
    torch._dynamo.reset()
    plain = assert_same_training(M(False), lambda m: offload_pass.offload_modules(m, m), (x,)).plans[-1]
    assert [(e.name, e.decision) for e in marked.entries] == [(e.name, e.decision) for e in plain.entries]


def test_keep_marks_alone_add_no_nodes_and_no_copies():
    x = torch.randn(8, 16)
    runtime.reset_stats()
    backend = assert_same_training(Net(), lambda m: offload_pass.keep_modules(m, "block"), (x,))
    graphs = backend.records[-1].graphs
    assert graphs.forward == graphs.forward_before
    assert graphs.backward == graphs.backward_before
    assert runtime.stats()["offload_calls"] == 0
