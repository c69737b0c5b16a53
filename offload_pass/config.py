"""Configuration of the offload pass.

Takes: keyword overrides from ``make_backend``. Gives: a frozen ``OffloadConfig``
whose ``cache_key()`` goes into the compile cache key, so a changed knob can
never be served a graph compiled under the old one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Union

from offload_pass.enums import Mode, PassName, ScheduleKind

__all__ = ["DEFAULT_MAX_OVERHEAD", "DEFAULT_RELOAD_HEADROOM", "OffloadConfig"]

# OffloadConfig.reload_headroom when None: a share of the bytes offloaded
# (the field's comment says what it buys).
DEFAULT_RELOAD_HEADROOM = 0.02
# OffloadConfig.max_overhead under mode="auto" when not given: 2 %.
DEFAULT_MAX_OVERHEAD = 0.02


@dataclasses.dataclass(frozen=True, repr=False)
class OffloadConfig:
    """Knobs of the pass, validated on construction. Defaults suit a
    transformer block on one GPU. Each field's comment says what it does;
    ``replace`` makes a changed copy, ``cache_key`` names the knobs for the
    compile cache."""

    # Saved activations smaller than this stay on device: a copy has a fixed
    # launch cost of a few microseconds (1 MiB moves in ~20 us at 50 GB/s).
    min_bytes: int = 1 << 20
    # Copy into pinned host memory (needed for truly asynchronous copies).
    pin_memory: bool = True
    # "cost": releases and reloads placed from the cost model (estimated node
    # times, measured copy bandwidth, simulated memory): each release where
    # its copy is predicted to have landed, earlier if holding the tensor
    # would lift the predicted peak; each reload just early enough to land
    # before its consumer, later where landing early would lift the peak.
    # "fixed": release ``max_inflight`` copies later, reload ``prefetch`` ahead.
    schedule: ScheduleKind = ScheduleKind.COST
    # schedule="fixed": how many offloaded tensors (in backward order of first
    # use) a tensor's reload is issued ahead of; 0 reloads right before use.
    prefetch: int = 1
    # schedule="cost": an extra bound on the bytes reloads may hold ahead of
    # their consumers (None: only the predicted peak bounds them). Bounding it
    # to the largest copy serialises the reloads and slows the step.
    prefetch_bytes: Optional[int] = None
    # schedule="cost": how far reloads may lift device memory above the ideal
    # peak (``plan.ideal_peak``) to start earlier: bytes (an int) or a share
    # of the bytes offloaded (a float in [0, 1]); None: 2 %
    # (``DEFAULT_RELOAD_HEADROOM``); 0: none. Where the backward is copy-bound
    # with memory near the peak throughout, reloads otherwise wait for room
    # while the copy stream idles; elsewhere it changes nothing. mode="auto"
    # and "budget" choose their copies under the same bounds.
    reload_headroom: Optional[Union[int, float]] = None
    # Host<->device copy bandwidth (GB/s) for the cost model: one figure for
    # both directions, or a (device->host, host->device) pair (what
    # ``measure_shared_bandwidth`` measures with every rank of a host copying
    # at once); None measures it once per device, one process copying, and caches it.
    bandwidth_gbps: Union[None, float, tuple[float, float]] = None
    # schedule="fixed": forward copies allowed in flight; when one more
    # starts, the oldest is released (the compute stream waits for it and its
    # device memory is freed). Bounds the memory held by pending copies.
    max_inflight: int = 2
    # Keep a marked tensor on device when offloading it would not lower the
    # step's predicted peak (its copies would cost time and save nothing).
    keep_if_no_gain: bool = True
    # On CUDA, time each extern kernel (matmuls, attention, grouped GEMMs,
    # convolutions) once per shape for the step simulator, instead of
    # estimating it from the device's peak throughput (planning/kernel_timing.py).
    measure_kernels: bool = True
    # The first N offloadable storages in backward order stay on device: their
    # reload would start with the backward, so moving them frees nothing.
    keep_first_in_backward: int = 0
    # Which marked tensors are offloaded. "marked": every one the marks ask
    # for (less what keep_if_no_gain trims). "auto": among them (or among all
    # eligible activations when nothing is marked), the set predicted to free
    # the most memory at the peak with the step at most ``max_overhead``
    # slower. "budget": the set that brings the predicted peak to
    # ``memory_budget`` with the least predicted slowdown.
    mode: Mode = Mode.MARKED
    # mode="auto": the allowed predicted slowdown (0.02 = 2 %; inf: any). On
    # CUDA the measured step is held to it too: a plan measured over it by
    # more than 1 % of the step is planned once more (replan reason "overhead").
    # None (not given) is DEFAULT_MAX_OVERHEAD under mode="auto" and stays
    # None under the other modes, where giving it is an error: it would do
    # nothing there.
    max_overhead: Optional[float] = None
    # mode="budget": the peak to reach, in bytes (an int) or as a fraction of
    # the predicted peak without offload (a float in (0, 1]).
    memory_budget: Optional[Union[int, float]] = None
    # Bytes of pinned host memory a plan's copies may hold at once. None:
    # half of the memory the host has available when the graph is compiled
    # (pinned pages cannot be swapped; planning/host_limit.py), no limit for
    # a plan made for a named device profile. The copies past it stay on the
    # device, the plan says which. A given limit is also checked at run
    # time: a copy that would pass it with every graph's copies together
    # stays on the device, with a warning.
    host_memory_limit: Optional[int] = None
    # Passes to skip: "offload" turns the rewrite off while still recording a
    # plan; "host_pool" allocates each host copy on its own from PyTorch's
    # pinned allocator (which rounds sizes up to a power of two) instead of
    # one buffer of the plan's size; "invariants" skips the rewrite's check.
    disabled_passes: tuple[PassName, ...] = ()

    def __post_init__(self) -> None:
        _check_counts(self)
        object.__setattr__(self, "schedule", ScheduleKind.parse(self.schedule, "OffloadConfig.schedule"))
        object.__setattr__(self, "mode", Mode.parse(self.mode, "OffloadConfig.mode"))
        _check_overhead(self)
        _check_speeds_and_limits(self)
        _check_budget(self)
        object.__setattr__(self, "disabled_passes", _parse_passes(self.disabled_passes))

    def __repr__(self) -> str:
        """The fields set away from their defaults only: torch.compile puts
        the backend's repr ahead of a backend error, which must stay readable."""
        return f"OffloadConfig({', '.join(f'{k}={v!r}' for k, v in _changed_fields(self))})"

    def replace(self, **overrides: object) -> "OffloadConfig":
        names = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(
                f"unknown OffloadConfig option {sorted(unknown)}; valid options: {sorted(names)}"
            )
        mode = Mode.parse(overrides.get("mode", self.mode), "OffloadConfig.mode")
        if mode != Mode.AUTO and "max_overhead" not in overrides:
            # A config leaving mode="auto" leaves its overhead behind, given or
            # defaulted: under another mode it would be refused.
            overrides["max_overhead"] = None
        return dataclasses.replace(self, **overrides)

    def cache_key(self) -> str:
        return repr(dataclasses.astuple(self))

    def simulator_settings(self) -> tuple:
        """The settings whose effect a calibration's scales absorb: the
        simulator's base (configured bandwidth, kernel timing) and what the
        runtime ops cost (pinned copies, the host pool). A calibration
        fitted under other ones is not carried over (``feedback.memory.graph_key``)."""
        return (
            self.bandwidth_gbps, self.measure_kernels, self.pin_memory, PassName.HOST_POOL in self.disabled_passes,
        )


