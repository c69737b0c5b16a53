"""The feedback loop's state machine: which call runs what, and which is measured.

Takes: a compiled graph with its ``Recompile`` (``feedback/recompile.py``).
Gives: ``MeasuredGraph``, a ``CompiledGraph`` that, from the calls
``feedback/schedule.py`` names, measures the plan (``feedback/measure.py``)
and checks its prediction against the median call; under mode="auto" it
first compiles plain Inductor's graph of the same Dynamo graph and runs it
in turns with the plan's, measured alike. Once the plan's calls are all
measured, ``replan.Replanning`` decides what follows. Neither measured nor
planned again inside a backward (activation checkpointing runs forwards
there) nor under no_grad (a compile would make an inference graph).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.utils import preserve_rng_state
from torch.utils._python_dispatch import _disable_current_modes

from offload_pass.compiled_graph import CompiledGraph, GraphHost
from offload_pass.feedback import schedule
from offload_pass.feedback.check import median_call, pair_ratios
from offload_pass.feedback.measure import CallMeasurement
from offload_pass.feedback.policy import nothing_to_decide
from offload_pass.feedback.recompile import Recompile
from offload_pass.feedback.replan import Replanning, call_inputs
from offload_pass.marking.mark import Mark
from offload_pass.runtime.state import STATE
from offload_pass.units import format_bytes

__all__ = ["MeasuredGraph"]

log = logging.getLogger("offload_pass")


class MeasuredGraph(Replanning, CompiledGraph):
    """A compiled graph the feedback loop measures and may plan again."""

    def __init__(
        self, host: GraphHost, compiled: Callable, active: Sequence[Mark], plan_index: int, replan: Recompile
    ) -> None:
        super().__init__(host, compiled, active, plan_index)
        self.replan: Optional[Recompile] = replan
        self.measurement: Optional[CallMeasurement] = None
        self.measured_calls: list[CallMeasurement] = []  # finished, read at the check
        # mode="auto": plain Inductor's compiled graph, its measured calls, and why it is not measured ("": it is).
        self.plain: Optional[Callable] = None
        self.plain_calls: list[CallMeasurement] = []
        self.plain_not_measured = ""
        self._plain_warm = False
        # The last measured call of either graph: the next call, measured, times the step outside the graph from it.
        self._last_measured: Optional[CallMeasurement] = None
        self.replanned: list = []  # why it was planned again so far (ReplanReason), in order
        # Each plan of this graph so far (its record's index, its compiled function), oldest first.
        self._plans: list[tuple[int, Callable]] = [(plan_index, compiled)]

    def _plan(self, index: Optional[int] = None) -> Any:
        return self._record(index).plan

    def _record(self, index: Optional[int] = None) -> Any:
        """The compile record of the plan running now, or of record ``index``."""
        return self.host.records()[self.plan_index if index is None else index]

    def _note(self, index: int, **facts: Any) -> None:
        """Set what the loop learned of record ``index`` (``CompileRecord``'s fields)."""
        self.host.record_facts(index, **facts)

    def _run(self, args: tuple, kwargs: dict) -> tuple[Any, bool]:
        settled = torch._C._current_graph_task_id() == -1 and torch.is_grad_enabled()
        if settled and self.measurement is not None and self.measurement.backward_ran:
            self._measured(args)
        if settled and self.calls == schedule.PLAIN_COMPILE_CALL and self.plain is None:
            self._compile_plain(args)
        plain = settled and self._runs_plain()
        measuring = settled and self._start_measurement(plain)
        try:
            outputs = (self.plain if plain else self.compiled)(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            if measuring:
                STATE.wait_timing = None
                self.measurement = None
            raise
        if measuring:
            self.measurement.end_forward(outputs)  # type: ignore[union-attr]
            if self.measurement.failed:  # type: ignore[union-attr]
                # Not measurable: never tried again (each try resets the device's peak counter).
                log.info("offload_pass: %s not measured: %s", self.graph_id, self.measurement.failed)
                self.measurement, self.replan = None, None
        return outputs, plain

    def _compile_plain(self, args: tuple) -> None:
        """mode="auto": compile plain Inductor's graph once (the call that
        compiles it runs it, a warm-up kept out of the calls measured)."""
        replan = self.replan
        if replan is None or replan.compile_plain is None or self.plan_index is None:
            return
        plan = self._plan()
        if plan.prediction is None or nothing_to_decide(plan.candidates, plan.budget):
            return  # never checked, or nothing a check would change
        try:
            with preserve_rng_state(), _disable_current_modes():
                self.plain = replan.compile_plain(call_inputs(args))
        except Exception as error:  # measured against its prediction instead, never wrong
            self.plain_not_measured = f"plain Inductor's compile failed ({type(error).__name__}: {error})"
            log.warning("offload_pass: %s: %s; its step is held to the one predicted", self.graph_id,
                        self.plain_not_measured)
            self.replan = dataclasses.replace(replan, compile_plain=None)

    def _runs_plain(self) -> bool:
        """Whether this call runs plain Inductor's graph: the call that
        compiled it, and, while its plan is not checked yet, its turns
        (``schedule.plain_calls``), where the device has room for its peak."""
        if self.plain is None or self.plan_index is None:
            return False
        plan = self._plan()
        if self.calls == schedule.PLAIN_COMPILE_CALL and not self._plain_warm:
            self._plain_warm = self._room_for_plain(plan)
            if self._plain_warm:
                # Said once: these steps offload nothing (the step report counts them apart: plain_inductor).
                log.info(
                    "offload_pass: %s: calls %d and %s of each plan run plain Inductor's graph (mode='auto' "
                    "measures the plan's step against it, on the calls between; the gradients are the same)",
                    self.graph_id, schedule.PLAIN_COMPILE_CALL, schedule.call_ranges(schedule.plain_calls()),
                )
            return self._plain_warm
        turn = self.calls - schedule.first_plain_call()
        if (
            not self._plain_warm or not 0 <= turn < schedule.turn_calls() or not schedule.runs_plain_in_turn(turn)
            or self._record().measured is not None or plan.prediction is None
        ):
            return False
        return self._room_for_plain(plan) if turn == 0 else not self.plain_not_measured

    def _room_for_plain(self, plan: Any) -> bool:
        self.plain_not_measured = self._no_room_for_plain(plan)
        if self.plain_not_measured:
            log.info("offload_pass: %s: plain Inductor's graph not run: %s", self.graph_id, self.plain_not_measured)
        return not self.plain_not_measured

    def _no_room_for_plain(self, plan: Any) -> str:
        """Why the device cannot run the step without offload now ("": it
        can): the peak its plan predicts above this plan's, a quarter more
        for the timeline's error, past the memory free on the device and in
        the caching allocator."""
        device = self.replan.device  # type: ignore[union-attr]
        if device.type != "cuda" or plan.baseline is None or plan.prediction is None:
            return ""
        need = int(max(0, plan.baseline.peak - plan.prediction.peak) * 1.25)
        free = torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        if need <= free:
            return ""
        return (
            f"its peak would take {format_bytes(need)} more than this plan's, and {format_bytes(free)} is free; "
            "the plan is held to the step without offload as predicted"
        )

    def _in_turns(self) -> bool:
        return self._plain_warm and not self.plain_not_measured

    def _start_measurement(self, plain: bool = False) -> bool:
        """``plain``: this call runs plain Inductor's graph. The plan's calls
        are measured from ``schedule.FIRST_MEASURED_CALL`` on, or, in turns
        with plain Inductor's, each graph's calls the turns measure."""
        if self._in_turns():
            due = schedule.measured_in_turn(self.calls - schedule.first_plain_call())
        else:
            due = not plain and self.calls >= schedule.FIRST_MEASURED_CALL
        if (
            self.replan is None or self.measurement is not None or not due or self.plan_index is None
            or self._record().measured is not None or self._plan().prediction is None
        ):
            return False
        alone = self.host.steps.ran_alone(self.plan_index)
        note = "" if alone else "the step runs other graphs, or this one several times"
        self.measurement = CallMeasurement(self.replan.device, self.calls, note, self._last_measured, plain=plain)
        self.measurement.start_forward()
        return True

    def _measured(self, args: tuple) -> None:
        """A measured call's backward has run: keep it; once the plan's
        calls are all measured (and, in turns, plain Inductor's), check the
        prediction against the median. The events are read only then
        (reading waits for the device)."""
        measurement, self.measurement = self.measurement, None
        self._last_measured = measurement
        if measurement.plain:  # type: ignore[union-attr]
            self.plain_calls.append(measurement)  # type: ignore[arg-type]
        else:
            self.measured_calls.append(measurement)  # type: ignore[arg-type]
        in_turns = self._in_turns()
        if len(self.measured_calls) < (schedule.measured_in_turns() if in_turns else schedule.MEASURED_CALLS):
            return
        if in_turns and len(self.plain_calls) < schedule.measured_in_turns():
            return
        results = [m.result() for m in self.measured_calls]
        plain, ratios = None, ()
        if in_turns:
            plain_results = [m.result() for m in self.plain_calls]
            plain, ratios = median_call(plain_results), pair_ratios(results, plain_results)
        self.plain_calls = []
        self._checked(args, median_call(results), plain, ratios)

    def _restart(self, compiled: Callable, plan_index: int) -> None:
        """A new plan runs from this call on, measured anew (this call is its first)."""
        self.compiled, self.plan_index = compiled, plan_index
        self._plans.append((plan_index, compiled))
        self.graph_id = f"graph {plan_index}"
        self.calls = 1
        self.measured_calls, self.plain_calls, self._last_measured = [], [], None
