"""Stage 5, the backend: wires markers -> annotations -> plan -> rewrite.

Takes: the Dynamo graph and example inputs (a ``torch.compile`` backend call).
Gives: Inductor's compiled function, compiled with a partitioner that runs
PyTorch's min-cut partitioner, plans from the saved set it produced, and
rewrites both graphs before Inductor sees them. The backend keeps a
``CompileRecord`` of each compile in ``backend.records`` (newest last; the
plans alone in ``backend.plans``).

Caching: the partitioner is an Inductor ``CustomPartitionerFn`` whose uuid
hashes this package's sources, the config and the marks of the graph. The
AOTAutograd cache is turned off for our compiles, because a hit there would
skip the partitioner and leave ``backend.records`` without the record; Inductor's
FX graph cache stays on and keys on the rewritten graphs themselves.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import glob
import logging
import os
import time
import warnings
import weakref
from collections import Counter
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomPartitionerFn, get_hash_for_files

from offload_pass import runtime  # noqa: F401  (registers the ops)
from offload_pass.annotation.annotations import TensorMarkPass, annotate_requests, marks_digest
from offload_pass.config import OffloadConfig
from offload_pass.enums import Mode, PassName
from offload_pass.marking.mark import Mark
from offload_pass.marking.mark_keeping import active_marks
from offload_pass.marking.markers import offload_marked_modules
from offload_pass.registry import REGISTRY
from offload_pass.reporting.graph_text import render_graph
from offload_pass.planning.lifetimes import copy_lifetimes
from offload_pass.planning.plan import OffloadPlan, plain_inductor_plan, plan_saved_tensors
from offload_pass.planning.calibration import (
    Calibration, MeasuredSet, PredictionCheck, measured_floor, overhead_allowed,
)
from offload_pass.planning.cost_model import device_profile
from offload_pass.planning.recompute import (
    RECOMPUTE_LEVELS, Trial, choose_trial, levels_out_of_reach, levels_to_retry, newly_saved, recompute_entries,
    saved_again_above, search_goes_on,
)
from offload_pass.planning.scheduling import Schedule, budget_bytes, check_budget, device_of, schedule_copies
from offload_pass.planning.step_model import StepPrediction, node_times, predict_step
from offload_pass.reporting.compile_record import CompileRecord, GraphTexts
from offload_pass.compiled_graph import (
    CompiledGraph, Replan, carried_calibration, graph_copy, graph_key, static_shapes,
)
from offload_pass.rewriting.invariants import check_rewrite
from offload_pass.rewriting.kernel_order import graph_order_pass
from offload_pass.annotation.mlp_roles import mlp_roles
from offload_pass.marking.naming import frame_root_name, marked_roots
from offload_pass.rewriting.rewrite import rewrite_graphs
from offload_pass.reporting.step_report import StepReport, StepTracker, modules_without_offload
from offload_pass.units import format_bytes, mib
from offload_pass.views import retrace_view_vals
from offload_pass.planning.saved_set import (
    SavedTensor, check_requested_roles, collect_saved_tensors, tensor_bytes, traced_modules,
)
from offload_pass.planning.timeline import simulate_step

__all__ = ["OffloadBackend", "make_backend", "offload_backend"]

log = logging.getLogger("offload_pass")

_SOURCES = tuple(sorted(glob.glob(os.path.join(os.path.dirname(__file__), "**", "*.py"), recursive=True)))


def _op_counts(gm: fx.GraphModule) -> Counter:
    return Counter(
        str(n.target) for n in gm.graph.nodes if n.op == "call_function"
    )


def _partitioner_uuid(uuid: object) -> object:
    """What an ``_OffloadPartitioner`` pickles to (a cache key, never run)."""
    return uuid


class _OffloadPartitioner(CustomPartitionerFn):
    def __init__(
        self,
        backend: "OffloadBackend",
        digest: str,
        active: tuple[Mark, ...],
        frame_root: Optional[str],
        calibration: Optional[Calibration] = None,
        keep_simulator: bool = False,
        prior: Optional[OffloadPlan] = None,
        floor: Optional[MeasuredSet] = None,
    ) -> None:
        self.backend = backend
        self.digest = digest
        self.active = active
        self.frame_root = frame_root
        self.calibration = calibration
        self.keep_simulator = keep_simulator
        self.prior = prior
        self.floor = floor

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any):
        return self.backend._partition(
            gm, joint_inputs, self.active, self.frame_root, self.calibration, self.keep_simulator, self.prior,
            self.floor, **kwargs,
        )

    def uuid(self) -> object:
        prior = None if self.prior is None else (
            self.prior.recompute_level, self.prior.recompute_trials, self.prior.recompute_skipped
        )
        return (
            get_hash_for_files(_SOURCES), self.backend.config.cache_key(), self.digest, repr(self.calibration),
            repr(prior), None if self.floor is None else sorted(self.floor.storages),
        )

    def __reduce__(self):
        # Inductor's FX graph cache pickles its config, this object among it,
        # into the cache key: only what the uuid says may count (the backend
        # holds every plan so far and the models it compiled).
        return (_partitioner_uuid, (self.uuid(),))


class OffloadBackend:
    """A ``torch.compile`` backend that offloads marked activations.

    ``torch.compile(model, backend=OffloadBackend())``; ``records`` holds a
    ``CompileRecord`` of every forward/backward pair it compiled, newest last,
    and ``plans`` their plans. ``keep_graphs=True`` keeps the texts of the
    graphs before and after the rewrite in each record (graph-diff reports,
    golden tests).
    """

    _is_offload_backend = True

    def __init__(self, config: Optional[OffloadConfig] = None, *, keep_graphs: bool = False) -> None:
        if config is not None and not isinstance(config, OffloadConfig):
            raise TypeError(f"config must be an OffloadConfig, got {type(config).__name__}")
        if not isinstance(keep_graphs, bool):
            raise TypeError(f"keep_graphs must be True or False, got {keep_graphs!r}")
        self.config = OffloadConfig() if config is None else config
        self.keep_graphs = keep_graphs
        self.records: list[CompileRecord] = []
        self._steps = StepTracker()
        # The marked models this backend compiled graphs of (naming.marked_roots).
        self._roots: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        # Record index -> the step simulator over that compile's graphs
        # (calibration.fit_calibration), kept until its graph is measured.
        self._simulators: dict[int, Callable[[Calibration], StepPrediction]] = {}

    def __repr__(self) -> str:
        return f"OffloadBackend({self.config}" + (", keep_graphs=True)" if self.keep_graphs else ")")

    @property
    def plans(self) -> list[OffloadPlan]:
        """The plan of every compile, newest last."""
        return [r.plan for r in self.records]

    def __call__(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[object],
        mode: Optional[str] = None,
        options: Optional[dict[str, Any]] = None,
    ) -> Callable:
        """``mode`` / ``options`` are torch.compile's, passed on to Inductor."""
        active = active_marks()
        patches = _inductor_patches(mode, options)
        compile_graph = functools.partial(
            self._compile, patches, active, marks_digest(gm) + repr(active), frame_root_name(gm)
        )
        self._roots.update(marked_roots(gm))
        device = _cuda_device(example_inputs)
        calibrate = device is not None and PassName.CALIBRATE not in self.config.disabled_passes
        pristine, why_not = (_pristine_copy(gm) if calibrate else (None, ""))
        # A calibration an earlier compile of this graph fitted: planned under from the first plan on.
        key = graph_key(gm, example_inputs, device, _carry_settings(self.config, patches, device)) if calibrate else ""
        carried = carried_calibration(key) if key else None
        compiled, plan_index, simulate = compile_graph(
            gm, example_inputs, carried, keep_simulator=pristine is not None, floor=self._measured_floor(key)
        )
        if carried is not None and plan_index is not None:
            log.info("offload_pass: graph %d planned under the calibration of an earlier compile, %s",
                     plan_index, carried.describe())
        if plan_index is None or not calibrate:
            return CompiledGraph(self, compiled, active, plan_index)
        replan = Replan(
            device,
            simulate,
            None if pristine is None else lambda calibration, inputs, prior: compile_graph(
                graph_copy(pristine), inputs, calibration, keep_simulator=True, prior=prior,
                floor=self._measured_floor(key),
            ),
            why_not,
            key,
            # mode="auto" holds each plan to plain Inductor's compile of the same graph, measured beside it.
            None if pristine is None or self.config.mode != Mode.AUTO else functools.partial(
                _compile_plain, pristine, _user_patches(mode, options)
            ),
        )
        return CompiledGraph(self, compiled, active, plan_index, replan)

    def _measured_floor(self, key: str) -> Optional[MeasuredSet]:
        """mode="auto": the set of copies of the graph ``key`` measured
        within max_overhead that freed the most, as its plans ran so far in
        this process (``calibration.measured_floor``; None: none, or
        another mode)."""
        if not key or self.config.mode != Mode.AUTO:
            return None
        return measured_floor(list(REGISTRY.measured_sets.get(key, {}).values()), self.config.max_overhead)

    def _compile(
        self,
        patches: dict[str, Any],
        active: tuple[Mark, ...],
        digest: str,
        frame_root: Optional[str],
        gm: fx.GraphModule,
        example_inputs: Sequence[object],
        calibration: Optional[Calibration],
        keep_simulator: bool = False,
        prior: Optional[OffloadPlan] = None,
        floor: Optional[MeasuredSet] = None,
    ) -> tuple[Callable, Optional[int], Optional[Callable[[Calibration], StepPrediction]]]:
        """Inductor's compile with this pass as its partitioner; returns the
        compiled function, the index of its record (None: no backward
        graph, nothing to offload or report) and, with ``keep_simulator``,
        the step simulator over its graphs (None without predictions).
        ``prior``: a re-plan's, the plan it replaces; ``floor``: mode="auto",
        the set of copies measured within max_overhead that a selection
        predicting a higher peak gives way to (``_measured_floor``)."""
        from torch._inductor.compile_fx import compile_fx

        patches = dict(patches)
        patches.update({
            "custom_partitioner_fn": _OffloadPartitioner(
                self, digest, active, frame_root, calibration, keep_simulator, prior, floor
            ),
            "joint_custom_pre_pass": TensorMarkPass(),
            # The rewrite's order, which the plan's predictions assume, must
            # survive Inductor's fusion (``kernel_order``'s docstring says how
            # it would not). A scheduler pass the user set runs first: its
            # fusions stay, its order gives way to the graph's where the
            # graph holds runtime ops.
            "_post_fusion_custom_pass": graph_order_pass(
                patches.get("_post_fusion_custom_pass", inductor_config._post_fusion_custom_pass)
            ),
        })
        planned = len(self.records)
        try:
            with torch._functorch.config.patch(enable_autograd_cache=False):
                compiled = compile_fx(gm, example_inputs, config_patches=patches)
        except BaseException:
            # No compiled graph: no record of one either.
            for index in range(planned, len(self.records)):
                self._simulators.pop(index, None)
            del self.records[planned:]
            raise
        if len(self.records) == planned:
            return compiled, None, None
        return compiled, len(self.records) - 1, self._simulators.pop(len(self.records) - 1, None)

    def _record_plain_inductor(self, plan_index: int, fallback: str, measured: PredictionCheck) -> int:
        """mode="auto" fell back from the plan of record ``plan_index`` to
        plain Inductor's compile of its graph (``fallback``: why;
        ``measured``: plain Inductor's graph measured): a record of that
        compile, nothing offloaded (``plan.plain_inductor_plan``). Returns
        its index."""
        record = self.records[plan_index]
        plan = plain_inductor_plan(record.plan, f"graph {len(self.records)}", fallback, measured)
        self._record(CompileRecord(plan, record.timeline_before, record.timeline_before))
        return len(self.records) - 1

    def _warn_unoffloaded_marks(self, report: StepReport) -> None:
        _warn_unoffloaded_marks(report, list(self._roots))

    def last_step(self) -> Optional[StepReport]:
        """The latest training step over every graph that ran in it (graph
        breaks make several): graphs and calls, bytes offloaded, totals per
        module. None before the first call."""
        return self._steps.report(self.plans)

    def _partition(
        self,
        joint: fx.GraphModule,
        joint_inputs: Sequence[object],
        active: tuple[Mark, ...],
        frame_root: Optional[str],
        calibration: Optional[Calibration],
        keep_simulator: bool,
        prior: Optional[OffloadPlan] = None,
        floor: Optional[MeasuredSet] = None,
        **kwargs: Any,
    ):
        """The pass, stage by stage. ``frame_root``: the qualified name of the
        module this graph's frame is the forward of, where known
        (``naming.frame_root_name``). ``calibration``: the re-plan's
        (``compiled_graph.py``), or the first time one carried from an
        earlier compile of the graph (None: none); ``prior``: the plan a
        re-plan replaces; ``floor``: mode="auto", the set of copies measured
        within max_overhead (``_measured_floor_attempt``). ``keep_simulator``:
        keep the step simulator over the graphs returned, for a calibration."""
        annotate_requests(joint.graph, active[-1] if active else None)
        graph_id = f"graph {len(self.records)}"
        prefix = frame_root if frame_root is not None else ((active[-1].qualname or "") if active else "")
        partition = functools.partial(
            _partition_and_plan, self, joint, joint_inputs, kwargs, graph_id, prefix, calibration
        )
        attempt = partition(None, None)
        budget = None if attempt.plan.baseline is None else budget_bytes(self.config, attempt.plan.baseline)
        # Recompute is tried where offload alone misses the budget, and where
        # it reaches it only at a cost: the fastest within it is kept.
        recompute = (
            budget is not None
            and (attempt.plan.prediction.peak > budget or (attempt.plan.predicted_overhead or 0.0) > 1e-9)
            and PassName.RECOMPUTE not in self.config.disabled_passes
        )
        if recompute:
            skip: tuple[Trial, ...] = ()
            if prior is not None and calibration is not None:
                skip = levels_out_of_reach(
                    prior.recompute_trials + prior.recompute_skipped, prior.recompute_level, budget,
                    calibration.offset_for,
                )
            attempt = _recompute_for_budget(attempt, partition, budget, skip, _forward_inputs_bytes(joint))
        if self.config.mode == Mode.AUTO:
            attempt = _auto_within_overhead(attempt, partition, attempt.plan.overhead_allowed)
            attempt = _measured_floor_attempt(attempt, partition, floor)
        check_budget(attempt.plan, budget, recompute)
        self._record(attempt.record)
        if keep_simulator and attempt.simulation is not None:
            # Inductor edits the graphs it is handed (view_to_reshape, its
            # post-grad passes): the simulator keeps copies of them as planned.
            self._simulators[len(self.records) - 1] = functools.partial(
                _simulate, copy.deepcopy(attempt.fw_gm), copy.deepcopy(attempt.bw_gm), *attempt.simulation
            )
        return attempt.fw_gm, attempt.bw_gm

    def _rewrite(
        self, fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, schedule: Schedule, lifetimes: dict, graph_id: str
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        """The rewrite and the invariant check, unless disabled by name."""
        if PassName.OFFLOAD in self.config.disabled_passes:
            schedule.plan.rewritten = False
            return fw_gm, bw_gm
        counts = (_op_counts(fw_gm), _op_counts(bw_gm))
        fw_gm, bw_gm = rewrite_graphs(
            fw_gm, bw_gm, schedule.plan, lifetimes, self.config, schedule.reload_before, schedule.release_after
        )
        if PassName.INVARIANTS not in self.config.disabled_passes:
            check_rewrite(fw_gm, bw_gm, graph_id)
        log.debug(
            "offload_pass: %s rewrite added forward %s, backward %s",
            graph_id, dict(_op_counts(fw_gm) - counts[0]), dict(_op_counts(bw_gm) - counts[1]),
        )
        return fw_gm, bw_gm

    def _record(self, record: CompileRecord) -> None:
        """Keep the record; log what was done."""
        self.records.append(record)
        plan = record.plan
        log.info(
            "offload_pass: %s offloads %d saved tensors (%.1f MiB), keeps %.1f MiB",
            plan.graph_id, len(plan.offloaded), mib(plan.offloaded_bytes), mib(plan.kept_bytes),
        )
        if plan.kept_without_gain:
            log.info(
                "offload_pass: %s kept %d marked tensors that would not lower the predicted peak "
                "(keep_if_no_gain); make_backend(keep_if_no_gain=False) offloads them anyway",
                plan.graph_id, len(plan.kept_without_gain),
            )


@dataclasses.dataclass
class _Attempt:
    """One partition of the joint graph, planned and rewritten."""

    fw_gm: fx.GraphModule
    bw_gm: fx.GraphModule
    saved: list[SavedTensor]
    record: CompileRecord
    # What the step simulator needs besides the graphs, to predict them
    # under a calibration (_simulate): the timeline, the uncalibrated node
    # times and device profile; None without predictions.
    simulation: Optional[tuple] = None

    @property
    def plan(self) -> OffloadPlan:
        return self.record.plan


def _partition_and_plan(
    backend: OffloadBackend,
    joint: fx.GraphModule,
    joint_inputs: Sequence[object],
    kwargs: dict,
    graph_id: str,
    prefix: str,
    calibration: Optional[Calibration],
    level: Optional[float],
    reference: Optional[StepPrediction],
    seen: Optional[set] = None,
    max_copies: Optional[int] = None,
    select_within: Optional[float] = None,
    forced: Optional[frozenset[str]] = None,
) -> Optional[_Attempt]:
    """Partition (under PyTorch's ``activation_memory_budget=level``, None:
    as configured), plan, schedule and rewrite; every prediction under
    ``calibration`` where there is one. ``reference``: the predicted
    step of the first partition, the "without offload" every budget and
    report is measured from (None: this is the first). ``seen``: the saved
    sets planned already; a partition saving one of them again is not
    planned twice (None returned). ``max_copies``: mode="auto", keep the
    first that many copies the selection chose; ``select_within``: the
    slowdown the selection chooses within (None: the one allowed);
    ``forced``: mode="auto", copy these storages and no other (None: the
    selection chooses)."""
    config = backend.config
    patch = {} if level is None else {"activation_memory_budget": level}
    with torch._functorch.config.patch(**patch):
        fw_gm, bw_gm = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    saved = _saved_set(fw_gm, bw_gm, graph_id, kwargs.get("static_lifetime_input_indices") or (), prefix)
    if seen is not None:
        key = frozenset(t.name for t in saved)
        if key in seen:
            return None
        seen.add(key)
    plan = plan_saved_tensors(saved, config, graph_id)
    modules = traced_modules(fw_gm, prefix)
    before = (render_graph(fw_gm), render_graph(bw_gm)) if backend.keep_graphs else None
    count_cpu = _runs_on_cpu(fw_gm, graph_id)
    timeline_before = simulate_step(fw_gm, bw_gm, count_cpu)
    # A graph with nothing to copy never measures the device (mode="budget"
    # does: its budget is a fraction of the predicted peak); it is predicted
    # only when the speeds are known already.
    device = device_of(fw_gm)
    measure = bool(plan.groups) or config.mode == Mode.BUDGET
    profile = device_profile(device, config.bandwidth_gbps, measure=measure)
    measure_kernels = config.measure_kernels and device.type == "cuda"
    measured = None if profile is None else node_times(fw_gm, bw_gm, profile, measure_kernels)
    raw_profile, times = profile, measured
    if calibration is not None and measured is not None:
        times, profile = calibration.times(measured), calibration.profile(profile)
    offset = 0 if calibration is None else calibration.offset_for(level)
    between = 0.0 if calibration is None else calibration.between_ms
    baseline = None if times is None else predict_step(
        fw_gm, bw_gm, timeline_before, times, profile, offset, between
    )
    reference = reference or baseline
    budget = None if reference is None else budget_bytes(config, reference)
    allowed = None
    if config.mode == Mode.AUTO:
        allowed = config.max_overhead if reference is None else overhead_allowed(
            config.max_overhead, calibration, reference
        )
    lifetimes = copy_lifetimes(fw_gm, bw_gm, saved, plan.groups)
    schedule = schedule_copies(
        fw_gm, bw_gm, plan, timeline_before, lifetimes, times, profile, config, budget, max_copies, offset, allowed,
        select_within, forced,
    )
    fw_gm, bw_gm = backend._rewrite(fw_gm, bw_gm, schedule, lifetimes, graph_id)
    timeline_after = simulate_step(fw_gm, bw_gm, count_cpu)
    plan = schedule.plan
    plan.modules = modules
    plan.recompute_level = level
    plan.budget = budget
    plan.max_overhead = config.max_overhead if config.mode == Mode.AUTO else None
    plan.overhead_allowed = allowed
    plan.calibration = calibration
    if times is not None:
        plan.baseline = reference
        plan.prediction = predict_step(fw_gm, bw_gm, timeline_after, times, profile, offset, between)
    simulation = None if measured is None else (timeline_after, measured, raw_profile)
    texts = None if before is None else GraphTexts(*before, render_graph(fw_gm), render_graph(bw_gm))
    return _Attempt(fw_gm, bw_gm, saved, CompileRecord(plan, timeline_before, timeline_after, texts), simulation)


def _simulate(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, timeline, times, profile, calibration: Calibration,
    runtime_ops: bool = True,
) -> StepPrediction:
    """The step simulator over these rewritten graphs, from the uncalibrated
    node times and profile, under ``calibration`` (``runtime_ops`` False:
    their runtime ops skipped, the step without offload's time)."""
    return predict_step(
        fw_gm, bw_gm, timeline, calibration.times(times), calibration.profile(profile),
        calibration.peak_offset, calibration.between_ms, runtime_ops,
    )


def _trial(attempt: _Attempt) -> Trial:
    """An attempt's partition as the step simulator predicts it."""
    prediction = attempt.plan.prediction
    return Trial(
        attempt.plan.recompute_level, prediction.step_ms, prediction.peak, prediction.peak_offset,
        attempt.plan.offloaded_bytes,
    )


def _partition_logged(first: _Attempt, partition: Callable, level: float, seen: set) -> Optional[_Attempt]:
    """One level of mode="budget"'s search, partitioned and planned, with a
    line of progress: on a ResNet-50 each level costs seconds to tens of
    seconds (PyTorch's partitioner most of it), and the search can run ten."""
    start = time.perf_counter()
    attempt = partition(level, first.plan.baseline, seen)
    elapsed = time.perf_counter() - start
    if attempt is None:
        log.info(
            "offload_pass: %s mode=budget: activation_memory_budget=%g saves what a level tried before saved "
            "(partitioned in %.1f s)", first.plan.graph_id, level, elapsed,
        )
    else:
        log.info(
            "offload_pass: %s mode=budget: activation_memory_budget=%s (partitioned and planned in %.1f s)",
            first.plan.graph_id, _trial(attempt).describe(), elapsed,
        )
    return attempt


def _forward_inputs_bytes(joint: fx.GraphModule) -> Optional[int]:
    """The bytes of the joint graph's forward inputs, the smallest saved set
    PyTorch's partitioner sizes the others against: the placeholders its
    own ``_is_primal`` and ``_is_fwd_seed_offset`` take as such, counted as
    the saved set counts a tensor's bytes; None where a size is symbolic."""
    from torch._functorch.partitioners import _is_fwd_seed_offset, _is_primal

    total = 0
    for node in joint.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not (_is_primal(node) or _is_fwd_seed_offset(node)) or not isinstance(val, torch.Tensor):
            continue
        nbytes, symbolic = tensor_bytes(val)
        if symbolic:
            return None
        total += nbytes
    return total


def _saved_bytes(attempt: _Attempt) -> Optional[int]:
    """The bytes a partition saves; None where a size is symbolic."""
    if any(t.symbolic for t in attempt.saved):
        return None
    return sum(t.nbytes for t in attempt.saved)


def _recompute_for_budget(
    first: _Attempt, partition: Callable, budget: int, skip: tuple[Trial, ...], inputs_bytes: Optional[int] = None
) -> _Attempt:
    """mode="budget" where offload alone misses, or reaches the budget at a
    cost: partition again under ``RECOMPUTE_LEVELS`` from light to full
    recompute (less the levels of ``skip``: a re-plan's, the earlier plans'
    trials out of reach, ``recompute.levels_out_of_reach``, which the plan
    keeps as ``recompute_skipped``; where no level tried reaches the budget,
    those of them ``recompute.levels_to_retry`` gives are partitioned after
    all), plan offload on each new saved set,
    and keep the one the step simulator predicts fastest within the budget
    (recompute.choose_trial; offload alone among them). The search goes on
    past the first level that reaches the budget while each deeper level
    reaches it with a faster predicted step, and stops at the first that
    does not (``recompute.search_goes_on``). Levels where PyTorch's
    partitioner would save again the set a level above them saved
    (``recompute.saved_again_above``, from ``inputs_bytes``, the joint
    graph's forward inputs) are not partitioned. The tensors the kept
    partition recomputes enter its plan as ``recompute``; every trial, the
    plan's ``recompute_trials``."""
    attempts = [first]
    seen = {frozenset(t.name for t in first.saved)}
    skipped = {t.level for t in skip}
    first_bytes = _saved_bytes(first)
    # (the level last partitioned, the level above which lower levels save
    # its set again: recompute.saved_again_above)
    repeats: Optional[tuple[float, float]] = None
    for level in RECOMPUTE_LEVELS:
        if level in skipped:
            continue
        # Level 0 is never skipped: PyTorch saves only the inputs there, whatever the ratios.
        if repeats is not None and 0 < level and level > repeats[1]:
            log.info(
                "offload_pass: %s mode=budget: activation_memory_budget=%g not partitioned: PyTorch's partitioner "
                "saves there what it saved at %g (every level above %.2f)",
                first.plan.graph_id, level, repeats[0], repeats[1],
            )
            continue
        attempt = _partition_logged(first, partition, level, seen)
        if attempt is None:
            continue
        attempts.append(attempt)
        saved_bytes = _saved_bytes(attempt)
        above = None if None in (saved_bytes, first_bytes, inputs_bytes) else saved_again_above(
            saved_bytes, first_bytes, inputs_bytes
        )
        repeats = None if above is None else (level, above)
        if not search_goes_on([_trial(a) for a in attempts[1:]], budget):
            break
    retried: tuple[Trial, ...] = ()
    if skip and all(a.plan.prediction.peak > budget for a in attempts):
        # Out of reach: the lowest predicted peak is kept, so a skipped level
        # whose earlier peak, moved to this calibration, is lower counts again.
        lowest = min(a.plan.prediction.peak for a in attempts)
        calibration = first.plan.calibration
        retried = levels_to_retry(skip, lowest, (lambda level: 0) if calibration is None else calibration.offset_for)
        for trial in retried:
            attempt = _partition_logged(first, partition, trial.level, seen)
            if attempt is not None:
                attempts.append(attempt)
        skip = tuple(t for t in skip if t not in retried)
    trials = [_trial(a) for a in attempts]
    chosen = trials.index(choose_trial(trials, budget))
    attempt = attempts[chosen]
    plan = attempt.plan
    recomputed = recompute_entries(first.saved, first.plan.entries, {t.name for t in attempt.saved}, trials[chosen])
    plan.saved_for_recompute = newly_saved(first.saved, plan.entries)
    plan.entries = plan.entries + recomputed
    plan.recompute_trials, plan.recompute_skipped = tuple(trials), skip
    tried = ", ".join(t.describe() for t in trials)
    if retried:
        tried += (
            "; partitioned again although out of reach before, since nothing else reached the budget and their "
            "earlier peaks stood below the lowest: " + ", ".join(f"{t.level:g}" for t in retried)
        )
    if skip:
        tried += (
            "; not tried again, out of reach before (as predicted then, their calibration's offsets in): "
            + ", ".join(t.describe() for t in skip)
        )
    note = f"offload plus recompute; predicted per activation_memory_budget tried: {tried}"
    plan.selection = f"{plan.selection}; {note}" if plan.selection else note
    log.info("offload_pass: %s mode=budget: %s; kept %s", plan.graph_id, note, trials[chosen].level)
    return attempt


# mode="auto", where the step simulator predicts the selection's choice over
# the limit: the shares of the limit the selection chooses within once more
# (the first whose choice the simulator keeps whole is a candidate).
_SELECT_WITHIN_SHARES = (0.5, 0.25)


def _auto_within_overhead(first: _Attempt, partition: Callable, limit: float) -> _Attempt:
    """mode="auto": the selection chooses with its coarse model; the step
    simulator, which every report quotes, has the last word. Where it
    predicts the rewritten step over ``limit`` (``plan.overhead_allowed``:
    max_overhead, of plain Inductor's measured step where there is one), two
    candidates: the longest prefix of the selection's greedy order (most
    peak reduction first) that it predicts within, found by bisection (no
    copies always is), and the selection's choice within a share of the
    limit (``_SELECT_WITHIN_SHARES``), another set, where the simulator
    predicts it within the limit; the lower predicted peak is kept (then the
    shorter step). Without the second, a larger max_overhead could free less:
    decoder, H200, 2026-11-27: at 10 % the selection's 5 copies trimmed to 4
    offloaded 512 MiB, where its choice at 5 % offloaded 544 within 5 %."""
    def within(attempt: _Attempt) -> bool:
        return attempt.plan.predicted_overhead <= limit + 1e-12

    if first.plan.baseline is None or within(first) or not first.plan.groups:
        return first
    chosen = len(first.plan.groups)
    low, high, best = 0, chosen - 1, None
    while low <= high:
        count = (low + high) // 2
        attempt = partition(None, None, max_copies=count)
        if within(attempt):
            best, low = attempt, count + 1
        else:
            high = count - 1
    best = best or partition(None, None, max_copies=0)
    predicted = f"the step simulator predicted {first.plan.predicted_overhead:+.1%} with all {chosen} copies chosen"
    prefix = f"the first {len(best.plan.groups)}"
    note = f"{predicted}: kept {prefix} ({best.plan.predicted_overhead:+.1%})"
    for share in _SELECT_WITHIN_SHARES if limit > 0 else ():
        other = partition(None, None, select_within=limit * share)
        if not within(other):
            continue
        if other.plan.groups and (other.plan.prediction.peak, other.plan.prediction.step_ms) < (
            best.plan.prediction.peak, best.plan.prediction.step_ms
        ):
            note = (
                f"{predicted}; chosen within {limit * share:+.1%} instead: {len(other.plan.groups)} copies "
                f"({other.plan.predicted_overhead:+.1%}), a lower predicted peak than {prefix} of the {chosen} "
                f"({best.plan.predicted_overhead:+.1%})"
            )
            best = other
        break
    plan = best.plan
    plan.selection = f"{plan.selection}; {note}" if plan.selection else f"mode=auto: {note}"
    log.info("offload_pass: %s mode=auto: %s", plan.graph_id, note)
    return best


def _measured_floor_attempt(first: _Attempt, partition: Callable, floor: Optional[MeasuredSet]) -> _Attempt:
    """mode="auto": where a set of copies of this graph ran and measured
    within max_overhead (``floor``: ``calibration.measured_floor``, from
    this compile's earlier plans or an earlier compile's) and the
    selection's choice (``first``) predicts a higher peak than that set
    planned alike (the same partition and calibration), the set runs
    instead: its promise was measured kept. Else ``first``. A set this
    partition does not offer whole is not run."""
    if floor is None or first.plan.prediction is None or {g.storage for g in first.plan.groups} == floor.storages:
        return first
    forced = partition(None, None, forced=floor.storages)
    if {g.storage for g in forced.plan.groups} != floor.storages or forced.plan.prediction is None:
        return first
    if forced.plan.prediction.peak >= first.plan.prediction.peak:
        return first
    note = (
        f"runs the {len(floor.storages)} copies a plan of this graph ran before, {floor.describe()}, within "
        f"max_overhead: a lower predicted peak ({format_bytes(forced.plan.prediction.peak)}) than the "
        f"{len(first.plan.groups)} copies chosen ({format_bytes(first.plan.prediction.peak)})"
    )
    plan = forced.plan
    plan.selection = f"{plan.selection}; {note}" if plan.selection else f"mode=auto: {note}"
    log.info("offload_pass: %s mode=auto: %s", plan.graph_id, note)
    return forced


def _saved_set(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, graph_id: str, static: Sequence[int], prefix: str
) -> list:
    """Views re-traced, requested roles checked, the saved tensors collected."""
    _retrace_saved_views(fw_gm, bw_gm, graph_id)
    mlp = mlp_roles(fw_gm.graph)
    check_requested_roles(fw_gm.graph, mlp)
    return collect_saved_tensors(fw_gm, bw_gm, static, module_prefix=prefix, mlp=mlp)


def _runs_on_cpu(fw_gm: fx.GraphModule, graph_id: str) -> bool:
    if any(isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].device.type == "cuda" for n in fw_gm.graph.nodes):
        return False
    log.info(
        "offload_pass: %s runs on CPU: the rewrite is the same, the copies run "
        "synchronously into separate host buffers and save no memory",
        graph_id,
    )
    return True


