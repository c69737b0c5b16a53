"""Planning time at real size, without a GPU: Llama-3-8B's shape planned offline.

Takes: sequence lengths and layer counts (``--seqs``, ``--layers``), the
config (``--mode``, ``--memory-budget``), a device profile, optionally a CPU
to pin each run to (``--cpu 0``: one core) and ``--profile`` (cProfile of
the planning). Gives: JSON (``--json``) with, per run, the pipeline's
planning time and PyTorch's partitioner's on the same joint graph (under
``activation_memory_budget`` ``offline.PYTORCH_BUDGET``), the whole trace,
the joint graph's size, the predicted peaks and step, the kept recompute
level and the run's peak RSS; with ``--profile`` the top functions by
cumulative and own time. ``--no-recompute`` disables mode="budget"'s
recompute search: one partition planned, the cost of one attempt;
``--disable NAMES`` disables the named passes (``OffloadConfig.disabled_passes``,
comma-separated: ``--disable mixed_cuts`` plans without the mixed cuts' search).
``--pytorch-exact-cut``: PyTorch's partitioner is timed with its min-cuts
solved as the pipeline solves them (``pipeline.min_cuts.exact_min_cuts``),
not by networkx: what the partitioner takes apart from the solver.

Each run is a fresh process (its RSS its own). The model is built on the
meta device (``examples.models.llama3_8b_shape``): nothing of it is
allocated.

  python benchmarks/plan_time.py --cpu 0 --seqs 8192,16384,32768,65536 --layers 32 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def _pytorch_exact_cut() -> None:
    """The planner's timed PyTorch partition under ``exact_min_cuts``."""
    from offload_pass.offline import planner
    from offload_pass.pipeline.min_cuts import exact_min_cuts

    stock = planner.min_cut_rematerialization_partition

    def exact(*args, **kwargs):
        with exact_min_cuts():
            return stock(*args, **kwargs)

    planner.min_cut_rematerialization_partition = exact


def _one(
    seq: int, layers: int, mode: str, budget: float, profile_name: str, profile: bool, no_recompute: bool = False,
    pytorch_exact_cut: bool = False, disable: tuple[str, ...] = (),
) -> dict:
    """One run in this process: the plan's figures as a dict."""
    import cProfile
    import io
    import pstats
    import resource

    from offload_pass.config import OffloadConfig
    from offload_pass.examples.models import llama3_8b_shape
    from offload_pass.offline import PYTORCH_BUDGET, plan_offline

    model, inputs = llama3_8b_shape(seq=seq, layers=layers)
    config = OffloadConfig(mode=mode, memory_budget=budget) if mode == "budget" else OffloadConfig(mode=mode)
    disabled = disable + (("recompute",) if no_recompute else ())
    if disabled:
        config = config.replace(disabled_passes=disabled)
    if pytorch_exact_cut:
        _pytorch_exact_cut()
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    made = plan_offline(model, (), inputs, config=config, device_profile=profile_name)
    if profiler is not None:
        profiler.disable()
    result = {
        "seq": seq, "layers": layers, "mode": mode, "memory_budget": budget, "device_profile": profile_name,
        "pytorch_budget": PYTORCH_BUDGET, "no_recompute": no_recompute, "disabled_passes": list(disabled),
        "pytorch_exact_cut": pytorch_exact_cut, "trace_s": made.trace_s, "planning_s": made.planning_s,
        "pytorch_partition_s": made.pytorch_partition_s,
        "planning_cpu_s": sum(g.planning_cpu_s for g in made.graphs),
        "pytorch_partition_cpu_s": sum(g.pytorch_partition_cpu_s for g in made.graphs),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "graphs": [_graph(g) for g in made.graphs],
    }
    if profiler is not None:
        for key in ("cumulative", "tottime"):
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(30)
            result[f"profile_{key}"] = out.getvalue().splitlines()
    return result


def _plain(value: object) -> object:
    """A recompute level as JSON: a number or None as it is, anything else as its text."""
    return value if value is None or isinstance(value, (int, float)) else str(value)


def _graph(graph) -> dict:
    plan = graph.plan
    return {
        "joint_nodes": graph.joint_nodes, "planning_s": graph.planning_s,
        "pytorch_partition_s": graph.pytorch_partition_s, "planning_cpu_s": graph.planning_cpu_s,
        "pytorch_partition_cpu_s": graph.pytorch_partition_cpu_s,
        "baseline_peak": None if plan.baseline is None else plan.baseline.peak,
        "predicted_peak": None if plan.prediction is None else plan.prediction.peak,
        "budget": plan.budget,
        "baseline_step_ms": None if plan.baseline is None else plan.baseline.step_ms,
        "predicted_step_ms": None if plan.prediction is None else plan.prediction.step_ms,
        "recompute_level": _plain(plan.recompute_level),
        "levels_tried": [_plain(t.level) for t in plan.recompute_trials],
        "offloaded_bytes": plan.offloaded_bytes, "copies": len(plan.groups),
    }


def _run(seq: int, layers: int, args: argparse.Namespace) -> dict:
    """One run in a fresh process (pinned to ``args.cpu`` where given)."""
    command = [
        sys.executable, os.path.abspath(__file__), "--one", f"{seq},{layers}", "--mode", args.mode,
        "--memory-budget", str(args.memory_budget), "--device-profile", args.device_profile,
    ] + (["--profile"] if args.profile else []) + (["--no-recompute"] if args.no_recompute else []) + (
        ["--disable", args.disable] if args.disable else []
    ) + (
        ["--pytorch-exact-cut"] if args.pytorch_exact_cut else []
    )
    if args.cpu is not None:
        command = ["taskset", "-c", str(args.cpu)] + command
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"seq": seq, "layers": layers, "error": done.stderr[-4000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", default="8192", help="comma-separated sequence lengths")
    p.add_argument("--layers", default="32", help="comma-separated layer counts")
    p.add_argument("--mode", default="budget")
    p.add_argument("--memory-budget", type=float, default=0.5)
    p.add_argument("--device-profile", default="h200")
    p.add_argument("--cpu", type=int, help="pin each run to this CPU (taskset)")
    p.add_argument("--profile", action="store_true", help="cProfile the planning")
    p.add_argument("--no-recompute", action="store_true", help="disable the recompute search: one partition")
    p.add_argument(
        "--disable", default="", help="comma-separated pass names to disable (OffloadConfig.disabled_passes)"
    )
    p.add_argument("--pytorch-exact-cut", action="store_true", help="time PyTorch's partitioner with the exact min-cut")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        seq, layers = (int(v) for v in args.one.split(","))
        print(json.dumps(_one(
            seq, layers, args.mode, args.memory_budget, args.device_profile, args.profile, args.no_recompute,
            args.pytorch_exact_cut, tuple(n for n in args.disable.split(",") if n),
        )))
        return 0
    results = []
    for layers in (int(v) for v in args.layers.split(",")):
        for seq in (int(v) for v in args.seqs.split(",")):
            result = _run(seq, layers, args)
            results.append(result)
            summary = {k: result.get(k) for k in ("seq", "layers", "planning_s", "pytorch_partition_s", "planning_cpu_s",
                                                  "pytorch_partition_cpu_s", "trace_s",
                                                  "peak_rss_mib", "error")}
            print(json.dumps(summary), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
