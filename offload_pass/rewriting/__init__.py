"""Stage 4, rewriting: the plan into the graphs.

Takes: the forward and backward graphs and the plan.
Gives: the same graphs with offload / release in forward and reload / wait
in backward, checked by ``invariants`` after every rewrite.
"""
