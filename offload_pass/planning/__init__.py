"""Stage 3, planning: which saved tensors go to host memory, and when.

Takes: the partitioned forward and backward graphs with their annotations.
Gives: an ``OffloadPlan`` (per saved tensor: keep or offload, and why; copy
groups; release and reload points) from the saved set, the copies'
lifetimes, the simulated memory timeline and the cost model. Pure decisions
over plain data; no graph is edited here.
"""
