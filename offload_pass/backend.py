"""The torch.compile entry point: a backend whose partitioner is the compile pipeline.

Takes: the Dynamo graph and example inputs (a ``torch.compile`` backend call).
Gives: Inductor's compiled function, compiled with a partitioner that runs
the compile pipeline (``pipeline/``: PyTorch's min-cut partitioner, the
plan, the rewrite) before Inductor sees the graphs, wrapped in a
``CompiledGraph``; on CUDA the feedback loop (``feedback/``) wraps it
instead, unless ``disabled_passes`` names "calibrate". The backend keeps a
``CompileRecord`` of each compile in ``backend.records`` (newest last; the
plans alone in ``backend.plans``; what the feedback loop measured, in the
records only).

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
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch
import torch.fx as fx
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomPartitionerFn, get_hash_for_files

import offload_pass.runtime  # noqa: F401  (registers the ops)
from offload_pass.annotation.annotations import TensorMarkPass, annotate_requests, marks_digest
from offload_pass.compiled_graph import Compiled, CompiledGraph, GraphHost
from offload_pass.config import OffloadConfig
from offload_pass.enums import Mode, PassName
from offload_pass.marking.backend_check import user_stacklevel
from offload_pass.marking.mark import Mark
from offload_pass.marking.mark_keeping import active_marks
from offload_pass.marking.markers import offload_marked_modules
from offload_pass.marking.naming import frame_root_name, marked_roots
from offload_pass.pipeline.passes import PassContext, simulate
from offload_pass.pipeline.search import run_pipeline
from offload_pass.planning.calibration import Calibration
from offload_pass.planning.plan import OffloadPlan, plain_inductor_plan
from offload_pass.planning.step_model import StepPrediction
from offload_pass.registry import REGISTRY
from offload_pass.reporting.compile_record import CompileRecord, GraphTexts
from offload_pass.reporting.graph_text import render_graph
from offload_pass.reporting.step_report import StepReport, StepTracker, modules_without_offload
from offload_pass.rewriting.kernel_order import graph_order_pass
from offload_pass.units import mib

if TYPE_CHECKING:
    from offload_pass.feedback.check import PredictionCheck
    from offload_pass.feedback.memory import MeasuredSet

__all__ = ["OffloadBackend", "make_backend", "offload_backend"]

log = logging.getLogger("offload_pass")

_SOURCES = tuple(sorted(glob.glob(os.path.join(os.path.dirname(__file__), "**", "*.py"), recursive=True)))


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
        floor: Optional["MeasuredSet"] = None,
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
    ``CompileRecord`` of every forward/backward pair it compiled, newest last
    (with what the feedback loop measured of each, on CUDA), and ``plans``
    their plans. ``keep_graphs=True`` keeps the texts of the
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
        # (feedback.fit), kept until its graph is measured.
        self._simulators: dict[int, Callable[[Calibration], StepPrediction]] = {}

    def __repr__(self) -> str:
        return f"OffloadBackend({self.config}" + (", keep_graphs=True)" if self.keep_graphs else ")")

    @property
    def plans(self) -> list[OffloadPlan]:
        """The plan of every compile of a training graph, newest last (a
        graph compiled under no_grad or inference has none)."""
        return _Plans(r.plan for r in self.records)

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
        host = GraphHost(
            lambda: self.plans, self._steps, self._warn_unoffloaded_marks, lambda: self.records, self._record_facts
        )
        device = _cuda_device(example_inputs)
        if device is None or PassName.CALIBRATE in self.config.disabled_passes:
            compiled = compile_graph(gm, example_inputs, None)
            return CompiledGraph(host, compiled.fn, active, compiled.plan_index)
        # The feedback loop measures the graph's calls and plans it again (loaded only here).
        from offload_pass.feedback import attach, memory, recompile

        pipeline = recompile.Pipeline(compile_graph, self._record_plain_inductor)
        auto = self.config.max_overhead if self.config.mode == Mode.AUTO else None
        settings = memory.carry_settings(self.config, patches, device)
        persist = PassName.CALIBRATION_CACHE not in self.config.disabled_passes
        return attach.calibrated_graph(
            host, pipeline, gm, example_inputs, device, active, settings, auto, mode, options, persist
        )

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
        floor: Optional["MeasuredSet"] = None,
    ) -> Compiled:
        """Inductor's compile with this pass as its partitioner; returns the
        compiled function, the index of its record (None: no backward
        graph, nothing to offload or report) and, with ``keep_simulator``,
        the step simulator over its graphs (None without predictions).
        ``prior``: a re-plan's, the plan it replaces; ``floor``: mode="auto",
        the set of copies measured within max_overhead that a selection
        predicting a higher peak gives way to (``pipeline.search.measured_floor``)."""
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
            return Compiled(compiled, None, None)
        return Compiled(compiled, len(self.records) - 1, self._simulators.pop(len(self.records) - 1, None))

    def _record_plain_inductor(self, plan_index: int, fallback: str, measured: "PredictionCheck") -> int:
        """mode="auto" fell back from the plan of record ``plan_index`` to
        plain Inductor's compile of its graph (``fallback``: why;
        ``measured``: plain Inductor's graph measured): a record of that
        compile, nothing offloaded (``plan.plain_inductor_plan``). Returns
        its index."""
        record = self.records[plan_index]
        plan = plain_inductor_plan(record.plan, f"graph {len(self.records)}", fallback)
        self._record(CompileRecord(plan, record.timeline_before, record.timeline_before, measured=measured))
        return len(self.records) - 1

    def _record_facts(self, index: int, **facts: Any) -> None:
        """The feedback loop's facts about record ``index`` (``CompileRecord``'s
        ``measured``, ``replan_reason``, ``fallback``), set in a new record."""
        self.records[index] = dataclasses.replace(self.records[index], **facts)

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
        floor: Optional["MeasuredSet"] = None,
        **kwargs: Any,
    ):
        """The compile pipeline (``pipeline/``) over the joint graph, its
        result recorded. ``frame_root``: the qualified name of the module this
        graph's frame is the forward of, where known; ``calibration``,
        ``prior``, ``floor``: the feedback loop's (None: none);
        ``keep_simulator``: keep the step simulator over the graphs returned."""
        annotate_requests(joint.graph, active[-1] if active else None)
        prefix = frame_root if frame_root is not None else ((active[-1].qualname or "") if active else "")
        ctx = PassContext(
            self.config, joint, joint_inputs, kwargs, f"graph {len(self.records)}", prefix, calibration,
            self.keep_graphs, prior=prior, floor=floor,
        )
        state = run_pipeline(ctx)
        texts = None if state.texts_before is None else GraphTexts(
            *state.texts_before, render_graph(state.fw_gm), render_graph(state.bw_gm)
        )
        self._record(CompileRecord(
            state.plan, state.timeline_before, state.timeline_after, texts, state.notes, state.changed_by,
            calibration=calibration,
        ))
        if keep_simulator and state.simulation is not None:
            # Inductor edits the graphs it is handed (view_to_reshape, its
            # post-grad passes): the simulator keeps copies of them as planned.
            self._simulators[len(self.records) - 1] = functools.partial(
                simulate, copy.deepcopy(state.fw_gm), copy.deepcopy(state.bw_gm), *state.simulation
            )
        return state.fw_gm, state.bw_gm

    def _record(self, record: CompileRecord) -> None:
        """Keep the record; log what was done."""
        self.records.append(record)
        plan = record.plan
        log.info(
            "offload_pass: %s %s %d saved tensors (%.1f MiB), keeps %.1f MiB", plan.graph_id,
            "offloads" if plan.rewritten else "would offload (rewrite disabled)", len(plan.offloaded),
            mib(plan.offloaded_bytes), mib(plan.kept_bytes),
        )
        if plan.kept_without_gain:
            log.info(
                "offload_pass: %s kept %d marked tensors that would not lower the predicted peak "
                "(keep_if_no_gain); make_backend(keep_if_no_gain=False) offloads them anyway",
                plan.graph_id, len(plan.kept_without_gain),
            )



class _Plans(list):
    """``OffloadBackend.plans``: a list whose index error, where it is
    empty, says why a plan may be missing."""

    def __getitem__(self, index):
        if not self:
            raise IndexError(
                "offload_pass: no plan yet: plans are made for training graphs at their first forward with "
                "gradients; graphs compiled under torch.no_grad() or inference_mode() have none"
            )
        return super().__getitem__(index)


def _warn_unoffloaded_marks(report: StepReport, roots: Sequence[torch.nn.Module]) -> None:
    """After the first step's forwards: say once for each module marked for
    offload in ``roots`` that nothing of it was offloaded, and why."""
    for name, why in modules_without_offload(report, offload_marked_modules(roots)):
        message = f"offload_pass: module {name or '<root>'} is marked for offload but nothing it saves was offloaded in step 1: {why}"
        if message not in REGISTRY.warned_marks:
            REGISTRY.warned_marks.add(message)
            warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())


def _inductor_patches(mode: Optional[str], options: Optional[dict[str, Any]]) -> dict[str, Any]:
    from torch._inductor import list_mode_options

    patches: dict[str, Any] = dict(list_mode_options(mode) if mode else {})
    # The rewrite already ordered the graph: each release a few copies after
    # its copy-out, each reload where the cost model put it. Inductor's
    # peak-memory reordering would move every release next to its copy (the
    # compute stream then waits for each copy in turn) and every reload next
    # to its consumer (no prefetch left).
    patches["reorder_for_peak_memory"] = False
    # Inductor's buffer reuse keeps a dead buffer allocated until a later
    # buffer of the same size takes it over, often one layer on, where it can
    # make the step's peak (benchmarks/memory_at_peak.py shows it). The
    # caching allocator hands the freed block back just as cheaply, and the
    # plan's timeline (free at last use) then holds on the device.
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
