"""The pipeline's hold on selection notes: recording one on a pass state.

Takes: a pass state (or an attempt: anything with a ``plan``) and a
``SelectionNote`` (``planning.notes``, which owns the codes' figures and
sentences). Gives ``add_note``, which appends the note to the plan's
``notes`` (the plan prints them as its selection line) and, on a pass
state, to its ``notes`` (what the compile record keeps); ``note`` and
``SelectionNote`` are planning's, re-exported for the search passes.
"""

from __future__ import annotations

from typing import Any

from offload_pass.planning.notes import SelectionNote, note

__all__ = ["SelectionNote", "add_note", "note"]


def add_note(attempt: Any, selection_note: SelectionNote) -> None:
    """Append ``selection_note`` to ``attempt.plan.notes`` and, on a pass state, to its notes."""
    attempt.plan.notes = (*attempt.plan.notes, selection_note)
    if hasattr(attempt, "notes"):
        attempt.notes = (*attempt.notes, selection_note)
