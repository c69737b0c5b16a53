"""Markers: what they return, caching, clearing, recompiles."""

import copy
import io
import pickle
import re
import warnings

import pytest
import torch
import torch.nn as nn
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import offload_pass
from offload_pass import runtime

from helpers import TwoBlockNet
from offload_pass.examples.models import make_decoder


def _mark_another_module(model):
    offload_pass.clear_marks(model)
    offload_pass.offload_modules(model, "layers.1.mlp")


def _keep_the_same_module(model):
    # The module keeps a marked forward of the same code; only the mark
    # behind it changes (Dynamo guards on its key, one guard).
    offload_pass.keep_modules(model, "layers.0.mlp")


@pytest.mark.parametrize(
    "remark, offloaded",
    [(_mark_another_module, ["mm_6", "view_18"]), (_keep_the_same_module, [])],
    ids=["another module", "the same module kept"],
)
def test_changing_marks_recompiles_with_new_plan(remark, offloaded):
    model = make_decoder(layers=2, hidden=32, heads=4)
    x = torch.randn(2, 8, 32)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    offload_pass.offload_modules(model, "layers.0.mlp")
    compiled(x).backward()
    assert backend.plans[-1].offloaded == ["mm_2", "view_8"]
    remark(model)
    runtime.reset_stats()
    compiled(x).backward()
    assert len(backend.plans) == 2, "a changed mark must recompile, not reuse the old graph"
    assert backend.plans[-1].offloaded == offloaded
    assert runtime.stats()["offload_calls"] == len(offloaded)
    runtime.reset_stats()
    compiled(x).backward()
    assert len(backend.plans) == 2
    assert runtime.stats()["offload_calls"] == len(offloaded)


