"""The runtime ops as the compiled graphs call them: through the dispatcher,
with no Python wrapper between the call and the kernel."""

from __future__ import annotations

import pytest
import torch

from offload_pass import runtime


@pytest.mark.parametrize("name", sorted(runtime.OPS))
def test_no_python_autograd_wrapper_on_the_launch_path(name):
    # Every copy calls these four ops on the launch path of the forward or
    # the backward. torch.library.custom_op would put its Python autograd
    # and in-place wrappers in front of each call (about 10 us of host time
    # against about 1 us, benchmarks/op_host_cost.py); the ops are defined
    # with one kernel for every backend and nothing on the autograd keys.
    qualified = f"offload_pass::{name}"
    for key in ("Autograd", "AutogradCPU", "AutogradCUDA", "ADInplaceOrView"):
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key), (qualified, key)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeExplicitAutograd")


def test_schemas_declare_what_the_ops_write():
    # Inductor keeps release and wait_reload in the graph, and orders their
    # readers, by the writes the schemas declare (ops.py says why these).
    written = {
        name: [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        for name, op in runtime.OPS.items()
    }
    assert written == {"offload": [], "release": ["host"], "reload": [], "wait_reload": ["x"]}
    assert torch.Tag.needs_exact_strides in runtime.OPS["offload"].tags


def test_round_trip_through_the_dispatcher_with_named_settings():
    x = torch.randn(6, 5)[:, 1:4]  # a gapped view: copied with its strides
    host = runtime.offload(x, pin_memory=False, host_limit=-1)
    assert host.device.type == "cpu" and host.stride() == x.stride()
    runtime.release(x, host)
    back = runtime.reload(host, x.device, align=0)
    runtime.wait_reload(back)
    assert torch.equal(back, x) and back.stride() == x.stride()
