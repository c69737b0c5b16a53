"""Stage 3f, offload plus recompute (mode="budget"): which partition to plan on.

Takes: one ``Trial`` per partition of the joint graph the backend planned
offload on (PyTorch's min-cut partitioner, once as it is and then under its
own ``activation_memory_budget`` at each of ``RECOMPUTE_LEVELS``), each with
the step simulator's prediction of its rewritten step; the saved tensors of
the first partition and the names the chosen one saves. Gives: the trial to
keep, and the plan entries of the tensors it recomputes instead of saving.

Why this way: the partitioner already knows how to recompute (its knapsack
over recomputable ops, the activation-checkpointing policies it honours);
what it lacks is offload. Planning offload on each of its partitions and
predicting the step of each lets one number, the predicted step under the
budget, choose between keeping, offloading and recomputing each saved
tensor. Pure functions over plain data: no graph, no device.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from offload_pass.enums import Decision, SavedKind
from offload_pass.planning.plan import PlanEntry
from offload_pass.planning.saved_set import SavedTensor
from offload_pass.units import format_bytes

__all__ = ["RECOMPUTE_LEVELS", "Trial", "choose_trial", "recompute_entries"]

# PyTorch's activation_memory_budget, from light to full recompute. The
# partitioner's own peaks are not monotone in it (measured on the H100,
# docs/benchmarks.md), so every level is tried and judged by the prediction.
RECOMPUTE_LEVELS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)


@dataclasses.dataclass(frozen=True)
class Trial:
    """One partition with offload planned on it, as the step simulator predicts it."""

    level: Optional[float]  # activation_memory_budget it was partitioned under; None: the default (1.0)
    step_ms: float
    peak: int


def choose_trial(trials: Sequence[Trial], budget: int) -> Trial:
    """The trial with the least predicted step among those whose predicted
    peak is within ``budget`` (ties: the lower peak, then less recompute);
    when none is, the one with the lowest peak (the report says by how much
    it misses)."""
    if not trials:
        raise ValueError("choose_trial needs at least one trial")
    order = {id(t): i for i, t in enumerate(trials)}
    reaching = [t for t in trials if t.peak <= budget]
    if reaching:
        return min(reaching, key=lambda t: (t.step_ms, t.peak, order[id(t)]))
    return min(trials, key=lambda t: (t.peak, t.step_ms, order[id(t)]))


def recompute_entries(
    first_saved: Sequence[SavedTensor], first_entries: Sequence[PlanEntry], saved_now: set[str], trial: Trial
) -> list[PlanEntry]:
    """The activations the first partition saved that ``trial``'s partition
    does not: the partitioner recomputes them in backward. Their entries
    from the first plan, with decision ``recompute`` and the reason."""
    if trial.level is None:
        return []
    activations = {t.name for t in first_saved if t.kind == SavedKind.ACTIVATION}
    reason = (
        f"recomputed in backward: partitioned under activation_memory_budget={trial.level:g} "
        f"to reach the budget (predicted peak {format_bytes(trial.peak)})"
    )
    return [
        dataclasses.replace(e, decision=Decision.RECOMPUTE, reason=reason)
        for e in first_entries
        if e.name in activations and e.name not in saved_now
    ]