def _warn_unoffloaded_marks(report: StepReport, roots: Sequence[torch.nn.Module]) -> None:
    """After the first step's forwards: say once for each module marked for
    offload in ``roots`` that nothing of it was offloaded, and why."""
    for name, why in modules_without_offload(report, offload_marked_modules(roots)):
        message = f"offload_pass: module {name or '<root>'} is marked for offload but nothing it saves was offloaded in step 1: {why}"
        if message not in REGISTRY.warned_marks:
            REGISTRY.warned_marks.add(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)


def _retrace_saved_views(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, graph_id: str) -> None:
    """Correct the fake values of forward views (``views.retrace_view_vals``)
    and of the backward inputs they are saved as."""
    changed = retrace_view_vals(fw_gm.graph)
    if not changed:
        return
    fw_nodes = {n.name: n for n in fw_gm.graph.nodes}
    for placeholder in bw_gm.graph.find_nodes(op="placeholder"):
        if placeholder.name in changed:
            placeholder.meta["val"] = fw_nodes[placeholder.name].meta["val"]
    log.debug("offload_pass: %s views re-traced from their storage: %s", graph_id, ", ".join(changed))


def _user_patches(mode: Optional[str], options: Optional[dict[str, Any]]) -> dict[str, Any]:
    """Inductor's configuration as the user's ``torch.compile`` asked for it."""
    from torch._inductor import list_mode_options

    return {**(list_mode_options(mode) if mode else {}), **(options or {})}


