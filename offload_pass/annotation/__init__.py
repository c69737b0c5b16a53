"""Stage 2, annotation: the marks onto the joint graph's nodes.

Takes: the joint forward/backward graph whose nodes carry
``node.meta["custom"]`` marks (Dynamo and AOTAutograd carry them there).
Gives: a ``Request`` per node under ``meta_keys.REQUEST``, per-tensor marks
under ``meta_keys.TENSOR_REQUEST``, and the MLP roles found by structure.
"""
