"""Bad inputs give errors that name them and say what would be valid."""

import re
import warnings

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass.models import make_decoder


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
    offload_pass.offload_modules(model, "layers.0.mlp", roles=["act"])
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    with pytest.raises(Exception, match=re.escape("module layers.0.mlp asks for roles ['act'] but it has no fused op with roles")):
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
    with pytest.raises(ValueError, match=r"unknown pass \['ofload'\]; known passes are \['offload', 'host_pool'\]"):
        offload_pass.OffloadConfig(disabled_passes=("ofload",))


def test_disabled_pass_plans_without_rewrite(model):
    offload_pass.offload_modules(model, "layers.0.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, disabled_passes=("offload",))
    torch.compile(model, backend=backend)(torch.randn(2, 8, 32)).backward()
    plan = backend.plans[-1]
    assert plan.offloaded == ["mm_2", "view_8"] and not plan.rewritten
    graphs = backend.graphs[-1]
    assert graphs["forward"] == graphs["forward_before"]
    assert "(rewrite disabled)" in str(plan)
