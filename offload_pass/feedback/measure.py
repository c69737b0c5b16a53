"""The measurement: one call of a compiled forward and its backward, timed on the device.

Takes: the start and end of a compiled forward's call (the feedback loop
reports them) and its outputs, whose autograd node runs the compiled
backward. Gives: ``CallMeasurement``: CUDA events on the compute stream
around the forward and around that backward node (autograd hooks; nothing
in the graphs changes), the host's wall time of each phase, each stall of
the compute stream on a copy (the runtime ops record them while
``STATE.wait_timing`` is set), the peak memory from the forward's start to
the backward's end (the caching allocator's counters, reset at the
forward's start, read only where the step runs this one graph once), and
the time from the previous measured call's backward end to this forward's
start. ``result()`` gives the ``MeasuredCall`` once the backward has run.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch
from torch.utils._pytree import tree_leaves

from offload_pass.feedback.check import MeasuredCall
from offload_pass.runtime.state import STATE

__all__ = ["CallMeasurement"]


def _compiled_backward_node(outputs: Any) -> Optional[object]:
    """The autograd node of the compiled function among the outputs' nodes
    (an output returned as a view of another has a view node in front of it)."""
    frontier = [leaf.grad_fn for leaf in tree_leaves(outputs) if isinstance(leaf, torch.Tensor) and leaf.grad_fn]
    for _ in range(4):
        for node in frontier:
            if "CompiledFunction" in type(node).__name__:
                return node
        frontier = [f for node in frontier for f, _ in node.next_functions if f is not None]
    return None


class CallMeasurement:
    """Measures call ``call`` of one compiled graph on ``device`` (CUDA)."""

    def __init__(
        self,
        device: torch.device,
        call: int,
        peak_note: str = "",
        previous: Optional["CallMeasurement"] = None,
        plain: bool = False,
    ) -> None:
        self.device = device
        self.call = call
        # What is measured: plain Inductor's graph (mode="auto"'s reference), else the plan's.
        self.plain = plain
        # The measurement of the call just before this one, whose backward's
        # end starts the time outside the graph (None: not measured).
        self.previous = previous if previous is not None and previous.call == call - 1 else None
        # Empty: measure the peak; else why not.
        self.peak_note = peak_note
        self.base = 0
        self.peak: Optional[int] = None
        self.events = {k: torch.cuda.Event(enable_timing=True) for k in ("forward", "forward_end", "backward", "backward_end")}
        self.waits: dict[str, list] = {"forward": [], "backward": []}
        self.failed: Optional[str] = None
        self.backward_ran = False
        self.host_start = 0.0
        self.host_forward_ms: Optional[float] = None
        self.host_backward_ms: Optional[float] = None

    def _record(self, name: str) -> None:
        self.events[name].record(torch.cuda.current_stream(self.device))

    def start_forward(self) -> None:
        if not self.peak_note:
            self.base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._record("forward")
        STATE.wait_timing = self.waits["forward"]
        self.host_start = time.perf_counter()

    def end_forward(self, outputs: Any) -> None:
        self.host_forward_ms = (time.perf_counter() - self.host_start) * 1e3
        STATE.wait_timing = None
        self._record("forward_end")
        node = _compiled_backward_node(outputs)
        if node is None:
            self.failed = "no output of the call leads to its backward"
            return
        node.register_prehook(self._backward_started)
        node.register_hook(self._backward_ended)

    def _backward_started(self, _grad_outputs: Any) -> None:
        self._record("backward")
        STATE.wait_timing = self.waits["backward"]
        self.host_start = time.perf_counter()

    def _backward_ended(self, _grad_inputs: Any, _grad_outputs: Any) -> None:
        self.host_backward_ms = (time.perf_counter() - self.host_start) * 1e3
        STATE.wait_timing = None
        self._record("backward_end")
        if not self.peak_note:
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.base
        self.backward_ran = True

    def _outside_ms(self) -> Optional[float]:
        """From the previous call's backward end to this forward's start
        (``MeasuredCall.outside_ms``), where the step runs this graph alone."""
        if self.peak_note or self.previous is None or not self.previous.backward_ran:
            return None
        return self.previous.events["backward_end"].elapsed_time(self.events["forward"])

    def result(self) -> Optional[MeasuredCall]:
        """The measured call, once its backward has run (None before)."""
        if not self.backward_ran:
            return None
        self.events["backward_end"].synchronize()
        e = self.events

        def stalled(phase: str) -> float:
            return sum(before.elapsed_time(after) for before, after in self.waits[phase])

        return MeasuredCall(
            call=self.call,
            forward_ms=e["forward"].elapsed_time(e["forward_end"]),
            backward_ms=e["backward"].elapsed_time(e["backward_end"]),
            forward_wait_ms=stalled("forward"),
            backward_wait_ms=stalled("backward"),
            peak=self.peak,
            peak_note=self.peak_note,
            between_ms=0.0 if self.peak_note else e["forward_end"].elapsed_time(e["backward"]),
            outside_ms=self._outside_ms(),
            host_forward_ms=self.host_forward_ms,
            host_backward_ms=self.host_backward_ms,
        )
