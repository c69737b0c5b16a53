"""Selection notes: every NoteCode renders its sentence from its figures, and
a plan's selection line is its notes rendered (planning/notes.py), so that
tests and reports assert on codes and figures."""

from __future__ import annotations

import pytest
import torch

import offload_pass
from offload_pass.enums import NoteCode
from offload_pass.examples.models import make_decoder
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.notes import SelectionNote, note, selection_text
from offload_pass.planning.offload_plan import OffloadPlan
from offload_pass.planning.scheduling import check_budget
from offload_pass.planning.step_model import StepPrediction
from offload_pass.planning.trial import Trial

MIB = 1 << 20

# Every code, with figures, and the sentence it renders to.
SENTENCES = [
    (
        note(NoteCode.SELECTION_AUTO, max_overhead=0.02, allowed=0.02, within=0.02, chosen=3, candidates=5),
        "mode=auto (max_overhead 2.0%): chose 3 of 5 copies",
    ),
    (
        note(NoteCode.SELECTION_AUTO, max_overhead=0.1, allowed=0.1, within=0.05, chosen=6, candidates=9),
        "mode=auto (max_overhead 10.0%; chosen within +5.0%): chose 6 of 9 copies",
    ),
    (
        note(NoteCode.SELECTION_AUTO, max_overhead=0.1, allowed=0.04, within=0.04, chosen=1, candidates=2),
        "mode=auto (max_overhead 10.0% of plain Inductor's step as measured: +4.0% over the step without "
        "offload as predicted): chose 1 of 2 copies",
    ),
    (
        note(NoteCode.SELECTION_MEASURED, max_overhead=0.1, chosen=2, candidates=4),
        "mode=auto (max_overhead 10.0%; copies measured within it before): chose 2 of 4 copies",
    ),
    (
        note(NoteCode.SELECTION_BUDGET, budget=64 * MIB, peak_offset=0, chosen=4, candidates=4),
        "mode=budget (64.00 MiB): chose 4 of 4 copies",
    ),
    (
        note(NoteCode.SELECTION_BUDGET, budget=64 * MIB, peak_offset=4 * MIB, chosen=4, candidates=7),
        "mode=budget (64.00 MiB; 60.00 MiB on the memory timeline, which missed 4.00 MiB at the measured peak): "
        "chose 4 of 7 copies",
    ),
    (
        note(NoteCode.OUT_OF_REACH, target=64 * MIB, peak=80 * MIB, without=100 * MIB, recompute_tried=False,
             floor=None),
        "out of reach by offload alone: the predicted peak is 80.00 MiB, 16.00 MiB over the budget "
        "(predicted peak without offload 100.00 MiB)",
    ),
    (
        note(NoteCode.OUT_OF_REACH, target=64 * MIB, peak=80 * MIB, without=100 * MIB, recompute_tried=True,
             floor=72 * MIB),
        "out of reach by offload and recompute: the predicted peak is 80.00 MiB, 16.00 MiB over the budget "
        "(predicted peak without offload 100.00 MiB); the deepest plan the search builds predicts 72.00 MiB "
        "(its floor): ask for at least that",
    ),
    (
        note(NoteCode.FALLBACK, graph="graph 3", why="measured +9.0%"),
        "mode=auto fell back from graph 3, measured +9.0%",
    ),
    (
        note(NoteCode.RECOMPUTE, trials=(Trial(None, 74.0, 138), Trial(0.7, 54.0, 140)), retried=(), skipped=()),
        "offload plus recompute; predicted per partition tried: 1.0 (none): 74.00 ms, 138 B, "
        "0.7: 54.00 ms, 140 B",
    ),
    (
        note(
            NoteCode.RECOMPUTE, trials=(Trial(None, 74.0, 138), Trial(BlockCut(2, 4, True), 80.0, 60)),
            retried=(), skipped=(), floor=60,
        ),
        "offload plus recompute; predicted per partition tried: 1.0 (none): 74.00 ms, 138 B, "
        "last 2 of 4 blocks recomputed (all but attention): 80.00 ms, 60 B; "
        "the lowest peak among them: 60 B",
    ),
    (
        note(NoteCode.AUTO_PREFIX, predicted=0.101, chosen=5, kept=4, kept_overhead=0.064),
        "the step simulator predicted +10.1% with all 5 copies chosen: kept the first 4 (+6.4%)",
    ),
    (
        note(NoteCode.AUTO_WITHIN_SHARE, predicted=0.101, chosen=5, kept=4, kept_overhead=0.064, within=0.05,
             copies=6, overhead=0.048),
        "the step simulator predicted +10.1% with all 5 copies chosen; chosen within +5.0% instead: 6 copies "
        "(+4.8%), a lower predicted peak than the first 4 of the 5 (+6.4%)",
    ),
    (
        note(NoteCode.MEASURED_FLOOR, copies=2, measured="measured +1.0%", peak=10 * MIB, chosen=3,
             chosen_peak=12 * MIB),
        "runs the 2 copies a plan of this graph ran before, measured +1.0%, within max_overhead: a lower "
        "predicted peak (10.00 MiB) than the 3 copies chosen (12.00 MiB)",
    ),
]


