"""Stage 5b, the compiled graph as Dynamo calls it.

Takes: Inductor's compiled function of one forward/backward pair, the
backend that compiled it (its step tracker and records) and, on CUDA, a
``Replan``: how to compile the same graph again under a calibration. Gives:
``CompiledGraph``, the callable the backend hands to Dynamo. Each call

- checks that the marks in force are those the graph was compiled under
  (``marking/mark_keeping.py``: Dynamo cannot always tell them apart);
- counts the call in the backend's step report (``reporting/step_report.py``);
- on CUDA, unless ``disabled_passes`` names "calibrate": measures three
  calls from call 40 on (40, 41 and 42 where a step calls the graph once;
  eight of calls 17-38 under mode="auto", below; call 1 warms up: autotuning, host
  pools, the lazy backward compile; calls 2-39 let the device's clock
  settle under load: ``FIRST_MEASURED_CALL``) with
  ``runtime/measure.py`` and puts the ``PredictionCheck``
  against the median of them (``calibration.median_call``) in the plan
  (``plan.measured``); each measured call after the first is handed the one
  before it, from whose backward's end the step's time outside the graph
  runs (``MeasuredCall.outside_ms``: what the plan adds it to for the step
  as the loop runs it, ``PredictionCheck.step_as_run_ms``). Where ``calibration.replan_reason`` gives a reason
  (the step time or the peak off by more than ``REPLAN_TOLERANCE``, 3 %,
  or the stalls on copies by more than ``STALL_TOLERANCE``, 1 % of the step;
  under mode="budget", a measured peak over the budget; under mode="auto",
  a measured step over ``max_overhead``: ``calibration.overhead_as_measured``, against
  plain Inductor's graph measured beside the plan where it was; a re-plan's own
  peak off by more than 3 %), the next call with
  gradients on fits a ``Calibration`` (``planning/calibration.py``) and
  compiles the graph once more under it, from that call's inputs: a new
  record whose plan says what it was calibrated by and why
  (``plan.calibration``, ``plan.replan_reason``), itself measured on its
  calls 40 to 42 the same way. Each reason at most once: a graph is planned
  at most twice more;
- under mode="auto" on CUDA, compiles plain Inductor's graph of the same
  Dynamo graph at call ``PLAIN_COMPILE_CALL`` (2), which runs it (a
  warm-up), and runs it in blocks of four calls taking turns with the
  plan's (plain, plan, plan, plain, repeated: plain Inductor 11-14, 23-30,
  39-42), each block's last two measured (``measured_in_turns()``, eight of
  each: plain Inductor 13, 14, 25, 26, 29, 30, 41, 42, the plan 17, 18, 21,
  22, 33, 34, 37, 38), where the device has room for its peak: the check
  holds the plan's step to it (``PredictionCheck.plain``), and a re-plan
  spends ``max_overhead`` of it (``Calibration.plain_work_ms``). In turns,
  both run on the same clock: measured before the plan's, plain Inductor
  ran while the device's clock still fell, and its median moved by up to
  7 % between one process's checks (an H200, 2026-11-26); in blocks, each
  at its own: a call right after the other graph's runs at the clock that
  one left (``TURN_BLOCK_CALLS``);
- under mode="auto", where the plan that will not be planned again measured
  over ``max_overhead`` + 1 % against plain Inductor's graph, runs what
  ``calibration.choose_fallback`` says from then on: the earlier plan of
  the graph measured within that freed the most, or plain Inductor's graph
  (``plan.fallback`` says which; plain Inductor's gets a record).

Also gives ``graph_key`` and the calibrations carried between compiles:
the scales of each calibration whose re-plan compiled (node times, host
time, bandwidth; not the peak offset nor the time between forward and
backward, which belong to the plan measured) are kept for the process
(``REGISTRY.calibrations``; ``REGISTRY.reset()`` drops them) by the graph's
key (its code, its inputs' sizes, strides, dtypes, devices and
``requires_grad``, the device, and what else the scales absorb: see
``backend._carry_settings``). A later compile of the same graph (another
backend, ``torch._dynamo.reset()``, a recompile) plans under them from its
first plan on (``carried_calibration``), and is measured and checked like
any plan: the same measurements behind the same graph's plans, and no
compile spent on a re-plan they already answered.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import logging
import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch
import torch.fx as fx
from torch._dynamo.utils import preserve_rng_state
from torch.utils._python_dispatch import _disable_current_modes

from offload_pass.enums import ReplanReason
from offload_pass.marking.mark import Mark
from offload_pass.marking.mark_keeping import active_mark_key, active_marks, mark_key
from offload_pass.planning.calibration import (
    Calibration, MeasuredCall, MeasuredSet, PredictionCheck, check_prediction, choose_fallback, fit_calibration,
    median_call, nothing_to_decide, overhead_allowed, pair_ratios, predicts_alike, replan_reason,
)
from offload_pass.registry import REGISTRY
from offload_pass.runtime.measure import CallMeasurement
from offload_pass.runtime.state import STATE
from offload_pass.units import format_bytes

if TYPE_CHECKING:
    from offload_pass.backend import OffloadBackend

__all__ = ["CompiledGraph", "Replan", "carried_calibration", "graph_copy", "graph_key", "static_shapes"]

log = logging.getLogger("offload_pass")

# The first call measured and how many are measured: each from the first
# call after the last measured one's backward (calls 40, 41 and 42 where each
# step calls the graph once). Call 1 warms up (autotuning, host pools, the
# lazy backward compile); calls 2-39 let the device settle: after the idle of
# a compile it runs at its highest clock, and under sustained training its
# power cap and its warming lower the clock over about a second (an H200 at
# 700 W, 2026-11-26: the decoder's steps 27.8, 28.4, then 30.5-31.8 ms after
# 10 s idle, 31.5-31.7 from 3 s of load on; 1980 MHz falling to 1515-1635).
# Calls 2-4 measured that first, faster device and predicted the step a user
# sees 4-10 % low; calls 6-8, 2-3 % low. The check is made against the
# median of the three (``median_call``).
FIRST_MEASURED_CALL = 40
MEASURED_CALLS = 3
# mode="auto": the call that compiles plain Inductor's graph and runs it
# (a warm-up).
PLAIN_COMPILE_CALL = 2
# mode="auto": plain Inductor's graph and the plan run in blocks of
# TURN_BLOCK_CALLS calls, by turns of blocks (plain, plan, plan, plain,
# repeated: TURN_BLOCKS blocks, ``runs_plain_in_turn``), over the calls up
# to the plan's last measured one otherwise (FIRST_MEASURED_CALL +
# MEASURED_CALLS - 1); the first SETTLING_CALLS calls of each block are not
# measured (``measured_in_turn``): plain Inductor 13, 14, 25, 26, 29, 30,
# 41, 42, the plan 17, 18, 21, 22, 33, 34, 37, 38. Each graph's blocks sit
# at the same mean call, as often first as second of a pair, so a clock
# still drifting favours neither. Why blocks: a call of one graph right
# after the other's runs at the clock the other left (the device's power
# cap follows its load within a call or two). Decoder on an H200
# (2026-11-27, benchmarks/results/2026-11-27d-h200/pairs20.py):
# plain Inductor run call by call in turns with a plan that waits on its
# copies took 30.4-31.3 ms a call, 31.5-31.9 run alone, and the turns read
# the plans' slowdowns +11.4/+12.4 % and +22.9/+23.7 % where each run
# alone (40 calls) read +7.9/+8.0 % and +15.9/+16.8 %; blocks of 4, the
# last 2 of each measured: +7.6/+8.2 % and +16.4/+18.6 %. Three each,
# one graph after the other (plain 37, 39, 41, the plan 38, 40, 42), read
# two compiles of plain Inductor 1.1 and 1.25 % apart (2026-11-27).
TURN_BLOCK_CALLS = 4
SETTLING_CALLS = 2
TURN_BLOCKS = 8


def turn_calls() -> int:
    """How many calls the turns take (32: calls 11-42)."""
    return TURN_BLOCKS * TURN_BLOCK_CALLS


def measured_in_turns() -> int:
    """How many calls of each graph the turns measure (8)."""
    return TURN_BLOCKS // 2 * (TURN_BLOCK_CALLS - SETTLING_CALLS)


def first_plain_call() -> int:
    """Plain Inductor's first call of the turns (11), where they start."""
    return FIRST_MEASURED_CALL + MEASURED_CALLS - turn_calls()


