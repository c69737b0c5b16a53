"""One partition with offload planned on it, as the step simulator predicts it.

Takes: a recompute level and the prediction of the step planned on that
level's partition. Gives ``Trial``, plain data: what ``recompute`` chooses
among and what the plan keeps of every partition tried
(``OffloadPlan.recompute_trials``); and ``Pruned``: a partition the search
did not plan (or did not make) because its step could not beat one it had.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional, Union

from offload_pass.units import format_bytes

if TYPE_CHECKING:
    from offload_pass.planning.blocks import BlockCut

__all__ = ["Pruned", "Trial"]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One partition with offload planned on it, as the step simulator predicts it."""

    # The recompute it was partitioned under: PyTorch's activation_memory_budget
    # (a float; None: the default, 1.0) or a ``blocks.BlockCut``.
    level: Optional[Union[float, "BlockCut"]]
    step_ms: float
    peak: int  # predicted: the memory timeline's peak plus the calibration's peak_offset
    peak_offset: int = 0  # the calibration's offset counted into ``peak``
    copied_bytes: Optional[int] = None  # the bytes its offload plan copies to the host; None: not known

    def peak_at(self, peak_offset: int) -> int:
        """The trial's peak under another calibration's offset: its timeline's
        peak plus ``peak_offset`` (the offload planned on it left as it was)."""
        return self.peak - self.peak_offset + peak_offset

    def describe(self) -> str:
        level = "1.0 (none)" if self.level is None else format(self.level, "g")
        copied = f", {format_bytes(self.copied_bytes)} copied" if self.copied_bytes else ""
        return f"{level}: {self.step_ms:.2f} ms, {format_bytes(self.peak)}{copied}"


@dataclasses.dataclass(frozen=True)
class Pruned:
    """A partition mode="budget"'s search left unplanned: its step could not
    be below ``beat_ms``, the fastest it had found within the budget.
    ``bound_ms``: the least step it could have (``made`` False: the block
    cut's bound, ``cut_bound.cut_step_bound``, and it was not partitioned;
    True: its own step without offload, and offload was not planned on it)."""

    level: Union[float, "BlockCut"]
    bound_ms: float
    beat_ms: float
    made: bool

    def describe(self) -> str:
        what = "its step without offload" if self.made else "its bound before partitioning"
        return f"{format(self.level, 'g')} ({what} {self.bound_ms:.2f} ms > {self.beat_ms:.2f} ms)"
