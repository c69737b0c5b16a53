"""Stage 1, marking: what the user asked.

Takes: the user's model, patterns, regions and tensors.
Gives: marks (module forwards that carry a mark into the traced graph,
per-tensor marks, registered roles of fused ops), read by ``annotation``.
"""
