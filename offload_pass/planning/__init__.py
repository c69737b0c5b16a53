"""Stage 3, planning: which saved tensors go to host memory, and when.

Takes: the partitioned forward and backward graphs with their annotations.
Gives: an ``OffloadPlan`` (per saved tensor: keep, offload or recompute, and
the reason code; copy groups; release and reload points) from the saved set,
the copies' lifetimes, the simulated memory timeline and the cost model.
Pure decisions over plain data; no graph is edited here.

Where each decision's rule lives: ``reasons.Reason`` names, per code, the
function that decides it (``plan``: eligibility, storage groups, the no-gain
trim; ``scheduling`` with ``selection_auto`` / ``selection_budget``: what
mode="auto" / "budget" chooses; ``recompute``: which partition; the
schedules ``release_points`` / ``reload_points``: where each copy moves).
"""
