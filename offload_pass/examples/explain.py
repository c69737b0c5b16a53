"""python -m offload_pass.examples.explain MODULE:FACTORY — a plan, explained, on CPU.

``FACTORY`` is a callable in an importable module that returns
``(model, inputs)``: a model with its offload marks already set, and a tuple
of example inputs. The model is compiled on CPU with an offload backend, one
forward and backward run (the output is summed if it is not a scalar), and
for each compiled graph the plan table and the diff of the rewritten forward
and backward graphs are printed. No GPU needed.

  python -m offload_pass.examples.explain offload_pass.examples.explain:example
"""

from __future__ import annotations

import argparse
import importlib
import sys

import torch

from offload_pass.backend import make_backend
from offload_pass.reporting.graph_text import graph_diff


def example():
    """A two-layer decoder with attention and MLP marked (the default factory)."""
    from offload_pass.marking.markers import offload_modules
    from offload_pass.examples.models import make_decoder

    model = make_decoder(layers=2, hidden=32, heads=4)
    offload_modules(model, "layers.*.attn", "layers.*.mlp")
    return model, (torch.randn(2, 16, 32),)


def _load(spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"explain: expected MODULE:FACTORY (e.g. mypkg.models:build), got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SystemExit(f"explain: cannot import {module_name!r}: {error}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SystemExit(f"explain: {module_name} has no callable {attr!r}")
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise SystemExit(f"explain: {spec}() must return (model, inputs), got {type(made).__name__}")
    model, inputs = made
    return model, inputs if isinstance(inputs, tuple) else (inputs,)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", nargs="?", default="offload_pass.examples.explain:example")
    p.add_argument("--min-bytes", type=int, default=0, help="OffloadConfig.min_bytes (default 0 on CPU)")
    p.add_argument("--graphs", choices=["diff", "full", "none"], default="diff")
    args = p.parse_args(argv)
    sys.path.insert(0, "")
    model, inputs = _load(args.factory)
    backend = make_backend(min_bytes=args.min_bytes, keep_graphs=args.graphs != "none")
    out = torch.compile(model, backend=backend)(*inputs)
    loss = out if isinstance(out, torch.Tensor) and out.dim() == 0 else sum(
        o.float().sum() for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)
    )
    loss.backward()
    if not backend.plans:
        print("explain: nothing was compiled with gradients (no backward graph, so no plan)")
        return 1
    for record in backend.records:
        plan = record.plan
        print(plan)
        print()
        graphs = record.graph_texts
        if args.graphs == "diff":
            print(graph_diff(graphs.forward_before, graphs.forward, f"{plan.graph_id} forward"))
            print(graph_diff(graphs.backward_before, graphs.backward, f"{plan.graph_id} backward"))
        elif args.graphs == "full":
            print(f"## {plan.graph_id} forward\n{graphs.forward}\n## {plan.graph_id} backward\n{graphs.backward}")
    print(backend.last_step())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
