"""What the pipeline's search passes did to a selection, as structured notes.

Takes: a ``NoteCode`` and the figures behind it. Gives: ``SelectionNote``
(code + detail fields; ``str`` renders the sentence the plan prints) and
``add_note``, which appends a note's sentence to ``plan.selection`` and keeps
the note on the pass state, so that tests and reports read codes, not prose.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from offload_pass.enums import NoteCode
from offload_pass.units import format_bytes

__all__ = ["SelectionNote", "add_note", "note"]


@dataclasses.dataclass(frozen=True)
class SelectionNote:
    """One decision of a search pass: its code and the figures it rests on."""

    code: NoteCode
    detail: tuple[tuple[str, Any], ...] = ()

    def __getitem__(self, key: str) -> Any:
        return dict(self.detail)[key]

    def __str__(self) -> str:
        return _RENDER[self.code](dict(self.detail))

    def appended_to(self, selection: str | None) -> str:
        """The plan's selection text with this note after it (a first note of mode="auto" says its mode)."""
        if selection:
            return f"{selection}; {self}"
        return str(self) if self.code == NoteCode.RECOMPUTE else f"mode=auto: {self}"


def note(code: NoteCode, **detail: Any) -> SelectionNote:
    return SelectionNote(code, tuple(detail.items()))


def add_note(attempt: Any, selection_note: SelectionNote) -> None:
    """Append ``selection_note`` to ``attempt.plan.selection`` and, on a pass state, to its notes."""
    attempt.plan.selection = selection_note.appended_to(attempt.plan.selection)
    if hasattr(attempt, "notes"):
        attempt.notes = (*attempt.notes, selection_note)


def _recompute(d: dict) -> str:
    tried = ", ".join(t.describe() for t in d["trials"])
    if d["retried"]:
        tried += (
            "; partitioned again although out of reach before, since nothing else reached the budget and their "
            "earlier peaks stood below the lowest: " + ", ".join(f"{t.level:g}" for t in d["retried"])
        )
    if d["skipped"]:
        tried += (
            "; not tried again, out of reach before (as predicted then, their calibration's offsets in): "
            + ", ".join(t.describe() for t in d["skipped"])
        )
    return f"offload plus recompute; predicted per activation_memory_budget tried: {tried}"


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
    NoteCode.RECOMPUTE: _recompute,
    NoteCode.AUTO_PREFIX: _auto_prefix,
    NoteCode.AUTO_WITHIN_SHARE: _auto_within_share,
    NoteCode.MEASURED_FLOOR: _measured_floor,
}
