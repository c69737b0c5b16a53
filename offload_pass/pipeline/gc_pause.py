"""Python's cyclic garbage collector held off the objects that outlive a planning.

Takes: nothing; ``run_pipeline`` enters ``collections_paused`` around the
whole pipeline and calls ``between_attempts`` after each attempt. Gives:
inside it, the objects alive when it was entered frozen
(``gc.freeze``: no collection walks them) and automatic collection off;
after each attempt, one collection of what the pipeline made since the
last, the attempts' garbage (graphs are cycles: nodes and their graph
refer to each other) freed there. On leaving, the frozen objects are
given back to the collector and its earlier state restored.

Why: a planning on an 8B-sized graph allocates millions of objects
(partitions, fake values, rewritten graphs), and the collector's full
collections walk every object alive, the joint graph, the model and the
caller's whole heap included, each time a share of new objects has
survived: on the 8B shape at 64k tokens that is about a tenth of the
planning's time, spent finding nothing to free in objects the planning
never drops. Nothing else changes: a collection only frees what no one
can reach.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["between_attempts", "collections_paused"]

# How many ``collections_paused`` are entered: one entered inside another leaves the outer one in charge.
_DEPTH = [0]


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """The module docstring's pause, for the ``with`` block; nested entries are no-ops."""
    if _DEPTH[0]:
        _DEPTH[0] += 1
        try:
            yield
        finally:
            _DEPTH[0] -= 1
        return
    enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    _DEPTH[0] = 1
    try:
        yield
    finally:
        _DEPTH[0] = 0
        gc.unfreeze()
        if enabled:
            gc.enable()


def between_attempts() -> None:
    """One collection of the objects made since the pause began, where one is held; nothing otherwise."""
    if _DEPTH[0]:
        gc.collect()
