"""The plan and step reports as a person reads them: activations listed,
graph inputs folded into one line, one byte unit per report, and the
warning for a marked module kept whole naming every reason with counts
that add up."""

from __future__ import annotations

import re

import torch

import offload_pass
from offload_pass.enums import CopyKind, Decision
from offload_pass.examples.models import make_decoder
from offload_pass.planning.byte_unit import unit_for
from offload_pass.planning.offload_plan import OffloadGroup, OffloadPlan, PlanEntry
from offload_pass.planning.plan_render import FOLDED, plan_unit
from offload_pass.planning.reasons import Reason, detail
from offload_pass.reporting.step_report import StepReport, modules_without_offload

FIGURE = re.compile(r"\b\d+(?:\.\d+)? (B|KiB|MiB|GiB)\b")


def _decoder_plan():
    model = make_decoder(layers=1, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.0.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    torch.compile(model, backend=backend)(torch.randn(2, 8, 32)).backward()
    return backend


def test_a_plan_lists_its_activations_and_folds_its_graph_inputs_into_one_line():
    backend = _decoder_plan()
    plan = backend.plans[0]
    unit = plan_unit(plan)
    lines = str(plan).splitlines()
    listed = [e for e in plan.entries if e.code not in FOLDED]
    folded = [e for e in plan.entries if e.code in FOLDED]
    params = sum(1 for e in folded if e.code == Reason.PARAMETER)
    assert params == 6 and len(folded) == 7, [(e.name, e.code) for e in plan.entries]
    # One row per activation, in the plan's order, right under the header; no row per parameter.
    assert [line.split()[0] for line in lines[2:2 + len(listed)]] == [e.name for e in listed]
    assert not any(line.startswith("primals_") for line in lines)
    assert lines[2 + len(listed)] == (
        f"graph inputs, kept and not listed: 7 ({unit(sum(e.nbytes for e in folded))}): "
        "6 parameters or buffers, 1 other input"
    )


def test_every_byte_figure_of_a_plan_is_in_the_unit_of_its_largest():
    plan = _decoder_plan().plans[0]
    unit = plan_unit(plan)
    largest = max(plan.baseline.peak, plan.prediction.peak, plan.kept_bytes, *(e.nbytes for e in plan.entries))
    assert unit == unit_for(largest) and str(unit) == "KiB"  # a 57 KiB peak; the smallest row 64 B
    lines = str(plan).splitlines()
    assert lines[1].split()[6] == "KiB"
    # The table's rows, and the summary lines the plan renders (the selection and measurement sentences are the notes').
    for line in lines[2:]:
        if line.startswith("  with offload:"):
            continue
        assert all(u == "KiB" for u in FIGURE.findall(line)), line
    assert f"reloads allowed {unit(plan.reload_headroom)} above it" in str(plan)


def _entry(name, module, size, decision, code, **values):
    return PlanEntry(
        name, "aten.mm", module, None, (size // 4,), "torch.float32", size, decision, code, name, detail(**values)
    )


def test_a_step_report_quotes_every_module_in_one_unit():
    entries = [
        _entry("a", "big", 3 << 20, Decision.OFFLOAD, Reason.MARKED, by="module big"),
        _entry("b", "small", 512, Decision.OFFLOAD, Reason.MARKED, by="module small"),
    ]
    groups = [OffloadGroup(e.name, (e.name,), CopyKind.TENSOR, e.nbytes) for e in entries]
    text = str(StepReport(1, ((OffloadPlan("graph 0", entries, groups), 1),)))
    assert "offloaded 2 saved tensors (3.00 MiB)" in text
    assert re.search(r"^    big +1 tensors  3\.00 MiB$", text, re.M), text
    assert re.search(r"^    small +1 tensors  0\.00 MiB$", text, re.M), text  # not "512 B" beside MiB
    assert {u for u in FIGURE.findall(text)} == {"MiB"}


def test_the_warning_for_a_marked_module_counts_every_reason_and_they_add_up():
    kept = [
        _entry(f"small_{n}", "mlp", n * 64, Decision.KEEP, Reason.BELOW_MIN_BYTES, nbytes=n * 64, min_bytes=1 << 20)
        for n in (1, 2, 3)
    ] + [
        _entry("first", "mlp.fc2", 4 << 20, Decision.KEEP, Reason.FIRST_IN_BACKWARD, keep_first=1),
        _entry("empty", "mlp", 0, Decision.KEEP, Reason.EMPTY),
    ]
    report = StepReport(1, ((OffloadPlan("graph 0", kept, []), 1),))
    ((name, why),) = modules_without_offload(report, ["mlp"])
    assert name == "mlp"
    assert why == (
        "its 5 saved tensors were kept: 3 below min_bytes (1048576: lower it with OffloadConfig(min_bytes=...)); "
        "1 empty tensor; "
        "1 needed first in backward (keep_first_in_backward=1): its reload would start with the backward"
    )
    counts = [int(n) for n in re.findall(r"(?:: |; )(\d+) ", why)]
    assert sum(counts) == 5 == len(kept)
