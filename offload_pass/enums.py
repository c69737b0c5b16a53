"""The closed sets of words the package decides with, as enums.

Each member is also its word (a ``str``): it prints, formats, hashes and
compares as that word, so plan tables, messages and user input
(``OffloadConfig(mode="auto")``) read as before, while code names the choice
(``Decision.OFFLOAD``) and a misspelt word fails where it is parsed.
"""

from __future__ import annotations

import enum

__all__ = [
    "CopyKind", "Decision", "Mode", "NoteCode", "PassName", "PlacementCode", "ReplanReason", "SavedKind", "ScheduleKind",
    "Word",
]


class Word(str, enum.Enum):
    """A str enum that behaves as its value everywhere a str would."""

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    __hash__ = str.__hash__

    @classmethod
    def words(cls) -> list[str]:
        return [m.value for m in cls]

    @classmethod
    def parse(cls, value: object, what: str) -> "Word":
        """``value`` as a member; a ValueError naming ``what`` and the valid words otherwise."""
        if isinstance(value, str) and value in cls.words():
            return cls(value)
        raise ValueError(f"{what} must be one of {cls.words()}, got {value!r}")


class Mode(Word):
    """OffloadConfig.mode: which marked tensors are offloaded."""

    MARKED = "marked"  # every one the marks ask for (less what keep_if_no_gain trims)
    AUTO = "auto"  # the set freeing the most at the peak within max_overhead
    BUDGET = "budget"  # the set reaching memory_budget with the least slowdown


class ScheduleKind(Word):
    """OffloadConfig.schedule: where releases and reloads go."""

    COST = "cost"  # from the cost model: node times, copy bandwidth, simulated memory
    FIXED = "fixed"  # releases max_inflight copies later, reloads prefetch ahead


class PassName(Word):
    """Passes that OffloadConfig.disabled_passes can turn off."""

    OFFLOAD = "offload"  # the rewrite; off, the plan is still recorded
    HOST_POOL = "host_pool"  # one host buffer per call; off, each copy allocated alone
    INVARIANTS = "invariants"  # the check of the rewritten graphs
    RECOMPUTE = "recompute"  # mode="budget": recompute where offload alone cannot reach the budget
    PRUNE = "prune"  # mode="budget": partitions that cannot be kept are neither made (block cuts) nor planned
    MIXED_CUTS = "mixed_cuts"  # mode="budget": block cuts mixed with the fastest level (up to 7 more partitions)
    CALIBRATE = "calibrate"  # on CUDA: the feedback loop (measure calls, plan again where a promise or prediction missed)
    CALIBRATION_CACHE = "calibration_cache"  # on CUDA: fitted calibrations kept on disk for later runs (feedback/disk.py)


class Decision(Word):
    """A plan entry's decision for one saved tensor."""

    OFFLOAD = "offload"  # copied to host in the forward, reloaded for the backward
    KEEP = "keep"  # stays on device
    RECOMPUTE = "recompute"  # not saved: the partitioner recomputes it in backward (mode="budget")


class CopyKind(Word):
    """How a copy group moves its members (plan.OffloadGroup.copy)."""

    TENSOR = "tensor"  # the single member as it is
    STORAGE = "storage"  # the storage owner once; members rebuilt as views
    EACH = "each"  # members one by one


class SavedKind(Word):
    """What a saved tensor is (saved_set.SavedTensor.kind)."""

    ACTIVATION = "activation"  # computed by the forward graph
    PARAMETER = "parameter"  # a static graph input (a parameter or buffer)
    INPUT = "input"  # any other graph input
    OUTPUT = "output"  # computed, and also an output of the forward graph
    SYMINT = "symint"  # a symbolic int, not a tensor


class ReplanReason(Word):
    """Why a graph was planned once more on the device (feedback/policy.py);
    each at most once per graph."""

    PREDICTION = "prediction"  # the predicted step or peak off by more than REPLAN_TOLERANCE, or the stalls by STALL_TOLERANCE (first re-plan only)
    BUDGET = "budget"  # mode="budget": the measured peak over the budget the plan predicted it within
    OVERHEAD = "overhead"  # mode="auto": the measured step is over max_overhead (+ STALL_TOLERANCE)
    ROOM = "room"  # mode="auto": measured under max_overhead by more than ROOM_MARGIN, with copies left to choose
    PEAK = "peak"  # a re-plan's own peak off its prediction by more than REPLAN_TOLERANCE (second re-plan only)


class NoteCode(Word):
    """What the selection or a search pass of the pipeline decided (planning/notes.py renders each)."""

    SELECTION_AUTO = "selection_auto"  # mode="auto": the selection chose within the slowdown allowed
    SELECTION_MEASURED = "selection_measured"  # mode="auto": the copies measured within max_overhead before, chosen
    SELECTION_BUDGET = "selection_budget"  # mode="budget": the selection chose to reach the budget
    OUT_OF_REACH = "out_of_reach"  # mode="budget": the predicted peak stays over the budget
    FALLBACK = "fallback"  # mode="auto": plain Inductor's compile runs instead of a plan measured over the limit

    RECOMPUTE = "recompute"  # mode="budget": partitions tried per activation_memory_budget, one kept
    AUTO_PREFIX = "auto_prefix"  # mode="auto": the longest prefix of the selection predicted within the limit
    AUTO_WITHIN_SHARE = "auto_within_share"  # mode="auto": the selection's choice within a share of the limit
    MEASURED_FLOOR = "measured_floor"  # mode="auto": a set of copies measured within max_overhead runs instead


class PlacementCode(Word):
    """Where the host pool's pinned pages go (``runtime.numa.Placement``)."""

    PLACED = "placed"  # on the GPU's NUMA node; detail: none
    ONE_NODE = "one_node"  # the host has a single NUMA node: nothing to choose
    UNKNOWN_DEVICE = "unknown_device"  # detail: no driver record of the GPU, or no NUMA node in sysfs
    UNSUPPORTED = "unsupported"  # detail: the machine, for which no mbind call number is known
    FAILED = "failed"  # detail: the error mbind returned
