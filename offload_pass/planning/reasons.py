"""Why a saved tensor got its decision: a code, the values it names, its sentence.

Takes: nothing of the package but ``enums.Word`` and ``units``. Gives
``Reason`` (``PlanEntry.code``), ``Detail`` (``PlanEntry.detail``: the values
the sentence names, as ``(name, value)`` pairs so an entry stays hashable),
``detail(**values)`` to build one, and ``sentence(code, detail)``, the one
place a reason becomes words (the plan table, ``PlanEntry.reason``). Each
member's comment names the function whose rule decides it.
"""

from __future__ import annotations

from typing import Callable

from offload_pass.enums import Word
from offload_pass.units import format_bytes

__all__ = ["Detail", "Reason", "detail", "sentence"]

Detail = tuple[tuple[str, object], ...]


class Reason(Word):
    """A plan entry's reason code."""

    # plan.eligibility: what may never be offloaded, and what was asked.
    SYMINT = "symint"
    PARAMETER = "parameter"
    GRAPH_INPUT = "graph_input"
    INPUT_VIEW = "input_view"
    MODEL_OUTPUT = "model_output"
    ON_HOST = "on_host"
    LAZY_BIT = "lazy_bit"
    COLLECTIVE = "collective"  # detail: op
    KEPT_BY_MARK = "kept_by_mark"  # detail: by (the opt-out)
    NOT_MARKED = "not_marked"
    OTHER_ROLES = "other_roles"  # detail: by (the mark, and the roles it selects)
    EMPTY = "empty"
    MARKED = "marked"  # detail: by (the mark)
    UNMARKED_CANDIDATE = "unmarked_candidate"
    # plan._copy_group: a storage's members move together, above min_bytes.
    SHARES_STORAGE = "shares_storage"  # detail: with, why, why_detail (the blocked member's reason)
    BELOW_MIN_BYTES = "below_min_bytes"  # detail: nbytes, min_bytes
    # plan.plan_saved_tensors: keep_first_in_backward.
    FIRST_IN_BACKWARD = "first_in_backward"  # detail: keep_first
    # plan.keep_offloads_without_gain: keep_if_no_gain.
    NO_GAIN = "no_gain"
    # scheduling: what the selection of mode="auto" / "budget" did not choose.
    AUTO_MEASURED_SET = "auto_measured_set"
    AUTO_NOT_CHOSEN = "auto_not_chosen"  # detail: max_overhead
    BUDGET_NOT_NEEDED = "budget_not_needed"
    # host_limit.fit_to_host: past the pinned host memory a plan may hold.
    HOST_LIMIT = "host_limit"  # detail: limit (bytes), source (host_limit.LimitSource), available (bytes), share
    # recompute.recompute_entries: the partition chosen does not save it.
    RECOMPUTED = "recomputed"  # detail: level, peak (bytes)
    BLOCK_RECOMPUTED = "block_recomputed"  # detail: cut (blocks.BlockCut), peak (bytes)
    BUDGET_CHOSEN = "budget_chosen"  # detail: budget (bytes)
    # plan.plain_inductor_plan: mode="auto" fell back to plain Inductor.
    PLAIN_FALLBACK = "plain_fallback"


def detail(**values: object) -> Detail:
    """``values`` as a ``Detail``, in the order given."""
    return tuple(values.items())


def _shares_storage(d: dict) -> str:
    return f"shares storage with {d['with']} ({sentence(d['why'], d['why_detail'])})"


_SENTENCES: dict[Reason, Callable[[dict], str]] = {
    Reason.SYMINT: lambda d: "symbolic int",
    Reason.PARAMETER: lambda d: "parameter or buffer",
    Reason.GRAPH_INPUT: lambda d: "graph input",
    Reason.INPUT_VIEW: lambda d: "view of a graph input",
    Reason.MODEL_OUTPUT: lambda d: "model output (or shares its storage)",
    Reason.ON_HOST: lambda d: "already in host memory",
    Reason.LAZY_BIT: lambda d: "conjugate or negated view (lazy bit): the copy ops cannot take one",
    Reason.COLLECTIVE: lambda d: f"output of a collective ({d['op']})",
    Reason.KEPT_BY_MARK: lambda d: f"kept by {d['by']}",
    Reason.NOT_MARKED: lambda d: "not marked",
    Reason.OTHER_ROLES: lambda d: d["by"],
    Reason.EMPTY: lambda d: "empty tensor",
    Reason.MARKED: lambda d: f"offloaded by {d['by']}",
    Reason.UNMARKED_CANDIDATE: lambda d: f"candidate of mode={d['mode']} (nothing marked)",
    Reason.SHARES_STORAGE: _shares_storage,
    Reason.BELOW_MIN_BYTES: lambda d: f"below min_bytes ({d['nbytes']} < {d['min_bytes']})",
    Reason.FIRST_IN_BACKWARD: lambda d: (
        f"needed first in backward (keep_first_in_backward={d['keep_first']}): "
        "its reload would start with the backward"
    ),
    Reason.NO_GAIN: lambda d: "offloading it would not lower the predicted peak (keep_if_no_gain)",
    Reason.AUTO_MEASURED_SET: lambda d: "not chosen by mode=auto: a set of copies measured within max_overhead runs",
    Reason.AUTO_NOT_CHOSEN: lambda d: (
        f"not chosen by mode=auto: no gain at the peak within max_overhead={d['max_overhead']}"
    ),
    Reason.BUDGET_NOT_NEEDED: lambda d: "not chosen by mode=budget: not needed to reach the budget",
    Reason.HOST_LIMIT: lambda d: _host_limit(d),
    Reason.RECOMPUTED: lambda d: (
        f"recomputed in backward: partitioned under activation_memory_budget={d['level']:g} "
        f"to reach the budget (predicted peak {format_bytes(d['peak'])})"
    ),
    Reason.BUDGET_CHOSEN: lambda d: (
        f"chosen by mode=budget (nothing marked): among the copies that reach {format_bytes(d['budget'])} "
        "in the least predicted step"
    ),
    Reason.BLOCK_RECOMPUTED: lambda d: (
        f"recomputed in backward: {d['cut'].blocks_text()} from their inputs"
        f"{'' if d['cut'].rest is None else ', ' + d['cut'].rest_text() + ','} "
        f"to reach the budget (predicted peak {format_bytes(d['peak'])})"
    ),
    Reason.PLAIN_FALLBACK: lambda d: "kept: the graph runs plain Inductor's compile (mode=auto fell back)",
}


def sentence(code: Reason, values: Detail = ()) -> str:
    """The reason ``code`` with its ``values``, in words."""
    return _SENTENCES[code](dict(values))


def _host_limit(d: dict) -> str:
    said = f"kept: the plan's pinned host memory would pass {format_bytes(d['limit'])}"
    if d["source"] == "default":
        return (
            f"{said}, {d['share']:.0%} of the {format_bytes(d['available'])} the host had available "
            "(pinned pages cannot be swapped; set host_memory_limit to change it)"
        )
    return f"{said} (host_memory_limit)"
