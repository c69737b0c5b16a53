"""What the backend did for one forward/backward pair it compiled.

Takes: what the compile pipeline produced for one compile. Gives: a
``CompileRecord``: the plan (whose ``baseline`` / ``prediction`` are the step
simulator's figures), the memory timelines before and after the rewrite,
the search passes' notes (``pipeline/notes.py``: codes with their figures),
the names of the passes that changed the graphs, in order, and the graph
texts (``GraphTexts``) when the backend was asked to keep them
(``OffloadBackend(keep_graphs=True)``): the texts are as large as the graphs
and a long run compiles many, so they are not kept by default.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from offload_pass.planning.plan import OffloadPlan
from offload_pass.planning.timeline import Timeline

__all__ = ["CompileRecord", "GraphTexts"]


@dataclasses.dataclass(frozen=True)
class GraphTexts:
    """``reporting.graph_text.render_graph`` of both graphs, before and after
    the rewrite; ``graph_diff(texts.forward_before, texts.forward)`` shows
    what the pass changed."""

    forward_before: str
    backward_before: str
    forward: str
    backward: str


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    plan: OffloadPlan
    timeline_before: Timeline
    timeline_after: Timeline
    graph_texts: Optional[GraphTexts] = None
    notes: tuple = ()  # pipeline.notes.SelectionNote of each search pass that changed the selection
    made_by: tuple[str, ...] = ()  # the passes that changed the graphs, in order

    @property
    def graphs(self) -> GraphTexts:
        """The graph texts; an error naming the switch when they were not kept."""
        if self.graph_texts is None:
            raise ValueError(
                f"offload_pass: the graph texts of {self.plan.graph_id} were not kept; compile with "
                "OffloadBackend(keep_graphs=True) or make_backend(keep_graphs=True) to keep them"
            )
        return self.graph_texts
