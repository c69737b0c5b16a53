"""What the compile-time stages remember between calls, all of it in one object.

Takes: nothing; the marking and planning stages and the backend read and
write it. Gives ``Registry`` and ``REGISTRY``, the one instance the package
uses. It holds two kinds of things:

- registrations, declared through the public API or by marking a model:
  the roles of fused ops' saved tensors (``register_saved_roles``), the
  scratch memory of ops (``register_workspace``, which also holds the
  built-in attention kernels), and the qualified names of the modules of
  every model the user marked (``offload_modules`` and the other markers).
  ``reset()`` keeps them: a user declares them once, usually at import, and
  none could be rebuilt without the user's call (the module names already
  go with their models, by weak reference);
- caches and once-only warnings: the measured device profiles and kernel
  times, the calibrations fitted per graph (carried to later compiles of
  the graph, ``compiled_graph.carried_calibration``), the sets of copies
  mode="auto" ran of each graph with what they measured
  (``calibration.measured_floor``), and the "marked but nothing offloaded"
  warnings already given. ``reset()`` drops
  them.

Why not a part of ``runtime.RuntimeState``: the runtime is the last stage
(the ops the rewritten graphs call) and the stages before it must not import
it; this module imports nothing of the package, so every stage may. The two
also reset at different times: the runtime state between steps, this one
only when a test or a user wants a fresh compile-time state. The marks
running now have their own object (``marking.mark_keeping.MARKS``), which
lives with the Dynamo internals that need it.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    import torch.fx as fx

    from offload_pass.marking.roles import FusedRoles
    from offload_pass.planning.calibration import Calibration, MeasuredSet
    from offload_pass.planning.cost_model import DeviceProfile
    from offload_pass.planning.kernel_timing import KernelTime

__all__ = ["REGISTRY", "Registry"]


@dataclasses.dataclass
class Registry:
    # Registrations (kept by reset).
    # Fused op's packet name (``ns::name``) -> the roles of its tensors.
    saved_roles: dict[str, FusedRoles] = dataclasses.field(default_factory=dict)
    # Op (OpOverload or packet) -> bytes of scratch memory it holds at a node.
    workspaces: dict[object, Callable[[fx.Node], int]] = dataclasses.field(default_factory=dict)
    # id(module or parameter) -> (weak reference to it, qualified name from
    # the marked root, weak reference to that root). The weak reference tells
    # a live object from a dead one whose id was reused.
    module_names: dict[int, tuple[weakref.ref, str, weakref.ref]] = dataclasses.field(default_factory=dict)

    # Caches and warnings given (dropped by reset).
    # "device name | torch version | profile version" -> measured speeds.
    device_profiles: dict[str, DeviceProfile] = dataclasses.field(default_factory=dict)
    # Extern kernel signature -> its measured device and host times (None:
    # could not be run alone), planning/kernel_timing.py.
    kernel_times: dict[str, Optional[KernelTime]] = dataclasses.field(default_factory=dict)
    # compiled_graph.graph_key -> the scales of the latest calibration fitted
    # for that graph (fitted against the profiles and kernel times above).
    calibrations: dict[str, Calibration] = dataclasses.field(default_factory=dict)
    # compiled_graph.graph_key -> the sets of copies mode="auto" ran of that
    # graph, each with what its runs measured against plain Inductor's graph
    # (calibration.measured_floor reads them).
    measured_sets: dict[str, dict[frozenset[str], MeasuredSet]] = dataclasses.field(default_factory=dict)
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
