"""The exact set of offloaded tensors for each kind of mark."""

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass.examples.models import MLP, make_decoder
from offload_pass.planning.reasons import Reason, detail

from helpers import assert_same_training


def offloaded_modules(plan):
    return sorted({e.module for e in plan.entries if e.decision == "offload"})


def compile_and_plan(model, x, **config):
    backend = offload_pass.make_backend(**({"min_bytes": 0, "keep_if_no_gain": False} | config))
    torch.compile(model, backend=backend)(x).backward()
    assert len(backend.plans) == 1
    return backend.plans[-1]


@pytest.fixture
def model():
    return make_decoder(layers=2, hidden=32, heads=4)


@pytest.fixture
def x():
    return torch.randn(2, 16, 32)


LAYER0_ATTN = {"layers.0.attn", "layers.0.attn.qkv", "layers.0.attn.proj"}
LAYER0_MLP = {"layers.0.mlp.fc1", "layers.0.mlp.act"}


def test_module_instance(model, x):
    assert offload_pass.offload_modules(model, model.layers[0].mlp) == ["layers.0.mlp"]
    plan = compile_and_plan(model, x)
    assert offloaded_modules(plan) == sorted(LAYER0_MLP)
    # fc1's output and the activation's output; fc2's output is not saved.
    assert [(e.name, e.op) for e in plan.entries if e.decision == "offload"] == [
        ("mm_2", "aten.mm"),
        ("view_8", "aten.mul"),
    ]


def test_pattern(model, x):
    assert offload_pass.offload_modules(model, "layers.*.attn") == ["layers.0.attn", "layers.1.attn"]
    plan = compile_and_plan(model, x)
    assert [(e.name, e.module) for e in plan.entries if e.decision == "offload"] == [
        ("permute_1", "layers.0.attn.qkv"),
        ("permute_2", "layers.0.attn.qkv"),
        ("permute_3", "layers.0.attn.qkv"),
        ("getitem_3", "layers.0.attn"),
        ("getitem_4", "layers.0.attn"),
        # the partitioner saves layer 0's projection output to recompute the
        # residual add from it; layer 1's add is saved instead (unmarked).
        ("mm_1", "layers.0.attn.proj"),
        ("permute_9", "layers.1.attn.qkv"),
        ("permute_10", "layers.1.attn.qkv"),
        ("permute_11", "layers.1.attn.qkv"),
        ("getitem_8", "layers.1.attn"),
        ("getitem_9", "layers.1.attn"),
    ]
    # q, k, v are three views of one qkv storage: one copy for the three.
    qkv = [g for g in plan.groups if len(g.members) == 3]
    assert len(qkv) == 2 and all(g.copy == "storage" for g in qkv)


def test_class(model, x):
    assert offload_pass.offload_modules(model, MLP) == ["layers.0.mlp", "layers.1.mlp"]
    plan = compile_and_plan(model, x)
    assert offloaded_modules(plan) == sorted(LAYER0_MLP | {"layers.1.mlp.fc1", "layers.1.mlp.act"})


def test_keep_overrides_offload(model, x):
    offload_pass.offload_modules(model, "layers.*")
    offload_pass.keep_modules(model, "layers.0.mlp")
    plan = compile_and_plan(model, x)
    mods = offloaded_modules(plan)
    assert not set(mods) & LAYER0_MLP
    assert "layers.1.mlp.fc1" in mods and "layers.0.attn.qkv" in mods
    kept = [e for e in plan.entries if e.module in LAYER0_MLP]
    assert kept and all(
        e.decision == "keep" and (e.code, e.detail) == (Reason.KEPT_BY_MARK, detail(by="module layers.0.mlp"))
        for e in kept
    )


def test_same_level_keep_wins(model, x):
    offload_pass.offload_modules(model, "layers.0.mlp")
    offload_pass.keep_modules(model, MLP)
    plan = compile_and_plan(model, x)
    assert plan.offloaded == []


