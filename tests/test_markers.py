"""Markers: what they return, caching, clearing, recompiles."""

import re

import pytest
import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import offload_pass
from offload_pass import runtime
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
