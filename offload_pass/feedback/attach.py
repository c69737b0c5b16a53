"""The feedback loop's entry: a compiled graph that measures itself.

Takes: from the backend, its ``GraphHost`` and ``Pipeline`` (the one
interface back to the compile pipeline) and the Dynamo graph. Gives:
``calibrated_graph``, which compiles the graph once, under the calibration
an earlier compile of the same graph fitted where there is one
(``memory.carried_calibration``), and returns the ``MeasuredGraph`` that
measures its calls and plans it again.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Optional, Sequence

import torch
import torch.fx as fx

from offload_pass.compiled_graph import CompiledGraph, GraphHost
from offload_pass.feedback import disk, memory, recompile
from offload_pass.feedback.loop import MeasuredGraph
from offload_pass.marking.mark import Mark

__all__ = ["calibrated_graph"]

log = logging.getLogger("offload_pass")


def calibrated_graph(
    host: GraphHost, pipeline: recompile.Pipeline, gm: fx.GraphModule, example_inputs: Sequence[object],
    device: torch.device, active: tuple[Mark, ...], settings: tuple, auto: Optional[float],
    mode: Optional[str], options: Optional[dict[str, Any]], persist: bool = False,
) -> CompiledGraph:
    """Compile ``gm`` through ``pipeline`` and hand Dynamo the graph that
    measures it. ``settings``: what else a calibration's scales absorb
    (``memory.graph_key``); ``auto``: mode="auto"'s max_overhead (None: another mode);
    ``persist``: keep fitted calibrations on disk for later runs (``disk.store_for``)."""
    pristine, why_not = recompile.pristine_copy(gm)
    key = memory.graph_key(gm, example_inputs, device, settings)
    store = disk.store_for(device, persist)
    carried = memory.carried_calibration(key, store)

    def floor() -> Optional[memory.MeasuredSet]:
        return None if auto is None else memory.floor_for(key, auto)

    compiled = pipeline.compile(gm, example_inputs, carried, keep_simulator=pristine is not None, floor=floor())
    if carried is not None and compiled.plan_index is not None:
        log.info("offload_pass: graph %d planned under the calibration of an earlier compile, %s",
                 compiled.plan_index, carried.describe())
    if compiled.plan_index is None:
        return CompiledGraph(host, compiled.fn, active, None)
    again = recompile.Recompile(
        device, compiled.simulate,
        None if pristine is None else lambda calibration, inputs, prior: pipeline.compile(
            recompile.graph_copy(pristine), inputs, calibration, keep_simulator=True, prior=prior, floor=floor(),
        ),
        pipeline.record_plain, why_not, key,
        # mode="auto" holds each plan to plain Inductor's compile of the same graph, measured beside it.
        None if pristine is None or auto is None else functools.partial(
            recompile.compile_plain, pristine, recompile.user_patches(mode, options)
        ),
        store,
    )
    return MeasuredGraph(host, compiled.fn, active, compiled.plan_index, again)