def test_min_bytes_keeps_small(model, x):
    offload_pass.offload_modules(model, "layers.0.mlp")
    plan = compile_and_plan(model, x, min_bytes=32 * 128 * 4)
    assert plan.offloaded == ["mm_2", "view_8"]  # 32x128 f32 = 16 KiB each
    plan = compile_and_plan(make_marked(), x, min_bytes=32 * 128 * 4 + 1)
    assert plan.offloaded == []
    assert all(e.code == Reason.BELOW_MIN_BYTES for e in plan.entries if e.module in LAYER0_MLP)


def make_marked():
    torch._dynamo.reset()
    m = make_decoder(layers=2, hidden=32, heads=4)
    offload_pass.offload_modules(m, "layers.0.mlp")
    return m


def test_parameters_inputs_kept_with_reason(model, x):
    offload_pass.offload_modules(model, model)
    plan = compile_and_plan(model, x)
    reasons = {e.name: e.code for e in plan.entries}
    assert reasons["primals_2"] == Reason.GRAPH_INPUT
    assert reasons["primals_3"] == Reason.PARAMETER
    assert all(e.decision == "keep" for e in plan.entries if e.op == "placeholder")


def _linears(module, n):
    # Matmul outputs are saved as the next matmul's input (never recomputed).
    for i in range(n):
        setattr(module, "l%d" % i, nn.Linear(16, 16))


class RegionModel(nn.Module):
    def __init__(self):
        super().__init__()
        _linears(self, 4)

    def forward(self, x):
        with offload_pass.offload_region():
            h = self.l0(x)
            with offload_pass.offload_region(enabled=False):
                g = self.l1(h)
            k = self.l2(g)
        return self.l3(k).sum()


def saved_decisions(plan):
    return {e.module: (e.decision, e.code, dict(e.detail)) for e in plan.entries if e.op == "aten.addmm"}


def test_region_and_nested_opt_out():
    x = torch.randn(8, 16)
    backend = assert_same_training(RegionModel(), lambda m: None, (x,))
    assert saved_decisions(backend.plans[-1]) == {
        "l0": ("offload", Reason.MARKED, {"by": "offload_region(enabled=True)"}),
        "l1": ("keep", Reason.KEPT_BY_MARK, {"by": "offload_region(enabled=False)"}),
        "l2": ("offload", Reason.MARKED, {"by": "offload_region(enabled=True)"}),
    }


class TensorMarkModel(nn.Module):
    def __init__(self):
        super().__init__()
        _linears(self, 4)

    def forward(self, x):
        h = offload_pass.mark_offload(self.l0(x))
        with offload_pass.offload_region():
            g = offload_pass.mark_not_offload(self.l1(h))
            k = self.l2(g)
        return self.l3(k).sum()


def test_per_tensor_marks_beat_regions():
    x = torch.randn(8, 16)
    backend = assert_same_training(TensorMarkModel(), lambda m: None, (x,))
    assert saved_decisions(backend.plans[-1]) == {
        "l0": ("offload", Reason.MARKED, {"by": "mark_offload"}),
        "l1": ("keep", Reason.KEPT_BY_MARK, {"by": "mark_not_offload"}),
        "l2": ("offload", Reason.MARKED, {"by": "offload_region(enabled=True)"}),
    }


def test_marks_in_eager_cost_nothing():
    model = TensorMarkModel()
    x = torch.randn(8, 16)
    t = torch.randn(3)
    assert offload_pass.mark_offload(t) is t
    assert offload_pass.mark_not_offload(t) is t
    torch.testing.assert_close(model(x), TensorMarkModel.forward(model, x))


def test_unmarked_model_offloads_nothing(model, x):
    plan = compile_and_plan(model, x)
    assert plan.offloaded == [] and plan.offloaded_bytes == 0
    assert all(e.code in {Reason.NOT_MARKED, Reason.GRAPH_INPUT, Reason.PARAMETER} for e in plan.entries)


def test_plan_table_is_readable(model, x):
    offload_pass.offload_modules(model, "layers.0.mlp")
    text = str(compile_and_plan(model, x))
    # A small model's figures in the unit of its largest (its peak, 145 KiB).
    assert text.splitlines()[1].split() == [
        "saved", "op", "module", "role", "shape", "dtype", "KiB", "decision", "reason"
    ]
    assert "mm_2        aten.mm" in text
    assert "offloaded 32.00 KiB in 2 copies (2 saved tensors)" in text