def test_every_note_code_has_a_sentence():
    assert {n.code for n, _ in SENTENCES} == set(NoteCode)


@pytest.mark.parametrize("made, sentence", SENTENCES, ids=[f"{n.code}-{i}" for i, (n, _) in enumerate(SENTENCES)])
def test_a_note_renders_its_figures(made, sentence):
    assert str(made) == sentence
    assert selection_text([made]).endswith(sentence)


def test_a_note_takes_a_code_only():
    with pytest.raises(TypeError, match="NoteCode"):
        SelectionNote("out_of_reach")


def test_the_selection_line_joins_the_notes_and_leads_with_the_mode():
    chose = note(NoteCode.SELECTION_AUTO, max_overhead=0.1, allowed=0.1, within=0.1, chosen=5, candidates=5)
    prefix = note(NoteCode.AUTO_PREFIX, predicted=0.101, chosen=5, kept=4, kept_overhead=0.064)
    assert selection_text([]) is None
    assert selection_text([chose, prefix]) == f"{chose}; {prefix}"
    # A search pass's note on a plan the selection said nothing of names the mode.
    assert selection_text([prefix]) == f"mode=auto: {prefix}"
    out = note(NoteCode.OUT_OF_REACH, target=64 * MIB, peak=80 * MIB, without=100 * MIB, recompute_tried=False)
    assert selection_text([out]) == f"mode=budget (64.00 MiB); {out}"
    plan = OffloadPlan("graph 0", [], [], notes=(chose, prefix))
    assert plan.selection == selection_text(plan.notes) and plan.selection in str(plan)
    with pytest.raises(AttributeError):
        plan.selection = "words"


def _predicted(peak):
    return StepPrediction(30.0, peak, 10.0, 20.0, 0.0, 0.0, "estimated")


def test_check_budget_notes_the_figures_and_the_floor():
    plan = OffloadPlan("graph 0", [], [], baseline=_predicted(100 * MIB), prediction=_predicted(80 * MIB))
    check_budget(plan, 90 * MIB, False)
    assert plan.notes == ()  # within the budget: nothing to say
    check_budget(plan, 64 * MIB, True)
    (out,) = plan.notes
    assert out.code == NoteCode.OUT_OF_REACH
    assert (out["target"], out["peak"], out["recompute_tried"], out["floor"]) == (64 * MIB, 80 * MIB, True, None)
    assert plan.selection.startswith("mode=budget (64.00 MiB); out of reach by offload and recompute: ")
    assert "floor" not in plan.selection
    plan = OffloadPlan("graph 0", [], [], baseline=_predicted(100 * MIB), prediction=_predicted(80 * MIB))
    check_budget(plan, 64 * MIB, True, floor=72 * MIB)
    assert plan.notes[0]["floor"] == 72 * MIB
    assert plan.selection.endswith("the deepest plan the search builds predicts 72.00 MiB (its floor): ask for at least that")


def test_budget_out_of_reach_is_a_note_with_its_figures():
    torch.manual_seed(0)
    model = make_decoder(layers=2, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.*.attn")
    backend = offload_pass.make_backend(
        min_bytes=0, mode="budget", memory_budget=0.3, disabled_passes=("recompute",),
    )
    torch.compile(model, backend=backend)(torch.randn(4, 64, 32)).sum().backward()
    plan = backend.plans[-1]
    assert [n.code for n in plan.notes] == [NoteCode.SELECTION_BUDGET, NoteCode.OUT_OF_REACH], plan.selection
    chose, out = plan.notes
    target = int(0.3 * plan.baseline.timeline_peak)
    assert chose["budget"] == target and chose["chosen"] == len(plan.groups)
    assert (out["target"], out["peak"], out["without"]) == (target, plan.prediction.peak, plan.baseline.timeline_peak)
    assert out["peak"] > out["target"] and not out["recompute_tried"]
    assert plan.selection == f"{chose}; {out}" and plan.selection in str(plan)
