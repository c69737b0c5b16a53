"""What a checked plan leads to: kept, planned again, or replaced.

Takes: a measured graph whose plan's calls were all measured (the median
call, and under mode="auto" plain Inductor's graph measured beside it).
Gives: ``Replanning``, the steps ``MeasuredGraph`` runs then: check the
prediction (``check``), remember what ran (``memory``), ask the policy
(``policy.replan_reason``), fit a calibration (``fit``) and compile the
graph once more through ``Recompile.compile``; where the graph will not be
planned again and measured over ``max_overhead``, fall back
(``policy.choose_fallback``). A re-plan never makes a run wrong: where it
fails, the plan (or its fallback) runs on.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Callable, Optional

from torch._dynamo.utils import preserve_rng_state
from torch.utils._python_dispatch import _disable_current_modes

from offload_pass.enums import ReplanReason
from offload_pass.feedback import memory
from offload_pass.feedback.check import MeasuredCall, PredictionCheck, check_prediction, predicts_alike
from offload_pass.feedback.fit import fit_calibration
from offload_pass.feedback.policy import choose_fallback, nothing_to_decide, replan_reason
from offload_pass.planning.calibration import Calibration, overhead_allowed
from offload_pass.units import format_bytes

__all__ = ["Replanning", "call_inputs"]

log = logging.getLogger("offload_pass")


def call_inputs(args: tuple) -> list:
    """The graph's inputs of one call (Dynamo hands them one by one, or as one list to a boxed function)."""
    return list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)


def _allows_alike(plan: Any, calibration: Calibration) -> bool:
    """Whether a plan under ``calibration`` would spend the slowdown ``plan``
    could (within 0.1 %): mode="auto" with plain Inductor measured anew
    holds the selection to that measurement, which a calibration predicting
    alike does not show."""
    if plan.max_overhead is None or plan.baseline is None:
        return True
    allowed = overhead_allowed(plan.max_overhead, calibration, plan.baseline)
    return abs(allowed - (plan.overhead_allowed or plan.max_overhead)) <= 1e-3


def _peak(record: Any) -> Optional[int]:
    """A compile record's peak: measured where it was, else its plan's predicted."""
    if record.measured is not None:
        return record.measured.peak
    return None if record.plan.prediction is None else record.plan.prediction.peak


def _frees_by_design(plan: Any) -> bool:
    """Whether a plan frees anything by what it chose: copies, or a recompute partition."""
    return bool(plan.groups) or plan.recompute_level is not None


def _frees_more(again: Any, before: Optional[int]) -> bool:
    """Whether the re-plan ``again`` predicts a lower peak than ``before``, that of the plan it replaces (``_peak``)."""
    return again.prediction is not None and before is not None and again.prediction.peak < before


