"""Stage 3d, automatic selection (``OffloadConfig(mode="auto" | "budget")``):
which of the candidate copies to make.

Takes: a ``StepWithoutOffload`` (node times of the forward and backward
graphs, device bytes alive at each point without offload, the copy
bandwidth per direction, the runtime ops' costs) and per candidate copy its
bytes, producer, last forward use and first backward consumer. Gives: the
chosen set, with the search model's estimate of its step time and peak.

- ``selection_step``: the step and the candidates, as plain data;
- ``selection_model``: ``simulate_offload``, the search model's estimate of
  one set (it places releases and reloads by the rewrite's own rules);
- ``selection_auto``: ``choose_auto``, the most peak reduction with the
  predicted step within ``max_overhead`` of no offload;
- ``selection_budget``: ``choose_for_budget``, a peak budget reached with
  the least predicted step.

The estimates only choose: the plan reports the step simulator's prediction
over the rewritten graphs (``step_model``).
"""

from __future__ import annotations

from offload_pass.planning.selection_auto import choose_auto
from offload_pass.planning.selection_budget import choose_for_budget
from offload_pass.planning.selection_model import simulate_offload
from offload_pass.planning.selection_step import Candidate, Estimate, StepWithoutOffload, candidates

__all__ = ["Candidate", "Estimate", "StepWithoutOffload", "candidates", "simulate_offload", "choose_auto", "choose_for_budget"]
