"""What the selection and the search passes decided, as structured notes.

Takes: a ``NoteCode`` and the figures behind it. Gives: ``SelectionNote``
(code + detail fields; ``str`` renders its sentence), ``note(code,
**detail)`` and ``selection_text(notes)``, the plan's selection line (what
``OffloadPlan.selection`` prints): the notes' sentences joined by "; ", a
first note that names no mode of its own led by its mode. Tests and
reports read the codes and figures; only this module writes the words.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

from offload_pass.enums import NoteCode
from offload_pass.units import format_bytes

__all__ = ["SelectionNote", "note", "selection_text"]


@dataclasses.dataclass(frozen=True)
class SelectionNote:
    """One decision of the selection or a search pass: its code and the figures it rests on."""

    code: NoteCode
    detail: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.code, NoteCode):
            raise TypeError(f"SelectionNote: code must be a NoteCode, got {self.code!r}; valid: {NoteCode.words()}")

    def __getitem__(self, key: str) -> Any:
        return dict(self.detail)[key]

    def __str__(self) -> str:
        return _RENDER[self.code](dict(self.detail))

    def lead(self) -> str:
        """The sentence as the first of a selection line: led by its mode where it names none."""
        lead = _LEAD.get(self.code)
        return str(self) if lead is None else f"{lead(dict(self.detail))}{self}"


def note(code: NoteCode, **detail: Any) -> SelectionNote:
    return SelectionNote(code, tuple(detail.items()))


def selection_text(notes: Iterable[SelectionNote]) -> Optional[str]:
    """The selection line of a plan with ``notes``; None without notes."""
    notes = tuple(notes)
    if not notes:
        return None
    return "; ".join([notes[0].lead(), *(str(n) for n in notes[1:])])


def _selection_auto(d: dict) -> str:
    retried = "" if d["within"] == d["allowed"] else f"; chosen within {d['within']:+.1%}"
    mode = f"mode=auto (max_overhead {d['max_overhead']:.1%}{retried})"
    if d["allowed"] != d["max_overhead"]:
        mode = (
            f"mode=auto (max_overhead {d['max_overhead']:.1%} of plain Inductor's step as measured: "
            f"{d['allowed']:+.1%} over the step without offload as predicted{retried})"
        )
    return f"{mode}: chose {d['chosen']} of {d['candidates']} copies"


def _selection_measured(d: dict) -> str:
    return (
        f"mode=auto (max_overhead {d['max_overhead']:.1%}; copies measured within it before): "
        f"chose {d['chosen']} of {d['candidates']} copies"
    )


def _selection_budget(d: dict) -> str:
    budget, offset = d["budget"], d["peak_offset"]
    on_timeline = ""
    if offset:
        missed = (
            f"which missed {format_bytes(offset)}" if offset > 0 else f"which counted {format_bytes(-offset)} more than"
        )
        on_timeline = f"; {format_bytes(budget - offset)} on the memory timeline, {missed} at the measured peak"
    return f"mode=budget ({format_bytes(budget)}{on_timeline}): chose {d['chosen']} of {d['candidates']} copies"


def _out_of_reach(d: dict) -> str:
    means = "offload and recompute" if d["recompute_tried"] else "offload alone"
    text = (
        f"out of reach by {means}: the predicted peak is {format_bytes(d['peak'])}, "
        f"{format_bytes(d['peak'] - d['target'])} over the budget "
        f"(predicted peak without offload {format_bytes(d['without'])})"
    )
    if d.get("floor") is not None:
        text += (
            f"; the deepest plan the search builds predicts {format_bytes(d['floor'])} (its floor): "
            "ask for at least that"
        )
    return text


def _fallback(d: dict) -> str:
    return f"mode=auto fell back from {d['graph']}, {d['why']}"


def _recompute(d: dict) -> str:
    tried = ", ".join(t.describe() for t in d["trials"])
    if d["retried"]:
        tried += (
            "; partitioned again although out of reach before, since nothing else reached the budget and their "
            "earlier peaks stood below the lowest: " + ", ".join(format(t.level, "g") for t in d["retried"])
        )
    if d["skipped"]:
        tried += (
            "; not tried again, out of reach before (as predicted then, their calibration's offsets in): "
            + ", ".join(t.describe() for t in d["skipped"])
        )
    if d.get("pruned"):
        tried += "; not planned, unable to beat the fastest within the budget: " + ", ".join(
            p.describe() for p in d["pruned"]
        )
    floor = d.get("floor")
    floor_text = "" if floor is None else f"; the lowest peak among them: {format_bytes(floor)}"
    return f"offload plus recompute; predicted per partition tried: {tried}{floor_text}"


def _predicted(d: dict) -> str:
    return f"the step simulator predicted {d['predicted']:+.1%} with all {d['chosen']} copies chosen"


def _auto_prefix(d: dict) -> str:
    return f"{_predicted(d)}: kept the first {d['kept']} ({d['kept_overhead']:+.1%})"


def _auto_within_share(d: dict) -> str:
    return (
        f"{_predicted(d)}; chosen within {d['within']:+.1%} instead: {d['copies']} copies "
        f"({d['overhead']:+.1%}), a lower predicted peak than the first {d['kept']} of the {d['chosen']} "
        f"({d['kept_overhead']:+.1%})"
    )


def _measured_floor(d: dict) -> str:
    return (
        f"runs the {d['copies']} copies a plan of this graph ran before, {d['measured']}, within "
        f"max_overhead: a lower predicted peak ({format_bytes(d['peak'])}) than the "
        f"{d['chosen']} copies chosen ({format_bytes(d['chosen_peak'])})"
    )


_RENDER: dict[NoteCode, Callable[[dict], str]] = {
    NoteCode.SELECTION_AUTO: _selection_auto,
    NoteCode.SELECTION_MEASURED: _selection_measured,
    NoteCode.SELECTION_BUDGET: _selection_budget,
    NoteCode.OUT_OF_REACH: _out_of_reach,
    NoteCode.FALLBACK: _fallback,
    NoteCode.RECOMPUTE: _recompute,
    NoteCode.AUTO_PREFIX: _auto_prefix,
    NoteCode.AUTO_WITHIN_SHARE: _auto_within_share,
    NoteCode.MEASURED_FLOOR: _measured_floor,
}

# A first note whose sentence names no mode is led by it: a search pass's
# note on a plan the selection said nothing of (no copies to choose from).
_LEAD: dict[NoteCode, Callable[[dict], str]] = {
    NoteCode.AUTO_PREFIX: lambda d: "mode=auto: ",
    NoteCode.AUTO_WITHIN_SHARE: lambda d: "mode=auto: ",
    NoteCode.MEASURED_FLOOR: lambda d: "mode=auto: ",
    NoteCode.OUT_OF_REACH: lambda d: f"mode=budget ({format_bytes(d['target'])}); ",
}
