"""Gradients with copies landing as late as the runtime's events allow (``late_copies``), on the CPU.

The CPU runtime copies synchronously, so a kernel the compiled code runs
before its reload's wait (or a copy-out read before it is ordered) would
read the right data here and the wrong data on a GPU. Under
``late_copies`` such a read reads NaN. Facts able to fail: the harness
itself (a reload read before its wait is NaN, after it is the tensor); the
tiny long-context model's loss and adapter gradients bit for bit against
plain Inductor with attention offloaded, every marked set and the budget
mode, every copy made late and every reload waited for.
"""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import long_context as lc
from offload_pass.compile_caches import graph_caches_off
from offload_pass.runtime import ops

from late_copies import late_copies

pytestmark = pytest.mark.xdist_group("long_context")


def test_a_reload_read_before_its_wait_reads_nan():
    x = torch.randn(4, 8)
    with late_copies() as counts:
        host = ops.offload(x)
        ops.release(x, host)
        back = ops.reload(host, torch.device("cpu"))
        assert torch.isnan(back).all()
        ops.wait_reload(back)
        assert torch.equal(back, x)
    assert counts == {"copy_outs": 1, "reloads": 1, "unwaited_reloads": 0}


def test_a_host_copy_is_taken_from_the_source_as_it_is_at_its_release():
    x = torch.randn(4, 8)
    with late_copies():
        host = ops.offload(x)
        assert torch.isnan(host).all()
        x.mul_(2)  # the compiled code overwrote the source before the copy-out was ordered
        ops.release(x, host)
        assert torch.equal(host, x)


@pytest.mark.parametrize("variants", ["ours_attn,ours_marked", "ours_budget"])
def test_tiny_gradients_bit_for_bit_with_late_copies(variants, tmp_path):
    graph_caches_off(str(tmp_path))
    with late_copies() as counts:
        verdict = lc.grad_check(lc.parse_args(["--tiny", "--grad-check", "--grad-variants", variants]))
    assert counts["copy_outs"] > 0 and counts["reloads"] == counts["copy_outs"], counts
    assert counts["unwaited_reloads"] == 0, counts
    for name in variants.split(","):
        assert verdict["variants"][name]["offloaded_bytes"] > 0, name
    assert verdict["equal"], json.dumps(verdict["variants"])