def _changed_fields(config: OffloadConfig) -> list[tuple[str, object]]:
    """(name, value) of each field away from its default; max_overhead
    resolved to its default under mode="auto" counts as the default."""
    changed = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name == "max_overhead" and value == DEFAULT_MAX_OVERHEAD:
            continue
        if value != field.default:
            changed.append((field.name, value.value if isinstance(value, (Mode, ScheduleKind)) else value))
    return changed


def _is_int(value: object) -> bool:
    """An int that is not a bool (bool is an int subclass)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_counts(config: OffloadConfig) -> None:
    for name in ("min_bytes", "prefetch", "keep_first_in_backward"):
        value = getattr(config, name)
        if not _is_int(value) or value < 0:
            raise ValueError(f"OffloadConfig.{name} must be an int >= 0, got {value!r}")
    if not _is_int(config.max_inflight) or config.max_inflight < 1:
        raise ValueError(f"OffloadConfig.max_inflight must be an int >= 1, got {config.max_inflight!r}")
    for name in ("pin_memory", "keep_if_no_gain", "measure_kernels"):
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise ValueError(f"OffloadConfig.{name} must be True or False (a bool), got {value!r}")


def _check_speeds_and_limits(config: OffloadConfig) -> None:
    if config.prefetch_bytes is not None and (not _is_int(config.prefetch_bytes) or config.prefetch_bytes < 0):
        raise ValueError(f"OffloadConfig.prefetch_bytes must be None or an int >= 0, got {config.prefetch_bytes!r}")
    bandwidth = config.bandwidth_gbps
    figures = bandwidth if isinstance(bandwidth, tuple) and len(bandwidth) == 2 else (bandwidth,)
    if bandwidth is not None and not all(_is_number(v) and math.isfinite(v) and v > 0 for v in figures):
        raise ValueError(
            "OffloadConfig.bandwidth_gbps must be None, a finite number > 0 or a (device->host, host->device) "
            f"pair of them, got {bandwidth!r}"
        )
    headroom = config.reload_headroom
    if headroom is not None and (
        not _is_number(headroom) or headroom < 0 or (isinstance(headroom, float) and not headroom <= 1)
    ):
        raise ValueError(
            "OffloadConfig.reload_headroom must be None (2 % under schedule='cost'), bytes (an int >= 0) "
            f"or a fraction of the bytes the plan offloads (a float in [0, 1]), got {headroom!r}"
        )
    if config.reload_headroom and config.schedule != ScheduleKind.COST:
        raise ValueError(
            f"OffloadConfig.reload_headroom={config.reload_headroom} applies to schedule='cost' only "
            f"(schedule is {config.schedule.value!r}); under schedule='fixed' use prefetch"
        )
    limit = config.host_memory_limit
    if limit is not None and (not _is_int(limit) or limit < 0):
        raise ValueError(f"OffloadConfig.host_memory_limit must be None or an int >= 0, got {limit!r}")


def _check_overhead(config: OffloadConfig) -> None:
    """max_overhead: given only with mode="auto" (like memory_budget with
    mode="budget"); under "auto" None resolves to DEFAULT_MAX_OVERHEAD."""
    overhead = config.max_overhead
    if overhead is None:
        if config.mode == Mode.AUTO:
            object.__setattr__(config, "max_overhead", DEFAULT_MAX_OVERHEAD)
        return
    # inf is meaningful here (any slowdown); nan is not.
    if not _is_number(overhead) or math.isnan(overhead) or overhead < 0:
        raise ValueError(
            "OffloadConfig.max_overhead must be a number >= 0 (0.02 = 2 %; inf: any "
            f"slowdown), got {overhead!r}"
        )
    if config.mode != Mode.AUTO:
        raise ValueError(
            f"OffloadConfig.max_overhead applies to mode='auto' only (mode is {config.mode.value!r}); "
            "pass mode='auto' with it, or leave it out"
        )


def _check_budget(config: OffloadConfig) -> None:
    budget = config.memory_budget
    if config.mode == Mode.BUDGET and budget is None:
        raise ValueError(
            "OffloadConfig(mode='budget') needs memory_budget: bytes (an int) or a fraction "
            "of the peak without offload (a float in (0, 1])"
        )
    if budget is not None and (
        not _is_number(budget)
        or (isinstance(budget, int) and budget < 0)
        or (isinstance(budget, float) and not 0 < budget <= 1)
    ):
        raise ValueError(
            "OffloadConfig.memory_budget must be bytes (an int >= 0) or a fraction of the peak "
            f"without offload (a float in (0, 1]), got {budget!r}"
        )
    if budget is not None and config.mode != Mode.BUDGET:
        raise ValueError(f"OffloadConfig.memory_budget applies to mode='budget' only (mode is {config.mode!r})")


def _parse_passes(passes: object) -> tuple[PassName, ...]:
    if isinstance(passes, str):
        passes = (passes,)
    if not isinstance(passes, (tuple, list)):
        raise ValueError(
            "OffloadConfig.disabled_passes must be a tuple or list of pass names from "
            f"{PassName.words()} (() disables none), got {passes!r}"
        )
    unknown = [p for p in passes if not isinstance(p, str) or p not in PassName.words()]
    if unknown:
        raise ValueError(
            f"OffloadConfig.disabled_passes: unknown pass {sorted(unknown, key=repr)}; "
            f"known passes are {PassName.words()}"
        )
    return tuple(PassName(p) for p in passes)
