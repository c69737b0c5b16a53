"""README's Quickstart and the demo run on a CPU as they are and offload
something, without a warning that a mark moved nothing; ``backend.plans``
holds training graphs only."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

import offload_pass
from offload_pass import runtime
from offload_pass.examples import demo
from offload_pass.examples.models import make_decoder

README = Path(__file__).resolve().parents[1] / "README.md"


def _quickstart() -> str:
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _offload_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("offload_pass:")]


def test_readme_quickstart_runs_on_cpu_and_offloads():
    torch._dynamo.reset()
    runtime.reset_stats()
    namespace: dict = {"__name__": "__main__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(_quickstart(), "<README Quickstart>", "exec"), namespace)
    plan = namespace["backend"].plans[0]
    assert plan.offloaded and runtime.stats()["offload_calls"] > 0, plan  # one copy per storage
    assert not _offload_warnings(caught), _offload_warnings(caught)


def test_demo_offloads_on_cpu_and_says_why_min_bytes_is_zero(capsys):
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        demo.main(["--device", "cpu"])
    out = capsys.readouterr().out
    assert "min_bytes=0: every tensor of this small CPU model is under the 1 MiB default" in out, out
    moved = re.search(r"offloaded: (\d+) saved tensors, (\d+) bytes", out)
    assert moved and int(moved.group(1)) > 0 and int(moved.group(2)) > 0, out
    assert "loss and gradients identical to plain Inductor: True" in out
    assert not _offload_warnings(caught), _offload_warnings(caught)


def test_no_grad_calls_add_no_plan():
    torch._dynamo.reset()
    model = make_decoder(layers=1, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.*.attn")
    backend = offload_pass.make_backend(min_bytes=0)
    with torch.no_grad():
        torch.compile(model, backend=backend)(torch.randn(2, 8, 32))
    assert backend.plans == []
    with pytest.raises(IndexError, match="no plan yet: plans are made for training graphs"):
        backend.plans[0]