class Replanning:
    """The steps after a plan's check (a mixin of ``loop.MeasuredGraph``, whose state they read)."""

    def _checked(
        self, args: tuple, measured: MeasuredCall, plain: Optional[MeasuredCall] = None, ratios: tuple = ()
    ) -> None:
        """Check the prediction against ``measured`` (and, mode="auto", the
        plan's step against plain Inductor's: ``plain``, ``ratios``) and,
        where ``policy.replan_reason`` says so, plan once more from this call's inputs."""
        plan = self._plan()
        check = dataclasses.replace(check_prediction(plan.prediction, measured), plain=plain, pair_ratios=ratios)
        self._note(self.plan_index, measured=check)
        log.info("offload_pass: %s %s", plan.graph_id, check.describe())
        replan = self.replan
        if replan.key and plan.max_overhead is not None:
            memory.remember_measured(replan.key, plan, check)
        reason = self._reason(plan, check)
        if reason is None or replan.compile is None or replan.simulate is None:
            self._say_kept(plan, reason, check)
            self._stop(plan, plain)
            return
        calibration = self._fit(plan, check, measured, plain)
        if predicts_alike(replan.simulate(calibration), check.predicted) and _allows_alike(plan, calibration):
            log.info(
                "offload_pass: %s not planned again (%s): %s predicts this plan as it was predicted, so it would "
                "plan the same", plan.graph_id, reason, calibration.describe(),
            )
            self._stop(plan, plain)
            return
        self.replanned.append(reason)
        compiled = self._compile_again(plan, calibration, args, plain)
        if compiled is not None:
            self._adopt(plan, compiled, calibration, reason)

    def _reason(self, plan: Any, check: PredictionCheck) -> Optional[ReplanReason]:
        unspent = None if plan.overhead_allowed is None or plan.predicted_overhead is None else (
            plan.overhead_allowed - plan.predicted_overhead
        )
        return replan_reason(
            check, plan.budget, self.replanned, plan.candidates, plan.max_overhead, plan.baseline, len(plan.groups),
            unspent,
        )

    def _say_kept(self, plan: Any, reason: Optional[ReplanReason], check: PredictionCheck) -> None:
        """Log why a plan measured off is not planned again."""
        if reason is not None:
            why = self.replan.why_not or "no step simulator was kept for its graphs"
            log.info("offload_pass: %s not planned again (%s): %s", plan.graph_id, reason, why)
        elif not check.within() and nothing_to_decide(plan.candidates, plan.budget):
            log.info("offload_pass: %s not planned again: it has nothing a plan could copy", plan.graph_id)
        elif not check.within() and self.replanned:
            log.info(
                "offload_pass: %s not planned again: planned again %d times already (%s)",
                plan.graph_id, len(self.replanned), ", ".join(self.replanned),
            )

    def _stop(self, plan: Any, plain: Optional[MeasuredCall]) -> bool:
        """Never plan this graph again; fall back where the policy says so."""
        self.replan = dataclasses.replace(self.replan, compile=None, simulate=None)
        return self._fall_back(plan, plain)

    def _fit(self, plan: Any, check: PredictionCheck, measured: MeasuredCall, plain: Optional[MeasuredCall]) -> Calibration:
        simulate = self.replan.simulate
        calibration = fit_calibration(
            check, simulate, f"{plan.graph_id}, {measured.describe_call()}", self._record().calibration,
            plan.baseline, functools.partial(simulate, runtime_ops=False), plan.recompute_level,
        )
        if plain is not None:
            calibration = dataclasses.replace(calibration, plain_work_ms=check.plain_work_ms)
        return calibration

    def _compile_again(
        self, plan: Any, calibration: Calibration, args: tuple, plain: Optional[MeasuredCall]
    ) -> Optional[tuple]:
        """The re-plan's compile, as Dynamo compiles (the random state kept,
        the user's modes off); None where it failed (the plan runs on)."""
        try:
            with preserve_rng_state(), _disable_current_modes():
                compiled = self.replan.compile(calibration, call_inputs(args), plan)
            if compiled[1] is None:
                raise RuntimeError("the compile planned no forward/backward pair")
        except Exception as error:  # the plan runs on (or what it falls back to), never wrong
            fell_back = self._stop(plan, plain)
            log.warning(
                "offload_pass: %s could not be planned again (%s: %s)%s",
                plan.graph_id, type(error).__name__, error, "" if fell_back else "; it keeps its plan",
            )
            return None
        return compiled

    def _adopt(self, plan: Any, compiled: tuple, calibration: Calibration, reason: ReplanReason) -> None:
        """The re-plan compiled: it runs from this call on, unless a plan measured already runs instead."""
        fn, plan_index, simulate = compiled
        replan = self.replan
        again = self._plan(plan_index)
        self._note(plan_index, replan_reason=reason)
        if replan.key:  # carried only once it compiled: a later first compile has no fallback
            memory.carry(replan.key, calibration, replan.store)
        instead = self._plan_instead(again, plan, reason)
        if instead is not None:
            index, compiled_before, fallback = instead
            self._note(plan_index, fallback=fallback)
            log.info("offload_pass: %s %s", again.graph_id, fallback)
            self.replan = dataclasses.replace(replan, compile=None, simulate=None)
            self.compiled, self.plan_index, self.graph_id = compiled_before, index, f"graph {index}"
            return
        log.info(
            "offload_pass: %s planned again as graph %d (%s): %s",
            plan.graph_id, plan_index, reason, calibration.describe(),
        )
        self.replan = dataclasses.replace(replan, simulate=simulate)
        self._restart(fn, plan_index)

    def _plan_instead(self, again: Any, plan: Any, reason: ReplanReason) -> Optional[tuple[int, Callable, str]]:
        """The plan that runs in place of the re-plan ``again`` of ``plan``,
        compiled and measured already: its index, its compiled function and
        why. None: ``again`` runs."""
        earlier = self._earlier_plan_alike(again)
        if earlier is not None:
            # Measuring the same copies once more would take another round of
            # turns with plain Inductor's graph (calls that offload nothing) for one sample.
            index, compiled = earlier
            return index, compiled, (
                f"planned again with the copies graph {index} ran, measured "
                f"{self._record(index).measured.measured_overhead:+.1%} against plain Inductor's graph, "
                f"within max_overhead: runs graph {index}'s plan instead of measuring them again"
            )
        before = _peak(self._record())
        if reason == ReplanReason.ROOM and not _frees_more(again, before):
            # Spending the room is worth a plan only for a lower peak: the plan measured within runs on.
            return self.plan_index, self.compiled, (  # type: ignore[return-value]
                f"planned again for the room under max_overhead, but predicts no lower peak than {plan.graph_id} "
                f"({format_bytes(again.prediction.peak)} against {format_bytes(before or 0)}): "
                f"runs {plan.graph_id}'s plan instead"
            )
        return None

    def _earlier_plan_alike(self, again: Any) -> Optional[tuple[int, Callable]]:
        """mode="auto": an earlier plan of this graph, newest first, that ran
        the copies ``again`` chose, measured within ``again.max_overhead``
        against plain Inductor's graph (no noise allowed) and as predicted."""
        if again.max_overhead is None or not again.groups:
            return None
        copies = memory.copies(again)
        for index, compiled in reversed(self._plans):
            plan, check = self._plan(index), self._record(index).measured
            if (
                check is not None and check.measured_overhead is not None
                and check.measured_overhead <= again.max_overhead and check.within()
                and memory.copies(plan) == copies
            ):
                return index, compiled
        return None

    def _fall_back(self, plan: Any, plain: Optional[MeasuredCall]) -> bool:
        """mode="auto": where the plan running now, not planned again,
        measured over ``max_overhead``, run what ``policy.choose_fallback``
        says from this call on: an earlier plan of this graph, or plain
        Inductor's graph (a record of its own). Returns whether it fell back."""
        if plan.max_overhead is None:
            return False
        plain_runs = self.plain is not None and plain is not None
        fallback = choose_fallback(
            [
                (r.plan.graph_id, r.measured, _frees_by_design(r.plan))
                for r in (self._record(i) for i, _ in self._plans)
            ],
            plan.max_overhead, plain_runs,
        )
        if fallback is None:
            return False
        self._note(self.plan_index, fallback=fallback.reason)
        if fallback.plain:
            check = check_prediction(plan.baseline, plain)  # type: ignore[arg-type]
            index, compiled = self.replan.record_plain(self.plan_index, fallback.reason, check), self.plain
        else:
            index, compiled = self._plans[fallback.plan]  # type: ignore[index]
        log.info("offload_pass: %s %s (graph %d from this call on)", plan.graph_id, fallback.reason, index)
        self.compiled, self.plan_index, self.graph_id = compiled, index, f"graph {index}"
        return True
