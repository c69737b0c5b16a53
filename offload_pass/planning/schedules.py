"""Stage 3c, schedules: where each release and reload goes.

Takes: the copies' lifetimes (``lifetimes.CopyLifetime``), the node times the
step simulator uses (``step_model.NodeTimes``) and the device profile
(``cost_model``), the simulated memory with every copy off the device between
its uses, and the ceiling (that profile's peak; for the reloads, plus
``OffloadConfig.reload_headroom`` up to a budget: ``scheduling``). Gives, from
two modules:

- ``release_points``: ``schedule_releases`` / ``release_schedule``, each
  release where its copy-out is predicted to have landed;
- ``reload_points``: ``schedule_reloads`` / ``reload_schedule``, each reload
  issued just early enough to land before its consumer (reloads queue on one
  host->device stream), and ``reload_ceiling``.

Neither may lift device memory above the ceiling.
"""

from __future__ import annotations

from offload_pass.planning.release_points import CopyOut, release_schedule, schedule_releases
from offload_pass.planning.reload_points import RELOAD_MARGIN, Reload, reload_ceiling, reload_schedule, schedule_reloads

__all__ = [
    "CopyOut", "RELOAD_MARGIN", "Reload", "release_schedule", "reload_ceiling", "reload_schedule", "schedule_releases",
    "schedule_reloads",
]