def _compile_plain(pristine: fx.GraphModule, patches: dict[str, Any], inputs: list) -> Callable:
    """Plain Inductor's compile of Dynamo's graph (``patches``: the user's;
    no pass of ours): what mode="auto" measures a plan's step against."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(graph_copy(pristine), inputs, config_patches=dict(patches))


def _inductor_patches(mode: Optional[str], options: Optional[dict[str, Any]]) -> dict[str, Any]:
    from torch._inductor import list_mode_options

    patches: dict[str, Any] = dict(list_mode_options(mode) if mode else {})
    # The rewrite already ordered the graph: each release a few copies after
    # its copy-out, each reload where the cost model put it. Inductor's
    # peak-memory reordering would move every release next to its copy (the
    # compute stream then waits for each copy in turn) and every reload next
    # to its consumer (no prefetch left): measured on an H100, 2.5 % of the
    # forward's copy time overlapped compute with it on.
    patches["reorder_for_peak_memory"] = False
    # Inductor's buffer reuse keeps a dead buffer allocated until a later
    # buffer of the same size takes it over, often one layer on: measured on
    # an H100 (benchmarks/memory_at_peak.py, decoder with everything
    # offloaded), 224 MiB of such buffers sat through each attention backward
    # and made the step's peak. The caching allocator hands the freed block
    # back just as cheaply, and the plan's timeline (free at last use) then
    # holds on the device.
    patches["allow_buffer_reuse"] = False
    patches.update(options or {})
    if patches.get("triton.cudagraphs"):
        # A CUDA graph would replay the copies with stale host buffers and
        # events recorded at capture time; refuse rather than run it wrong.
        raise ValueError(
            f"offload_pass does not support CUDA graphs (mode={mode!r}); use "
            "mode='max-autotune-no-cudagraphs' or 'default', or compile without offload"
        )
    return patches


def _pristine_copy(gm: fx.GraphModule) -> tuple[Optional[fx.GraphModule], str]:
    """A copy of Dynamo's graph for a re-plan to compile (compiling changes
    the graph it is given), or None and why there is none."""
    if not static_shapes(gm):
        return None, "its inputs have dynamic sizes (a re-plan would compile it for one size)"
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()) or gm.graph.find_nodes(op="get_attr"):
        # A copy would hold copies of them: the re-planned graph would train those.
        return None, "it holds tensors of its own (parameters, buffers or constants), which a copy would duplicate"
    try:
        return graph_copy(gm), ""
    except Exception as error:  # a graph deepcopy cannot copy: measured, never planned again
        return None, f"its graph could not be copied for a second compile ({type(error).__name__}: {error})"


def _carry_settings(config: OffloadConfig, patches: dict[str, Any], device: torch.device) -> tuple:
    """What else a calibration's scales absorb besides the graph (its key,
    ``compiled_graph.graph_key``): the config's settings that reach the
    simulator or the runtime ops, torch.compile's mode and options, the
    autocast state Dynamo guards on (the same code, other kernels), and
    Inductor's and AOTAutograd's configs as set around the compile."""
    configs = tuple(
        getattr(module, "get_hash", lambda: b"")() for module in (inductor_config, torch._functorch.config)
    )
    autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    return config.simulator_settings(), repr(sorted(patches.items())), autocast, configs


def _cuda_device(example_inputs: Sequence[object]) -> Optional[torch.device]:
    """The CUDA device of the graph's first CUDA input (None: a CPU graph)."""
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type == "cuda":
            return value.device
    return None


def make_backend(
    config: Optional[OffloadConfig] = None, *, keep_graphs: bool = False, **overrides: object
) -> OffloadBackend:
    """A backend with its own config and its own ``records``.

    ``make_backend(min_bytes=0, prefetch=1)`` or ``make_backend(OffloadConfig(...))``;
    ``keep_graphs=True`` keeps the graph texts (``OffloadBackend``).
    """
    if config is not None and not isinstance(config, OffloadConfig):
        raise TypeError(
            f"make_backend: config must be an OffloadConfig or None, got {type(config).__name__}; "
            "pass settings as keywords: make_backend(min_bytes=0)"
        )
    base = OffloadConfig() if config is None else config
    return OffloadBackend(base.replace(**overrides) if overrides else base, keep_graphs=keep_graphs)


offload_backend = OffloadBackend()
