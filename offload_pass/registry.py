"""Process-wide tables of the compile-time stages, all of them in one object.

Takes: nothing; the marking and planning stages, the backend and the
feedback loop read and write it. Gives ``Registry`` and ``REGISTRY``, the one
instance the package uses. Two kinds of tables:

- registrations, declared through the public API or by marking a model:
  the roles of fused ops' saved tensors (``register_saved_roles``), the
  scratch memory of ops (``register_workspace``), and the qualified names of
  the modules of every model the user marked. ``reset()`` keeps them: none
  could be rebuilt without the user's call;
- caches and once-only warnings: measured device profiles and kernel times,
  the calibrations and measured sets of copies the feedback loop keeps per
  graph (``feedback/memory.py``), and the warnings given. ``reset()`` drops them.

Plain tables only: this module imports nothing of the package, so every
module may import it. The runtime state (``runtime.RuntimeState``) resets
between steps, this one only when a test or a user wants a fresh state.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable

__all__ = ["REGISTRY", "Registry"]


@dataclasses.dataclass
class Registry:
    # Registrations (kept by reset).
    # Fused op's packet name (``ns::name``) -> the roles of its tensors (marking.roles.FusedRoles).
    saved_roles: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Op (OpOverload or packet) -> bytes of scratch memory it holds at a node (a function of the fx.Node).
    workspaces: dict[object, Callable[[Any], int]] = dataclasses.field(default_factory=dict)
    # id(module or parameter) -> (weak reference to it, qualified name from
    # the marked root, weak reference to that root). The weak reference tells
    # a live object from a dead one whose id was reused.
    module_names: dict[int, tuple[weakref.ref, str, weakref.ref]] = dataclasses.field(default_factory=dict)

    # Caches and warnings given (dropped by reset).
    # "device name | torch version | profile version" -> measured speeds (planning.cost_model.DeviceProfile).
    device_profiles: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Extern kernel signature -> its measured device and host times (None:
    # could not be run alone), planning/kernel_timing.py.
    kernel_times: dict[str, Any] = dataclasses.field(default_factory=dict)
    # feedback.memory.graph_key -> the scales of the latest calibration fitted
    # for that graph (planning.calibration.Calibration).
    calibrations: dict[str, Any] = dataclasses.field(default_factory=dict)
    # feedback.memory.graph_key -> the sets of copies mode="auto" ran of that
    # graph (feedback.memory.MeasuredSet by their storages).
    measured_sets: dict[str, dict[frozenset[str], Any]] = dataclasses.field(default_factory=dict)
    # "Marked for offload but nothing offloaded" warnings already given.
    warned_marks: set[str] = dataclasses.field(default_factory=set)

    def reset(self) -> None:
        """Drop the caches and the warnings given; keep the registrations."""
        self.device_profiles.clear()
        self.kernel_times.clear()
        self.calibrations.clear()
        self.measured_sets.clear()
        self.warned_marks.clear()


REGISTRY = Registry()