def runs_plain_in_turn(turn: int) -> bool:
    """Whether call ``first_plain_call() + turn`` of the turns runs plain
    Inductor's graph (blocks plain, plan, plan, plain, repeated)."""
    return (turn // TURN_BLOCK_CALLS) % 4 in (0, 3)


def measured_in_turn(turn: int) -> bool:
    """Whether call ``first_plain_call() + turn`` of the turns is measured:
    not among the first ``SETTLING_CALLS`` of its block."""
    return 0 <= turn < turn_calls() and turn % TURN_BLOCK_CALLS >= SETTLING_CALLS


def plain_measured_calls() -> list[int]:
    """The calls plain Inductor's graph runs measured on (13, 14, 25, 26, 29, 30, 41, 42)."""
    return [first_plain_call() + t for t in range(turn_calls()) if runs_plain_in_turn(t) and measured_in_turn(t)]


def plan_measured_calls() -> list[int]:
    """The plan's calls measured in the turns (17, 18, 21, 22, 33, 34, 37, 38)."""
    return [
        first_plain_call() + t for t in range(turn_calls()) if not runs_plain_in_turn(t) and measured_in_turn(t)
    ]


def _call_ranges(calls: Sequence[int]) -> str:
    """Calls as ranges: "11-14, 23-30, 39-42"."""
    runs: list[list[int]] = []
    for call in calls:
        if runs and call == runs[-1][-1] + 1:
            runs[-1].append(call)
        else:
            runs.append([call])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def plain_calls() -> list[int]:
    """Every call of the turns that runs plain Inductor's graph (11-14, 23-30, 39-42)."""
    return [first_plain_call() + t for t in range(turn_calls()) if runs_plain_in_turn(t)]


def graph_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of Dynamo's graph that Inductor can compile again (compiling
    changes the graph it is given). Dynamo's sources of the inputs, which
    AOTAutograd reads, are node attributes that a deep copy leaves behind."""
    copied = copy.deepcopy(gm)
    for old, new in zip(gm.graph.find_nodes(op="placeholder"), copied.graph.find_nodes(op="placeholder")):
        if hasattr(old, "_dynamo_source"):
            new._dynamo_source = old._dynamo_source  # type: ignore[attr-defined]
    return copied


def static_shapes(gm: fx.GraphModule) -> bool:
    """No input of symbolic size: a graph compiled again from one call's
    inputs serves every call Dynamo sends it."""
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.SymInt):
            return False
        if isinstance(value, torch.Tensor) and any(
            isinstance(d, torch.SymInt) for d in (*value.shape, *value.stride(), value.storage_offset())
        ):
            return False
    return True


def graph_key(gm: fx.GraphModule, example_inputs: Sequence[object], device: torch.device, settings: object) -> str:
    """What a calibration of ``gm`` is carried by: the graph's code, its
    inputs' sizes, strides, dtypes, devices and ``requires_grad``, the
    device, and ``settings`` (what else the calibration's scales absorb)."""
    parts = [gm.code, str(device), repr(settings)]
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            parts.append(f"{tuple(value.shape)} {value.stride()} {value.dtype} {value.device} {value.requires_grad}")
        else:
            parts.append(f"{type(value).__name__} {value!r}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def carried_calibration(key: str) -> Optional[Calibration]:
    """The calibration a first compile of the graph ``key`` plans under (None: none fitted yet)."""
    return REGISTRY.calibrations.get(key)


def _carry(key: str, calibration: Calibration) -> None:
    """Keep ``calibration``'s scales for later compiles of the graph ``key``.
    The peak offsets stay behind: each is what the timeline missed of the
    plan measured, and one plan's offset did not hold for another (HF Llama,
    budget 0.4 on the H200: +6.6 %). So does the time between forward and
    backward, which holds the host's work of the plan measured, and plain
    Inductor's step measured beside it (a later compile measures its own)."""
    REGISTRY.calibrations[key] = dataclasses.replace(
        calibration, peak_offset=0, peak_measured=False, between_ms=0.0, carried=True, plain_work_ms=None,
        partition_offsets=(), source=f"an earlier compile of this graph ({calibration.source})",
    )


def _copies(plan: Any) -> frozenset:
    """The copies a plan runs, as its measured sets are keyed: the saved
    storages it offloads (alike across compiles of one graph)."""
    return frozenset(g.storage for g in plan.groups)


def _remember_measured(key: str, plan: Any, check: PredictionCheck) -> None:
    """mode="auto": keep the copies ``plan`` ran and what they measured
    against plain Inductor's graph beside them (``check``) for the later
    plans and compiles of the graph ``key`` (``calibration.measured_floor``).
    Nothing where no copy ran or plain Inductor was not measured beside it."""
    if not plan.groups or check.measured_overhead is None:
        return
    storages = _copies(plan)
    sets = REGISTRY.measured_sets.setdefault(key, {})
    known = sets.get(storages)
    sets[storages] = (
        MeasuredSet(storages, (check.measured_overhead,), (check.peak,)) if known is None
        else known.again(check.measured_overhead, check.peak)
    )


@dataclasses.dataclass
class Replan:
    """How to plan and compile the graph once more (the backend's closure:
    ``compile(calibration, inputs, plan)``, ``plan`` the one it replaces,
    returns the compiled function, the index of its record and the step
    simulator over its graphs), and the step simulator over the graphs
    measured (``simulate(calibration)``). ``compile`` None: measure, never
    re-plan, ``why_not`` says why."""

    device: torch.device
    simulate: Optional[Callable[[Calibration], Any]]
    compile: Optional[Callable[[Calibration, list, Any], tuple[Callable, int, Optional[Callable]]]]
    why_not: str = ""
    key: str = ""  # graph_key: where a fitted calibration is carried to later compiles ("": nowhere)
    # mode="auto": plain Inductor's compile of the same graph from one call's
    # inputs (None: not measured), which each check measures the plan against.
    compile_plain: Optional[Callable[[list], Callable]] = None


def _allows_alike(plan: Any, calibration: Calibration) -> bool:
    """Whether a plan under ``calibration`` would spend the slowdown
    ``plan`` could (``plan.overhead_allowed``, within 0.1 %): mode="auto"
    with plain Inductor measured anew holds the selection to that
    measurement, a limit a calibration predicting alike does not show."""
    if plan.max_overhead is None or plan.baseline is None:
        return True
    allowed = overhead_allowed(plan.max_overhead, calibration, plan.baseline)
    return abs(allowed - (plan.overhead_allowed or plan.max_overhead)) <= 1e-3


def _peak(plan: Any) -> Optional[int]:
    """A plan's peak: measured where it was (``PredictionCheck.peak``), else predicted."""
    if plan.measured is not None:
        return plan.measured.peak
    return None if plan.prediction is None else plan.prediction.peak


def _frees_by_design(plan: Any) -> bool:
    """Whether a plan frees anything by what it chose: copies, or a
    recompute partition (``calibration.choose_fallback``)."""
    return bool(plan.groups) or plan.recompute_level is not None


def _frees_more(again: Any, plan: Any) -> bool:
    """Whether the plan ``again`` (planned again under a calibration whose
    peak offset ``plan``'s measured peak set) predicts a lower peak than
    ``plan`` had (``_peak``)."""
    before = _peak(plan)
    return again.prediction is not None and before is not None and again.prediction.peak < before


def _under(marks: Sequence[Mark]) -> str:
    return f"inside {marks[-1].source}" if marks else "outside any mark"


def _inputs(args: tuple) -> list:
    """The graph's inputs of one call (Dynamo hands them one by one, or as
    one list to a boxed function)."""
    return list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)


class CompiledGraph:
    """What Dynamo calls for one compiled graph (see the module docstring).
    ``plan_index``: the graph's record in ``backend.records`` (None: no
    backward graph, nothing planned); ``replan``: None off CUDA or with
    calibration disabled."""

    def __init__(
        self,
        backend: "OffloadBackend",
        compiled: Callable,
        active: Sequence[Mark],
        plan_index: Optional[int],
        replan: Optional[Replan] = None,
    ) -> None:
        self.backend = backend
        self.compiled = compiled
        self.plan_index = plan_index
        self.graph_id = "a graph" if plan_index is None else f"graph {plan_index}"
        self.replan = replan
        self.calls = 0
        self.measurement: Optional[CallMeasurement] = None
        self.measured_calls: list[CallMeasurement] = []  # finished, read at the check
        # mode="auto": plain Inductor's compiled graph (made at call
        # PLAIN_COMPILE_CALL, which warms it up), its measured calls before
        # the plan's, and why it is not measured (""; it is).
        self.plain: Optional[Callable] = None
        self.plain_calls: list[CallMeasurement] = []
        # The last measured call of either graph: a call measured right
        # after it measures the time outside the graph from its backward's end.
        self._last_measured: Optional[CallMeasurement] = None
        self.plain_not_measured = ""
        self._plain_warm = False
        self._key = mark_key(active)
        self._compiled_under = _under(active)
        self._warned = False
        self._boxed_call = getattr(compiled, "_boxed_call", False)
        self.replanned: list[ReplanReason] = []  # why it was planned again so far, in order
        # Each plan of this graph so far (its record's index, its compiled
        # function), oldest first: what mode="auto" may fall back to.
        self._plans: list[tuple[int, Callable]] = [] if plan_index is None else [(plan_index, compiled)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_marks()
        self.calls += 1
        # Neither measured nor planned again inside a backward (activation
        # checkpointing runs forwards again there: a new plan between a
        # forward and its recompute would save other tensors), nor under
        # no_grad (the compile would make an inference graph).
        settled = torch._C._current_graph_task_id() == -1 and torch.is_grad_enabled()
        if settled and self.measurement is not None and self.measurement.backward_ran:
            self._measured(args)
        if settled and self.calls == PLAIN_COMPILE_CALL and self.plain is None:
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
                # Not measurable (no output leads to its backward): never
                # tried again, each try resets the device's peak counter.
                log.info("offload_pass: %s not measured: %s", self.graph_id, self.measurement.failed)
                self.measurement, self.replan = None, None
        if self.plan_index is not None:
            self.backend._steps.forward_called(
                self.plan_index, outputs, self.backend.plans, self.backend._warn_unoffloaded_marks, plain
            )
        return outputs

    def _check_marks(self) -> None:
        """A frame compiled on its own after a graph break can be reused under
        marks other than those it was compiled for, where Dynamo cannot tell
        them apart (see marking/mark_keeping.py): say so, once, when it
        happens. The gradients are right either way; only what is offloaded
        differs from the marks."""
        if self._warned or active_mark_key() == self._key:
            return
        self._warned = True
        warnings.warn(
            f"offload_pass: {self.graph_id} was compiled after a graph break {self._compiled_under} and "
            f"now runs {_under(active_marks())}: "
            "Dynamo cannot keep compiled frames apart by mark here (a function called "
            "from a marked module and from an unmarked one, with a graph break inside), "
            "so it offloads what its plan says, not what the marks here say. Mark every "
            "module that runs this code alike, or move the graph break out of it "
            "(gradients are unaffected).",
            RuntimeWarning,
            stacklevel=3,
        )

    def _compile_plain(self, args: tuple) -> None:
        """mode="auto": compile plain Inductor's graph once (the call that
        compiles it runs it, a warm-up: its lazy backward compile and
        autotuning stay out of the calls measured)."""
        replan = self.replan
        if replan is None or replan.compile_plain is None or self.plan_index is None:
            return
        plan = self.backend.plans[self.plan_index]
        if plan.prediction is None or nothing_to_decide(plan.candidates, plan.budget):
            return  # never checked, or nothing a check would change
        try:
            with preserve_rng_state(), _disable_current_modes():
                self.plain = replan.compile_plain(_inputs(args))
        except Exception as error:  # measured against its prediction instead, never wrong
            self.plain_not_measured = f"plain Inductor's compile failed ({type(error).__name__}: {error})"
            log.warning("offload_pass: %s: %s; its step is held to the one predicted", self.graph_id,
                        self.plain_not_measured)
            self.replan = dataclasses.replace(replan, compile_plain=None)

    def _runs_plain(self) -> bool:
        """Whether this call runs plain Inductor's graph: the call that
        compiled it, and, while its plan is not checked yet, its turns
        (``plain_calls()``: 11-14, 23-30, 39-42), where the device has room
        for the step without offload's peak."""
        if self.plain is None or self.plan_index is None:
            return False
        plan = self.backend.plans[self.plan_index]
        if self.calls == PLAIN_COMPILE_CALL and not self._plain_warm:
            self._plain_warm = self._room_for_plain(plan)
            if self._plain_warm:
                # Said once: these steps offload nothing (the step report counts them apart: plain_inductor).
                log.info(
                    "offload_pass: %s: calls %d and %s of each plan run plain Inductor's graph (mode='auto' "
                    "measures the plan's step against it, on the calls between; the gradients are the same)",
                    self.graph_id, PLAIN_COMPILE_CALL, _call_ranges(plain_calls()),
                )
            return self._plain_warm
        turn = self.calls - first_plain_call()
        if (
            not self._plain_warm or not 0 <= turn < turn_calls() or not runs_plain_in_turn(turn)
            or plan.measured is not None or plan.prediction is None
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

    def _start_measurement(self, plain: bool = False) -> bool:
        """``plain``: this call runs plain Inductor's graph (the warm-up
        call is not measured). The plan's calls are measured from
        ``FIRST_MEASURED_CALL`` on, or, where plain Inductor's take turns
        with them, each graph's calls the turns measure (``measured_in_turn``)."""
        if self._plain_warm and not self.plain_not_measured:
            due = measured_in_turn(self.calls - first_plain_call())
        else:
            due = not plain and self.calls >= FIRST_MEASURED_CALL
        if (
            self.replan is None or self.measurement is not None or not due
            or self.plan_index is None or self.backend.plans[self.plan_index].measured is not None
            or self.backend.plans[self.plan_index].prediction is None
        ):
            return False
        alone = self.backend._steps.ran_alone(self.plan_index)
        note = "" if alone else "the step runs other graphs, or this one several times"
        self.measurement = CallMeasurement(self.replan.device, self.calls, note, self._last_measured, plain=plain)
        self.measurement.start_forward()
        return True

    def _measured(self, args: tuple) -> None:
        """A measured call's backward has run: keep it; once the plan's
        calls are all measured (``MEASURED_CALLS``; in turns with plain
        Inductor's, ``measured_in_turns()`` of each), check the prediction
        against the median (and the plan's step against plain Inductor's
        median, where its calls were measured). The events are read only
        then (reading waits for the device: a call right after the wait
        would start on an idle device, unlike a step the host issues ahead)."""
        measurement, self.measurement = self.measurement, None
        self._last_measured = measurement
        if measurement.plain:  # type: ignore[union-attr]
            self.plain_calls.append(measurement)  # type: ignore[arg-type]
        else:
            self.measured_calls.append(measurement)  # type: ignore[arg-type]
        in_turns = self._plain_warm and not self.plain_not_measured
        if len(self.measured_calls) < (measured_in_turns() if in_turns else MEASURED_CALLS):
            return
        if in_turns and len(self.plain_calls) < measured_in_turns():
            return
        results = [m.result() for m in self.measured_calls]
        plain, ratios = None, ()
        if in_turns:
            plain_results = [m.result() for m in self.plain_calls]
            plain, ratios = median_call(plain_results), pair_ratios(results, plain_results)
        self.plain_calls = []
        self._checked(args, median_call(results), plain, ratios)

    def _checked(
        self, args: tuple, measured: MeasuredCall, plain: Optional[MeasuredCall] = None, ratios: tuple = ()
    ) -> None:
        """Check the prediction against ``measured`` (and, mode="auto", the
        plan's step against plain Inductor's graph measured in turns with
        it: ``plain``, its median call, ``ratios``, each pair's) and, where
        ``calibration.replan_reason`` says so, plan once more (from this
        call's inputs)."""
        plan = self.backend.plans[self.plan_index]  # type: ignore[index]
        check = dataclasses.replace(check_prediction(plan.prediction, measured), plain=plain, pair_ratios=ratios)
        plan.measured = check
        log.info("offload_pass: %s %s", plan.graph_id, check.describe())
        replan = self.replan
        if replan.key and plan.max_overhead is not None:
            _remember_measured(replan.key, plan, check)
        unspent = None if plan.overhead_allowed is None or plan.predicted_overhead is None else (
            plan.overhead_allowed - plan.predicted_overhead
        )
        reason = replan_reason(
            check, plan.budget, self.replanned, plan.candidates, plan.max_overhead, plan.baseline, len(plan.groups),
            unspent,
        )
        if reason is None or replan.compile is None or replan.simulate is None:
            if reason is not None:
                why = replan.why_not or "no step simulator was kept for its graphs"
                log.info("offload_pass: %s not planned again (%s): %s", plan.graph_id, reason, why)
            elif not check.within() and nothing_to_decide(plan.candidates, plan.budget):
                log.info("offload_pass: %s not planned again: it has nothing a plan could copy", plan.graph_id)
            elif not check.within() and self.replanned:
                log.info(
                    "offload_pass: %s not planned again: planned again %d times already (%s)",
                    plan.graph_id, len(self.replanned), ", ".join(self.replanned),
                )
            self.replan = dataclasses.replace(replan, compile=None, simulate=None)
            self._fall_back(plan, plain)
            return
        calibration = fit_calibration(
            check, replan.simulate, f"{plan.graph_id}, {measured.describe_call()}", plan.calibration, plan.baseline,
            functools.partial(replan.simulate, runtime_ops=False), plan.recompute_level,
        )
        if plain is not None:
            calibration = dataclasses.replace(calibration, plain_work_ms=check.plain_work_ms)
        if predicts_alike(replan.simulate(calibration), check.predicted) and _allows_alike(plan, calibration):
            log.info(
                "offload_pass: %s not planned again (%s): %s predicts this plan as it was predicted, so it would "
                "plan the same", plan.graph_id, reason, calibration.describe(),
            )
            self.replan = dataclasses.replace(replan, compile=None, simulate=None)
            self._fall_back(plan, plain)
            return
        self.replanned.append(reason)
        try:
            # As Dynamo compiles: the random state as it was (kernel timing
            # and autotuning draw numbers), the user's modes (a FlopCounterMode,
            # a device mode) off.
            with preserve_rng_state(), _disable_current_modes():
                compiled, plan_index, simulate = replan.compile(calibration, _inputs(args), plan)
            if plan_index is None:
                raise RuntimeError("the compile planned no forward/backward pair")
        except Exception as error:  # the plan runs on (or what it falls back to), never wrong
            self.replan = dataclasses.replace(replan, compile=None, simulate=None)
            fell_back = self._fall_back(plan, plain)
            log.warning(
                "offload_pass: %s could not be planned again (%s: %s)%s",
                plan.graph_id, type(error).__name__, error, "" if fell_back else "; it keeps its plan",
            )
            return
        again = self.backend.plans[plan_index]
        again.replan_reason = reason
        if replan.key:  # carried only once it compiled: a later first compile has no fallback
            _carry(replan.key, calibration)
        instead = self._plan_instead(again, plan, reason)
        if instead is not None:
            index, compiled_before, again.fallback = instead
            log.info("offload_pass: %s %s", again.graph_id, again.fallback)
            self.replan = dataclasses.replace(replan, compile=None, simulate=None)
            self.compiled, self.plan_index, self.graph_id = compiled_before, index, f"graph {index}"
            return
        log.info(
            "offload_pass: %s planned again as graph %d (%s): %s",
            plan.graph_id, plan_index, reason, calibration.describe(),
        )
        self.replan = dataclasses.replace(replan, simulate=simulate)
        self.compiled, self.plan_index = compiled, plan_index
        self._plans.append((plan_index, compiled))
        self.graph_id = f"graph {plan_index}"
        self.calls = 1  # this call is the new graph's first
        self.measured_calls, self.plain_calls, self._last_measured = [], [], None

    def _plan_instead(self, again: Any, plan: Any, reason: ReplanReason) -> Optional[tuple[int, Callable, str]]:
        """The plan that runs in place of the re-plan ``again`` of ``plan``
        (the one running now), compiled and measured already: its record's
        index, its compiled function and why (``again.fallback``). None:
        ``again`` runs."""
        earlier = self._earlier_plan_alike(again)
        if earlier is not None:
            # The re-plan chose copies a plan of this graph ran and measured
            # within max_overhead (a measured floor, mostly): measuring the
            # copies once more would take another round of turns with plain
            # Inductor's graph (calls that offload nothing) for one sample.
            index, compiled = earlier
            return index, compiled, (
                f"planned again with the copies graph {index} ran, measured "
                f"{self.backend.plans[index].measured.measured_overhead:+.1%} against plain Inductor's graph, "
                f"within max_overhead: runs graph {index}'s plan instead of measuring them again"
            )
        if reason == ReplanReason.ROOM and not _frees_more(again, plan):
            # Spending the room is worth a plan only for a lower peak: the
            # plan measured within runs on (never planned again).
            return self.plan_index, self.compiled, (  # type: ignore[return-value]
                f"planned again for the room under max_overhead, but predicts no lower peak than {plan.graph_id} "
                f"({format_bytes(again.prediction.peak)} against {format_bytes(_peak(plan) or 0)}): "
                f"runs {plan.graph_id}'s plan instead"
            )
        return None

    def _earlier_plan_alike(self, again: Any) -> Optional[tuple[int, Callable]]:
        """mode="auto": an earlier plan of this graph (``self._plans``,
        newest first) that ran the copies ``again`` chose, measured within
        ``again.max_overhead`` against plain Inductor's graph beside it (no
        noise allowed, as ``calibration.measured_floor``) and as predicted
        (``PredictionCheck.within``: a plan whose prediction was off is the
        one the re-plan's step model corrects): its record's index and
        compiled function."""
        if again.max_overhead is None or not again.groups:
            return None
        copies = _copies(again)
        for index, compiled in reversed(self._plans):
            plan = self.backend.plans[index]
            check = plan.measured
            if (
                check is not None and check.measured_overhead is not None
                and check.measured_overhead <= again.max_overhead and check.within()
                and _copies(plan) == copies
            ):
                return index, compiled
        return None

    def _fall_back(self, plan: Any, plain: Optional[MeasuredCall]) -> bool:
        """mode="auto": the plan running now (``plan``) will not be planned
        again; where it measured over ``max_overhead`` against plain
        Inductor's graph (``plain``: measured beside it), run what
        ``calibration.choose_fallback`` says instead from this call on (the one
        that checked it):
        an earlier plan of this graph measured within, or plain Inductor's
        graph (a record of its own: ``plan.plain_inductor_plan``). The
        plan says so (``plan.fallback``); the step report counts what runs.
        Returns whether it fell back."""
        if plan.max_overhead is None:
            return False
        plain_runs = self.plain is not None and plain is not None
        fallback = choose_fallback(
            [(p.graph_id, p.measured, _frees_by_design(p)) for p in (self.backend.plans[i] for i, _ in self._plans)],
            plan.max_overhead, plain_runs,
        )
        if fallback is None:
            return False
        plan.fallback = fallback.reason
        if fallback.plain:
            check = check_prediction(plan.baseline, plain)  # type: ignore[arg-type]
            index, compiled = self.backend._record_plain_inductor(self.plan_index, fallback.reason, check), self.plain
        else:
            index, compiled = self._plans[fallback.plan]  # type: ignore[index]
        log.info("offload_pass: %s %s (graph %d from this call on)", plan.graph_id, fallback.reason, index)
        self.compiled, self.plan_index, self.graph_id = compiled, index, f"graph {index}"
        return True
