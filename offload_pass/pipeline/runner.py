"""The runner of any pass list: the one place passes are skipped, timed and logged.

Takes: passes (``Pass``: a name and a function ``(state, ctx) -> state``),
a ``PassState`` and a ``PassContext`` (``pipeline.passes``). Gives
``run_passes``: the state after them, each disabled one by name
(``OffloadConfig.disabled_passes``) skipped or replaced by its
``when_disabled``, each logged at DEBUG with its time and its change to the
graphs' call_function counts, and each that changed a graph named in the
state's ``changed_by``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import torch.fx as fx

if TYPE_CHECKING:
    from offload_pass.pipeline.passes import PassContext, PassState

__all__ = ["Pass", "PassFn", "run_passes"]

log = logging.getLogger("offload_pass")

PassFn = Callable[["PassState", "PassContext"], "PassState"]


@dataclasses.dataclass(frozen=True)
class Pass:
    """A named pass; ``when_disabled`` runs in its place where its name is
    in ``disabled_passes``; it is skipped where a pass it ``requires`` is."""

    name: str
    run: PassFn
    when_disabled: Optional[PassFn] = None
    requires: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _OpCounts:
    """A graph's call_function targets counted by identity (the targets
    outlive the pipeline; naming each of thousands of nodes at every pass
    boundary cost more than some passes), with the targets to name them by."""

    counts: Counter
    targets: dict

    @classmethod
    def of(cls, gm: Optional[fx.GraphModule]) -> "_OpCounts":
        if gm is None:
            return cls(Counter(), {})
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        return cls(Counter(map(id, targets)), {id(t): t for t in targets})

    def named(self) -> Counter:
        return Counter({str(self.targets[k]): v for k, v in self.counts.items()})


def run_passes(passes: Sequence[Pass], state: PassState, ctx: PassContext) -> PassState:
    """Run ``passes`` in order: each disabled one by name skipped (or its
    ``when_disabled`` run), each logged at DEBUG with its time and its
    change to the forward's and backward's call_function counts; a pass
    that changed either graph (its object or its counts) joins the state's
    ``changed_by``."""
    disabled = set(ctx.config.disabled_passes)
    counts = (_OpCounts.of(state.fw_gm), _OpCounts.of(state.bw_gm))
    for p in passes:
        if any(r in disabled for r in p.requires) or (p.name in disabled and p.when_disabled is None):
            log.debug("offload_pass: %s pass %s disabled", ctx.graph_id, p.name)
            continue
        run = p.when_disabled if p.name in disabled else p.run
        graphs = (state.fw_gm, state.bw_gm)
        start = time.perf_counter()
        state = run(state, ctx)  # type: ignore[misc]
        after = (_OpCounts.of(state.fw_gm), _OpCounts.of(state.bw_gm))
        if [a.counts for a in after] != [c.counts for c in counts] or graphs != (state.fw_gm, state.bw_gm):
            state = dataclasses.replace(state, changed_by=(*state.changed_by, p.name))
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "offload_pass: %s pass %s: %.1f ms; forward %s, backward %s", ctx.graph_id, p.name,
                (time.perf_counter() - start) * 1e3, _change(counts[0].named(), after[0].named()),
                _change(counts[1].named(), after[1].named()),
            )
        counts = after
        if state.stopped:
            break
    return state


def _change(before: Counter, after: Counter) -> str:
    """An op-count change: "+3 offload_pass.offload, -1 aten.add" ("unchanged": none)."""
    diff = {k: after[k] - before[k] for k in set(before) | set(after) if after[k] != before[k]}
    return ", ".join(f"{v:+d} {k}" for k, v in sorted(diff.items())) or "unchanged"
