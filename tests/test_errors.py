"""Bad inputs give errors that name them and say what would be valid."""

import re
import sys
import warnings

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass.examples.models import make_decoder


@pytest.fixture
def model():
    return make_decoder(layers=2, hidden=32, heads=4)


def test_pattern_matching_nothing_lists_close_names(model):
    with pytest.raises(ValueError, match=re.escape("pattern 'layers.*.atn' matches no submodule; close names: layers.1.attn, layers.0.attn")):
        offload_pass.offload_modules(model, "layers.*.atn")


def test_star_is_one_segment(model):
    with pytest.raises(ValueError, match="matches no submodule"):
        offload_pass.offload_modules(model, "*.attn")
    assert offload_pass.offload_modules(model, "**.attn") == ["layers.0.attn", "layers.1.attn"]


def test_non_module_target(model):
    with pytest.raises(TypeError, match=r"target 3 \(int\) is not a module, a name pattern string or an nn.Module subclass"):
        offload_pass.offload_modules(model, 3)
    with pytest.raises(ValueError, match="not a submodule of the model"):
        offload_pass.offload_modules(model, nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no submodule is an instance of Conv2d; the model has: .*Attention"):
        offload_pass.offload_modules(model, nn.Conv2d)
    with pytest.raises(TypeError, match="first argument must be the nn.Module"):
        offload_pass.offload_modules("layers.0", model)
    with pytest.raises(ValueError, match="give at least one target"):
        offload_pass.keep_modules(model)


def test_bad_roles_and_region_args(model):
    with pytest.raises(ValueError, match="roles must be a non-empty list"):
        offload_pass.offload_modules(model, "layers.0.mlp", roles=[])
    with pytest.raises(TypeError, match="enabled must be True or False"):
        offload_pass.offload_region(enabled="yes")


def test_roles_on_module_without_fused_ops(model):
    # A norm has no fused op with roles and no MLP of two matmul layers (the
    # MLP itself has: its fc1 / act / fc2 are found by structure, test_mlp_roles.py).
    offload_pass.offload_modules(model, "layers.0.mlp_norm", roles=["act"])
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    with pytest.raises(Exception, match=re.escape(
        "module layers.0.mlp_norm asks for roles ['act'] but it covers no fused op with roles and no MLP "
        "of two matmul layers"
    )):
        torch.compile(model, backend=backend)(torch.randn(2, 8, 32))


def test_marks_under_another_backend_warn_and_run(model):
    offload_pass.offload_modules(model, "layers.*.mlp")
    x = torch.randn(2, 8, 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = torch.compile(model, backend="inductor")(x)
    loss.backward()
    messages = [str(w.message) for w in caught]
    assert any("compiled with another backend" in m and "backend=offload_pass.offload_backend" in m for m in messages), messages


def test_marks_under_ddp_do_not_warn(model, tmp_path):
    # DDP hands Dynamo its DDPOptimizer, which holds our backend: the marks
    # work there, and the "another backend" warning must not fire.
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    try:
        offload_pass.offload_modules(model, "layers.*.mlp")
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.compile(DistributedDataParallel(model), backend=backend)(torch.randn(2, 8, 32)).backward()
    finally:
        dist.destroy_process_group()
    assert not [str(w.message) for w in caught if "another backend" in str(w.message)]
    assert any(p.offloaded for p in backend.plans), backend.plans


def test_mark_non_tensor():
    with pytest.raises(TypeError, match="mark_offload: argument 1 is a int, not a tensor"):
        offload_pass.mark_offload(torch.ones(1), 3)


def test_config_errors():
    with pytest.raises(TypeError, match=r"unknown OffloadConfig option \['prefech'\]; valid options: .*prefetch"):
        offload_pass.make_backend(prefech=3)
    with pytest.raises(ValueError, match="min_bytes must be an int >= 0"):
        offload_pass.OffloadConfig(min_bytes=-1)
    with pytest.raises(ValueError, match=r"unknown pass \['ofload'\]; known passes are \['offload', 'host_pool', 'invariants', 'recompute', 'prune', 'mixed_cuts', 'calibrate', 'calibration_cache'\]"):
        offload_pass.OffloadConfig(disabled_passes=("ofload",))


def test_disabled_pass_plans_without_rewrite(model):
    offload_pass.offload_modules(model, "layers.0.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, disabled_passes=("offload",), keep_graphs=True)
    torch.compile(model, backend=backend)(torch.randn(2, 8, 32)).backward()
    plan = backend.plans[-1]
    assert plan.offloaded == ["mm_2", "view_8"] and not plan.rewritten
    graphs = backend.records[-1].graphs
    assert graphs.forward == graphs.forward_before
    assert "(rewrite disabled)" in str(plan)
    # Nothing was copied: the step says so rather than counting the plan's copies.
    step = backend.last_step()
    assert step.offloaded_bytes == 0 and step.offloaded_tensors == 0 and step.by_module() == []
    assert f"{plan.graph_id}: rewrite disabled, nothing copied (2 planned for offload)" in str(step), str(step)


def test_patterns_never_match_the_root(model):
    assert "" not in offload_pass.offload_modules(model, "*")
    assert "" not in offload_pass.keep_modules(model, "**")
    assert offload_pass.clear_marks(model)[0] != ""
    # The root is marked only by passing the model itself.
    assert offload_pass.offload_modules(model, model) == [""]


@pytest.mark.parametrize("api", ["offload_modules", "keep_modules"])
def test_empty_pattern_is_an_error(model, api):
    with pytest.raises(ValueError, match=rf"{api}: an empty pattern is not allowed.*submodule pattern.*the model itself"):
        getattr(offload_pass, api)(model, "")
    assert offload_pass.clear_marks(model) == []


def test_clear_marks_needs_a_module():
    with pytest.raises(TypeError, match="clear_marks: the argument must be the nn.Module to clear, got NoneType"):
        offload_pass.clear_marks(None)


def test_saved_roles_positions_are_checked():
    from offload_pass.examples.grouped_mlp import grouped_mlp_fwd
    from offload_pass.marking.roles import register_saved_roles

    valid_inputs = re.escape("valid input positions (the op's tensor inputs passed by position, in 0..2) are: 0 (x), 1 (w1), 2 (w2)")
    with pytest.raises(ValueError, match=r"inputs\[3\] can never apply: " + valid_inputs):
        register_saved_roles(grouped_mlp_fwd, inputs={3: "fc1"})  # tokens_per_expert: not a tensor
    with pytest.raises(ValueError, match=r"inputs\[7\] can never apply: " + valid_inputs):
        register_saved_roles(torch.ops.offload_pass.grouped_mlp_fwd, inputs={7: "fc1"})
    with pytest.raises(ValueError, match=r"outputs\[3\] can never apply: valid output positions .* in 0\.\.2"):
        register_saved_roles(torch.ops.offload_pass.grouped_mlp_fwd.default, outputs={3: "fc2"})
    with pytest.raises(ValueError, match=r"inputs position True is a bool; valid input positions"):
        register_saved_roles(grouped_mlp_fwd, inputs={True: "fc1"})
    with pytest.raises(ValueError, match=r"outputs position -1 is not an int >= 0; valid output positions"):
        register_saved_roles(grouped_mlp_fwd, outputs={-1: "fc2"})
    with pytest.raises(TypeError, match=r"inputs must be a dict of position -> role name.*got list \['fc1'\]"):
        register_saved_roles(grouped_mlp_fwd, inputs=["fc1"])
    with pytest.raises(TypeError, match=r"outputs must be a dict of position -> role name.*got list"):
        register_saved_roles(grouped_mlp_fwd, outputs=[(1, "act")])
    # An output role of a single-output op: no getitem ever takes it out.
    with pytest.raises(ValueError, match=r"register_saved_roles\(aten::mm\): outputs\[0\] can never apply: aten::mm returns a single output.*input role.*multi-output op"):
        register_saved_roles(torch.ops.aten.mm, outputs={0: "fc1"})
    # Keyword-only arguments land in an FX node's kwargs, never its args.
    with pytest.raises(ValueError, match=r"inputs\[2\] can never apply: valid input positions .* 0 \(self\), 1 \(other\)"):
        register_saved_roles(torch.ops.aten.add.Tensor, inputs={2: "alpha"})
    # The failures registered nothing; the valid registration still works.
    from offload_pass.marking.roles import roles_of

    assert roles_of(torch.ops.aten.mm.default) is None
    entry = register_saved_roles(grouped_mlp_fwd, inputs={0: "fc1"}, outputs={1: "act", 2: "fc2"})
    assert roles_of(torch.ops.offload_pass.grouped_mlp_fwd.default) == entry


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_overhead": float("nan")}, r"max_overhead must be a number >= 0 .*got nan"),
        ({"max_overhead": True}, r"max_overhead must be a number >= 0 .*got True"),
        ({"pin_memory": "no"}, r"pin_memory must be True or False \(a bool\), got 'no'"),
        ({"pin_memory": None}, r"pin_memory must be True or False \(a bool\), got None"),
        ({"pin_memory": 1}, r"pin_memory must be True or False \(a bool\), got 1"),
        ({"keep_if_no_gain": 0}, r"keep_if_no_gain must be True or False \(a bool\), got 0"),
        ({"disabled_passes": None}, r"disabled_passes must be a tuple or list of pass names from \['offload', 'host_pool', 'invariants', 'recompute', 'prune', 'mixed_cuts', 'calibrate', 'calibration_cache'\].*got None"),
        ({"disabled_passes": {"offload"}}, r"disabled_passes must be a tuple or list"),
        ({"disabled_passes": ("offload", 1)}, r"disabled_passes: unknown pass \[1\]; known passes are \['offload', 'host_pool', 'invariants', 'recompute', 'prune', 'mixed_cuts', 'calibrate', 'calibration_cache'\]"),
        ({"bandwidth_gbps": float("inf")}, r"bandwidth_gbps must be None, a finite number > 0 or a \(device->host, host->device\) pair of them, got inf"),
        ({"bandwidth_gbps": float("nan")}, r"bandwidth_gbps must be None, a finite number > 0 .*got nan"),
        ({"bandwidth_gbps": (20.0, 0)}, r"bandwidth_gbps must be None, a finite number > 0 .*got \(20.0, 0\)"),
        ({"bandwidth_gbps": (20.0, 30.0, 40.0)}, r"bandwidth_gbps must be None, a finite number > 0 .*got \(20.0, 30.0, 40.0\)"),
        ({"bandwidth_gbps": [20.0, 30.0]}, r"bandwidth_gbps must be None, a finite number > 0 .*got \[20.0, 30.0\]"),
        ({"host_memory_limit": True}, r"host_memory_limit must be None or an int >= 0, got True"),
        ({"prefetch": True}, r"prefetch must be an int >= 0, got True"),
        ({"max_inflight": 2.0}, r"max_inflight must be an int >= 1, got 2.0"),
        ({"reload_headroom": -1}, r"reload_headroom must be None \(2 % under schedule='cost'\), bytes \(an int >= 0\) or a fraction of the bytes the plan offloads \(a float in \[0, 1\]\), got -1"),
        ({"reload_headroom": 1.5}, r"reload_headroom must be None .* got 1.5"),
        ({"reload_headroom": float("nan")}, r"reload_headroom must be None .* got nan"),
        ({"reload_headroom": True}, r"reload_headroom must be None .* got True"),
        (
            {"reload_headroom": 1 << 20, "schedule": "fixed"},
            r"reload_headroom=1048576 applies to schedule='cost' only \(schedule is 'fixed'\)",
        ),
        ({"schedule": ["cost"]}, r"schedule must be one of \['cost', 'fixed'\], got \['cost'\]"),
        ({"mode": "budget", "memory_budget": float("nan")}, r"memory_budget must be bytes .* got nan"),
        ({"mode": "budget", "memory_budget": True}, r"memory_budget must be bytes .* got True"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=r"OffloadConfig\." + message):
        offload_pass.OffloadConfig(**kwargs)


def test_config_accepts_valid_values():
    assert offload_pass.OffloadConfig(disabled_passes=["host_pool"]).disabled_passes == ("host_pool",)
    assert offload_pass.OffloadConfig(disabled_passes="offload").disabled_passes == ("offload",)
    assert offload_pass.OffloadConfig(max_overhead=float("inf"), mode="auto").max_overhead == float("inf")
    with pytest.raises(TypeError, match=r"unknown OffloadConfig option \['pin'\]; valid options: .*'pin_memory'"):
        offload_pass.make_backend(pin=False)


@pytest.mark.parametrize("config", [0, {}, "marked"])
def test_make_backend_config_must_be_an_offload_config(config):
    with pytest.raises(TypeError, match=r"make_backend: config must be an OffloadConfig or None, got"):
        offload_pass.make_backend(config)


@pytest.mark.parametrize("mode", ["marked", "budget"])
def test_max_overhead_outside_auto_is_refused_like_memory_budget_outside_budget(mode):
    extra = {"memory_budget": 0.5} if mode == "budget" else {}
    with pytest.raises(ValueError, match=rf"OffloadConfig\.max_overhead applies to mode='auto' only \(mode is '{mode}'\)"):
        offload_pass.OffloadConfig(mode=mode, max_overhead=0.05, **extra)
    with pytest.raises(ValueError, match=r"max_overhead applies to mode='auto' only"):
        offload_pass.make_backend(max_overhead=0.05)
    with pytest.raises(ValueError, match=r"memory_budget applies to mode='budget' only"):
        offload_pass.OffloadConfig(memory_budget=0.5)


def test_max_overhead_defaults_to_two_percent_under_auto_only():
    assert offload_pass.OffloadConfig().max_overhead is None
    assert offload_pass.OffloadConfig(mode="auto").max_overhead == 0.02
    assert offload_pass.make_backend(mode="auto").config.max_overhead == 0.02
    auto = offload_pass.OffloadConfig(mode="auto", max_overhead=0.1)
    # Leaving mode="auto" leaves the overhead behind; coming back takes the default.
    budget = auto.replace(mode="budget", memory_budget=0.5)
    assert budget.max_overhead is None
    assert budget.replace(mode="auto", memory_budget=None).max_overhead == 0.02
    assert auto.replace(min_bytes=0).max_overhead == 0.1


def test_backend_repr_names_only_the_settings_changed():
    # torch.compile leads a backend's error with its repr: it stays short.
    assert repr(offload_pass.OffloadConfig()) == "OffloadConfig()"
    backend = offload_pass.make_backend(min_bytes=0, mode="auto", disabled_passes=("offload",))
    assert repr(backend) == "OffloadBackend(OffloadConfig(min_bytes=0, mode='auto', disabled_passes=('offload',)))"
    assert repr(offload_pass.OffloadConfig(mode="auto", max_overhead=0.1)) == "OffloadConfig(mode='auto', max_overhead=0.1)"


def test_marks_compiled_with_another_backend_warn_at_the_users_line():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    offload_pass.offload_modules(model, "0")
    from offload_pass.marking.mark_stack import MARKS

    MARKS.reset()
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        torch.compile(model, backend="eager")(torch.randn(2, 4)).sum().backward()
    said = [w for w in caught if "compiled with another backend" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert (said[0].filename, said[0].lineno) == (__file__, line), (said[0].filename, said[0].lineno)
