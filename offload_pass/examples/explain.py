"""python -m offload_pass.examples.explain MODULE:FACTORY — a plan, explained, on CPU.

``FACTORY`` is a callable in an importable module that returns
``(model, inputs)``: a model with its offload marks already set, and its
example inputs (a tuple of arguments, one tensor, or a dict of keyword
arguments, as a Hugging Face model takes them). The model is compiled on CPU
with an offload backend, one forward and backward run (the loss: see
``loss_of``), and for each compiled graph the plan table and the diff of the
rewritten forward and backward graphs are printed. No GPU needed.

``--device-profile NAME`` plans offline instead (``offload_pass.offline``):
the factory may build its model on the meta device (no weight allocated;
one built elsewhere is moved there), the
plans are made for the GPU that profile names ("h100", "h200", "measured";
``planning/profiles.py``) and nothing runs; each graph's planning time is
printed beside PyTorch's partitioner's on the same joint graph.

  python -m offload_pass.examples.explain offload_pass.examples.explain:example
  python -m offload_pass.examples.explain --device-profile h200 --mode budget --memory-budget 0.5 \
      offload_pass.examples.models:llama3_8b_shape
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping

import torch

from offload_pass.backend import make_backend
from offload_pass.config import OffloadConfig
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
    if isinstance(inputs, Mapping):
        return model, (), dict(inputs)
    return model, inputs if isinstance(inputs, tuple) else (inputs,), {}


def _scalar(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 0 else t.float().sum()


def loss_of(out: object) -> torch.Tensor:
    """The scalar to run backward from: a Hugging Face ``ModelOutput``'s (or
    a dict's) ``loss``, else its first tensor, summed; a tuple's or list's
    tensors, each summed, added up; a tensor, summed unless a scalar."""
    if isinstance(out, torch.Tensor):
        return _scalar(out)
    if isinstance(out, Mapping):
        loss = out.get("loss")
        if isinstance(loss, torch.Tensor):
            return _scalar(loss)
        first = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
        if first is not None:
            return _scalar(first)
    elif isinstance(out, (tuple, list)):
        tensors = [o for o in out if isinstance(o, torch.Tensor)]
        if tensors:
            return sum((o.float().sum() for o in tensors[1:]), tensors[0].float().sum())
    raise SystemExit(
        f"explain: the model returned {type(out).__name__}, with no tensor to take a loss from; "
        "return a tensor, a tuple of tensors, a dict or a ModelOutput (its loss, else its first tensor)"
    )


def _print_graphs(plan_id: str, graphs, how: str) -> None:
    if how == "diff":
        print(graph_diff(graphs.forward_before, graphs.forward, f"{plan_id} forward"))
        print(graph_diff(graphs.backward_before, graphs.backward, f"{plan_id} backward"))
    elif how == "full":
        print(f"## {plan_id} forward\n{graphs.forward}\n## {plan_id} backward\n{graphs.backward}")


def _offline(model, args_in: tuple, kwargs_in: dict, config: OffloadConfig, profile: str, graphs: str) -> int:
    """Plan offline for ``profile`` and print the plans, graphs and times."""
    from offload_pass.offline import plan_offline

    model = model.to("meta")  # a factory that built it elsewhere: planned alike, its weights dropped
    try:
        made = plan_offline(model, args_in, kwargs_in, config=config, device_profile=profile, keep_graphs=graphs != "none")
    except ValueError as error:
        raise SystemExit(f"explain: {error}") from None
    for graph in made.graphs:
        if graph.graph_texts is not None:
            _print_graphs(graph.plan.graph_id, graph.graph_texts, graphs)
    print(made)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", nargs="?", default="offload_pass.examples.explain:example")
    p.add_argument("--min-bytes", type=int, default=0, help="OffloadConfig.min_bytes (default 0 on CPU)")
    p.add_argument("--graphs", choices=["diff", "full", "none"], default="diff")
    p.add_argument("--device-profile", help="plan offline for this GPU (h100, h200, measured); the model on meta")
    p.add_argument("--mode", default="marked", help="OffloadConfig.mode (marked, auto, budget)")
    p.add_argument("--memory-budget", type=float, help="OffloadConfig.memory_budget for --mode budget (a fraction)")
    args = p.parse_args(argv)
    sys.path.insert(0, "")
    model, args_in, kwargs_in = _load(args.factory)
    overrides = {"min_bytes": args.min_bytes, "mode": args.mode}
    if args.memory_budget is not None:
        overrides["memory_budget"] = args.memory_budget
    if args.device_profile is not None:
        return _offline(model, args_in, kwargs_in, OffloadConfig(**overrides), args.device_profile, args.graphs)
    backend = make_backend(keep_graphs=args.graphs != "none", **overrides)
    loss_of(torch.compile(model, backend=backend)(*args_in, **kwargs_in)).backward()
    if not backend.plans:
        print("explain: nothing was compiled with gradients (no backward graph, so no plan)")
        return 1
    for record in backend.records:
        print(record)  # the plan, and what the feedback loop measured of it
        print()
        if record.graph_texts is not None:
            _print_graphs(record.plan.graph_id, record.graph_texts, args.graphs)
    print(backend.last_step())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