def test_a_marked_module_costs_one_guard_on_its_mark_not_one_per_entry():
    # Dynamo evaluates every guard at every call, before the graph's first
    # kernel: guarded entry by entry, the 16 marks of an HF Llama made the
    # cache lookup of a step much slower than plain Inductor's.
    torch._dynamo.reset()
    model = make_decoder(layers=2, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.*.mlp", "layers.*.attn")
    torch.compile(model, backend=offload_pass.make_backend(min_bytes=0))(torch.randn(2, 8, 32)).backward()
    (entry,) = _debug_get_cache_entry_list(type(model).forward.__code__)
    guards = str(entry.guard_manager)
    assert len(re.findall(r"EQUALS_MATCH: .+ == 'offload_pass mark \d+'", guards)) == 4, guards
    for entry_name in ("offload", "qualname", "source", "outer"):
        assert f"['{entry_name}']" not in guards, f"a guard on the mark's {entry_name!r}"


def test_clear_marks_restores_forward():
    model = make_decoder(layers=1, hidden=32, heads=4)
    forward = model.layers[0].mlp.forward
    offload_pass.offload_modules(model, "layers.0.mlp")
    assert model.layers[0].mlp.forward != forward
    assert offload_pass.clear_marks(model) == ["layers.0.mlp"]
    assert model.layers[0].mlp.forward == forward
    assert "forward" not in model.layers[0].mlp.__dict__


def test_fresh_process_cache_does_not_skip_the_pass(tmp_path, monkeypatch):
    # With Inductor's caches on and warm, a second compile of the same graph
    # must still plan and rewrite (the cache must not serve a stale graph).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", raising=False)
    from torch._inductor import config as inductor_config

    x = torch.randn(2, 8, 32)
    plans = []
    with inductor_config.patch(force_disable_caches=False, fx_graph_cache=True):
        for layer in ("layers.0.mlp", "layers.0.mlp", "layers.0.attn"):
            torch._dynamo.reset()
            model = make_decoder(layers=1, hidden=32, heads=4)
            offload_pass.offload_modules(model, layer)
            backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
            runtime.reset_stats()
            torch.compile(model, backend=backend)(x).backward()
            plans.append(backend.plans[-1].offloaded)
            assert runtime.stats()["offload_calls"] == len(backend.plans[-1].groups)
    assert plans[0] == plans[1] == ["mm_2", "view_8"]
    assert plans[2] != plans[0]


def test_marks_travel_as_plain_repr_stable_dicts():
    # node.meta["custom"] holds a plain dict (Dynamo cannot take a dataclass
    # as annotate's constant; marks_digest hashes its repr); Mark round-trips.
    import pickle

    from offload_pass.marking.mark import ALL_ROLES, Mark
    from offload_pass.meta_keys import MARK_KEY

    model = make_decoder(layers=1, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.0")
    offload_pass.keep_modules(model, "layers.0.mlp", roles=["fc1"])
    offload_pass.keep_modules(model, "layers.0.mlp", roles=["act"])
    customs = []

    def spy(gm, example_inputs):
        customs.extend(n.meta["custom"][MARK_KEY] for n in gm.graph.nodes if MARK_KEY in n.meta.get("custom", {}))
        return gm.forward

    spy._is_offload_backend = True
    torch.compile(model, backend=spy)(torch.randn(2, 8, 32))
    mlp = {"keep": ("act", "fc1"), "source": "module layers.0.mlp", "qualname": "layers.0.mlp",
           "outer": ({"offload": ALL_ROLES, "source": "module layers.0"},)}
    assert mlp in customs and all(type(c) is dict for c in customs), customs
    mark = Mark.from_custom(mlp)
    assert mark.keep == ("act", "fc1") and mark.outer == (Mark(offload=ALL_ROLES, source="module layers.0"),)
    assert mark.to_custom() == mlp and repr(mark.to_custom()) == repr(mlp)
    assert pickle.loads(pickle.dumps(mark)) == mark
    region = Mark.for_region(False, ALL_ROLES, where="f.py:3 in forward")
    assert region.to_custom() == {"keep": ALL_ROLES, "source": "offload_region(enabled=False) at f.py:3 in forward",
                                  "where": "f.py:3 in forward"}


def _copy(model, how):
    if how == "deepcopy":
        return copy.deepcopy(model)
    if how == "pickle":
        return pickle.loads(pickle.dumps(model))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_copy_of_a_marked_model_runs_its_own_weights_under_its_own_marks(how, compiled):
    # EMA copies, reference models and replicas are deep copies: each must
    # run its own weights and keep its marks, and its gradients land on it.
    torch.manual_seed(0)
    model = TwoBlockNet()
    plain = copy.deepcopy(model)  # never marked: the reference
    offload_pass.offload_modules(model, "blk")
    twin = _copy(model, how)
    with torch.no_grad():
        for m in (twin, plain):
            m.blk[0].weight.add_(0.5)
    x = torch.randn(4, 16)
    runtime.reset_stats()
    if compiled:
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
        torch.compile(twin, backend=backend)(x).backward()
        assert runtime.stats()["offload_calls"] == 2, "the copy's marks offload its tensors"
    else:
        twin(x).backward()
    plain(x).backward()
    assert all(p.grad is None for p in model.parameters()), "gradients landed on the original"
    for (name, got), (_, want) in zip(twin.named_parameters(), plain.named_parameters()):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-5, rtol=1e-4, msg=name)
    assert offload_pass.clear_marks(twin) == ["blk"]
    assert "forward" not in twin.blk.__dict__
    assert offload_pass.clear_marks(model) == ["blk"]


class NestedFc1(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.block = nn.Module()
        self.block.fc1 = nn.Linear(4, 4)
        self.block.inner = nn.Module()
        self.block.inner.fc1 = nn.Linear(4, 4)


@pytest.mark.parametrize(
    "pattern, names",
    [
        ("**.fc1", ["block.fc1", "block.inner.fc1", "fc1"]),
        ("block.**.fc1", ["block.fc1", "block.inner.fc1"]),
        ("block.**", ["block", "block.fc1", "block.inner", "block.inner.fc1"]),
        ("*.fc1", ["block.fc1"]),
    ],
)
def test_double_star_is_any_number_of_segments_zero_included(pattern, names):
    assert offload_pass.offload_modules(NestedFc1(), pattern) == names


def test_an_unknown_role_is_refused_at_marking_naming_the_valid_ones():
    model = make_decoder(layers=1, hidden=32, heads=4)
    with pytest.raises(ValueError, match=r"offload_modules: unknown role \['bogus'\]; valid roles: .*'act'.*'fc1'.*'fc2'"):
        offload_pass.offload_modules(model, "layers.0.mlp", roles=["bogus", "act"])
    with pytest.raises(ValueError, match=r"offload_region: unknown role \['bogus'\]"):
        offload_pass.offload_region(roles=["bogus"])
    assert offload_pass.offload_modules(model, "layers.0.mlp", roles=["act"]) == ["layers.0.mlp"]


class RegionAndTensorMarks(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        with offload_pass.offload_region():
            h = torch.tanh(self.fc(x))
        return offload_pass.mark_offload(h).sum()


def test_region_and_tensor_marks_run_eagerly_say_they_do_nothing_there_once():
    model = RegionAndTensorMarks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(torch.randn(2, 4))
        model(torch.randn(2, 4))
    messages = [str(w.message) for w in caught]
    region = [m for m in messages if "offload_region" in m]
    tensor = [m for m in messages if "mark_offload" in m]
    assert len(region) == 1 and len(tensor) == 1, messages
    for message in region + tensor:
        assert "only under torch.compile with an offload backend" in message, message
    assert "test_markers.py" in region[0], region[0]
    assert all(w.filename == __file__ for w in caught if "mark_offload" in str(w.message)), caught
    # Compiled with an offload backend they act, and say nothing.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(model, backend=offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False))(
            torch.randn(2, 4)
        ).backward()
    assert not [w for w in caught if "only under torch.compile" in str(w.message)], caught


def test_a_region_around_a_compiled_call_marks_its_graphs_and_says_nothing():
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16))
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with offload_pass.offload_region():
            compiled(torch.randn(4, 16)).sum().backward()
    assert not [w for w in caught if "only under torch.compile" in str(w.message)], caught
    assert backend.plans[-1].offloaded, backend.plans[-1]
