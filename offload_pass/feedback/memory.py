"""What the feedback loop remembers across compiles of one graph.

Takes: a graph's key (``graph_key``: its code, its inputs' sizes, strides,
dtypes, devices and ``requires_grad``, the device, and what else a
calibration's scales absorb) and what its plans measured. Gives: the
calibration a later compile of the same graph plans under from its first
plan on (``carried_calibration``, kept by ``carry``), and, for mode="auto",
the sets of copies its plans ran with what each measured
(``remember_measured``, ``MeasuredSet``) and the one a later plan gives way
to (``measured_floor``, ``floor_for``). Kept in ``REGISTRY`` for the
process (``REGISTRY.reset()`` drops them); a ``disk.CalibrationStore``
keeps the calibrations for later runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
from typing import Any, Optional, Sequence

import torch
import torch.fx as fx

from offload_pass.feedback.check import PredictionCheck
from offload_pass.feedback.disk import CalibrationStore
from offload_pass.planning.calibration import Calibration
from offload_pass.registry import REGISTRY
from offload_pass.units import format_bytes

__all__ = [
    "MeasuredSet", "carried_calibration", "carry", "carry_settings", "copies", "floor_for", "graph_key", "measured_floor",
    "remember_measured",
]


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


def carried_calibration(key: str, store: Optional[CalibrationStore] = None) -> Optional[Calibration]:
    """The calibration a first compile of the graph ``key`` plans under: the
    one fitted in this process, else the one ``store`` kept from an earlier
    run (None: none)."""
    if key in REGISTRY.calibrations or store is None:
        return REGISTRY.calibrations.get(key)
    kept = store.load(key)
    if kept is not None:
        REGISTRY.calibrations[key] = kept
    return kept


def carry(key: str, calibration: Calibration, store: Optional[CalibrationStore] = None) -> None:
    """Keep ``calibration``'s scales for later compiles of the graph ``key``.
    The peak offsets stay behind (each is what the timeline missed of the
    plan measured; one plan's offset does not hold for another), and so do
    the time between forward and backward and plain Inductor's step (a
    later compile measures its own)."""
    carried = REGISTRY.calibrations[key] = dataclasses.replace(
        calibration, peak_offset=0, peak_measured=False, between_ms=0.0, carried=True, plain_work_ms=None,
        partition_offsets=(), source=f"an earlier compile of this graph ({calibration.source})",
    )
    if store is not None:
        store.save(key, carried)


@dataclasses.dataclass(frozen=True)
class MeasuredSet:
    """A set of copies plans of one graph ran under mode="auto", and what
    each run measured against plain Inductor's graph beside it."""

    storages: frozenset[str]  # the copies (their storages' names in the forward graph)
    overheads: tuple[float, ...]  # each run's PredictionCheck.measured_overhead, oldest first
    peaks: tuple[int, ...]  # each run's PredictionCheck.peak (measured, else predicted), bytes

    @property
    def overhead(self) -> float:
        return statistics.median(self.overheads)

    @property
    def peak(self) -> int:
        return int(statistics.median(self.peaks))

    def again(self, overhead: float, peak: int) -> "MeasuredSet":
        """The same copies, run and measured once more."""
        return dataclasses.replace(self, overheads=(*self.overheads, overhead), peaks=(*self.peaks, peak))

    def describe(self) -> str:
        runs = "once" if len(self.overheads) == 1 else f"the median of {len(self.overheads)} runs"
        return (
            f"measured {self.overhead:+.1%} against plain Inductor's graph beside it ({runs}), "
            f"peak {format_bytes(self.peak)}"
        )


def measured_floor(sets: Sequence[MeasuredSet], max_overhead: float) -> Optional[MeasuredSet]:
    """mode="auto": of the sets of copies a graph's plans ran, the one
    measured within ``max_overhead`` itself (the median of its runs; no
    noise allowed) with the lowest peak (then the least slowdown); None
    where none was. A plan predicting a higher peak runs it instead: a
    promise measured kept outweighs one predicted, so a larger max_overhead
    never frees less than a smaller one measured in the same process."""
    within = [s for s in sets if s.storages and s.overhead <= max_overhead]
    return min(within, key=lambda s: (s.peak, s.overhead, sorted(s.storages)), default=None)


def floor_for(key: str, max_overhead: float) -> Optional[MeasuredSet]:
    """``measured_floor`` over the sets remembered for the graph ``key``."""
    return measured_floor(list(REGISTRY.measured_sets.get(key, {}).values()), max_overhead)


def copies(plan: Any) -> frozenset:
    """The copies a plan runs, as measured sets are keyed: the saved storages it offloads."""
    return frozenset(g.storage for g in plan.groups)


def remember_measured(key: str, plan: Any, check: PredictionCheck) -> None:
    """mode="auto": keep the copies ``plan`` ran and what they measured
    against plain Inductor's graph beside them, for the later plans and
    compiles of the graph ``key``. Nothing where no copy ran or plain
    Inductor was not measured beside it."""
    if not plan.groups or check.measured_overhead is None:
        return
    storages = copies(plan)
    sets = REGISTRY.measured_sets.setdefault(key, {})
    known = sets.get(storages)
    sets[storages] = (
        MeasuredSet(storages, (check.measured_overhead,), (check.peak,)) if known is None
        else known.again(check.measured_overhead, check.peak)
    )


def carry_settings(config: Any, patches: dict[str, Any], device: torch.device) -> tuple:
    """What else a calibration's scales absorb besides the graph: the
    config's settings that reach the simulator or the runtime ops,
    torch.compile's mode and options, the autocast state Dynamo guards on
    (the same code, other kernels), and Inductor's and AOTAutograd's
    configs as set around the compile."""
    from torch._inductor import config as inductor_config

    configs = tuple(
        getattr(module, "get_hash", lambda: b"")() for module in (inductor_config, torch._functorch.config)
    )
    autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    return config.simulator_settings(), repr(sorted(patches.items())), autocast, configs
