"""The compile pipeline: an ordered list of named passes over one joint graph.

``passes.ATTEMPT_PASSES`` turn the joint graph into a planned, rewritten
forward/backward pair: partition (PyTorch's partitioner, its CSE made
once per joint: ``joint_cse``), saved_set, plan, predict, prune (a
partition that cannot be kept stops there), schedule, offload (the
rewrite), invariants (its check), predict_after.
``search.SEARCH_PASSES`` then choose among such attempts: recompute
(mode="budget", its partitions tried through ``attempts`` and
``deep_cuts``), auto_within_overhead and measured_floor (mode="auto"),
budget_check. Every pass has the signature ``(state, ctx) -> state``;
``passes.run_passes`` runs a list, skips those ``disabled_passes`` names
(offload, invariants, recompute, prune) and logs each at DEBUG.
``search.run_pipeline`` runs both, Python's collector held off the objects
alive before it (``gc_pause``); the backend (``backend.py``) records the
result.
"""
