"""Predicted memory/time fronts of a Llama-3-8B-shaped model planned offline, planner beside planner.

Takes: sequence lengths and layer counts (``--seqs``, ``--layers``), the
budgets (``--budgets``, fractions of the peak without recompute or offload)
and a device profile (``--device-profile``, ``planning/profiles.py``). The
model is ``examples.models.llama3_8b_shape`` on the meta device, planned
with ``offline.plan_offline``: nothing is measured, every figure is the
step model's prediction under the profile. Gives: JSON (``--out``, a list of
points), a table, and with ``--plot POINTS.json OUT_DIR`` one PNG per
sequence length (peak / baseline peak against step / baseline step).

The points, per (sequence length, layers):

- ``inductor``: the partition PyTorch's min-cut partitioner makes by default
  (``activation_memory_budget`` 1.0), nothing offloaded. Its peak and step
  are every other point's baseline (the same figures as ``mode="budget"``'s
  ``plan.baseline``).
- ``ours`` at each budget: ``OffloadConfig(mode="budget", memory_budget=b)``,
  the kept plan's predicted (peak, step), recompute and offload together.
  ``reached``: its peak is within ``b`` x the baseline peak.
- ``ours_floor``: the lowest peak of every partition any of those searches
  (and ``ours_at_ckpt``'s) tried (``plan.recompute_trials``, each with our
  offload planned on it), with that trial's step.
- ``pytorch`` at each budget: PyTorch's partition under
  ``activation_memory_budget=b`` alone, nothing offloaded (the default
  config: mode="marked" with nothing marked), priced by the same step model.
- ``ours_at_ckpt``: ``mode="budget"`` with ``memory_budget`` the bytes of
  the ``full_ac_offload`` point's predicted peak (planned after it, in the
  same process): ours at the peak checkpointing with offload reaches.
  ``--at-checkpointing no`` leaves it out.
- ``full_ac``: every block recomputed from its input (``BlockCut(n, n)``,
  the partition mode="budget" tries as its deepest), nothing offloaded.
- ``full_ac_offload``: the same partition with exactly the saved tensors
  the blocks take as inputs (each block's hidden state, the shared rotary
  tables, the mask) copied to the host whatever their size, as
  checkpointing with offloaded checkpoint inputs does; every other saved
  tensor stays. ``block_inputs_not_copied`` names any the plan could not copy. Priced by the same step
  model (copies on their own stream, releases and reloads placed by the
  cost schedule).

How the partitions are asked for: ``plan_offline`` takes a config, not a
``PlanRequest``. Each (sequence length, layers) is one fresh process that
traces the model once; in it the pipeline entry ``plan_offline`` calls
(``offline.planner.run_pipeline``) is replaced by one that runs the
package's ``run_pipeline`` once per point on the same joint graph, with that
point's config and ``PlanRequest`` (``level``: a float or a ``BlockCut``;
``forced``: the storages to copy, honoured under mode="auto", here with
``max_overhead=inf`` so no search overrides it). No file of the package is
changed. Each point is printed and written as it is planned;
``--resume`` keeps the points ``--out`` holds and plans only the others.

  python benchmarks/fronts.py --layers 4 --seqs 8192,16384 --out /tmp/fronts.json --resume
  python benchmarks/fronts.py --plot /tmp/fronts.json /tmp/fronts_png

``benchmarks/fronts_parallel.sh`` runs parts of a front in parallel
(a process per sequence length and group of budgets) and ``--merge``s them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Callable, Optional

PLANNERS = ("inductor", "ours", "ours_floor", "ours_at_ckpt", "pytorch", "full_ac", "full_ac_offload")
BUDGETS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
_MARK = "FRONT_POINT "  # the prefix of a point's line on the planning process's stdout


@dataclasses.dataclass(frozen=True)
class Job:
    """One point to plan: a planner (``PLANNERS`` less ``ours_floor``) and its budget (None: none)."""

    planner: str
    budget: Optional[float] = None


def jobs_for(budgets: tuple[float, ...], at_checkpointing: bool = True) -> list[Job]:
    """Every point of one (sequence length, layers), the baseline first
    (``at_checkpointing``: ours at full_ac_offload's peak, after it)."""
    return (
        [Job("inductor"), Job("full_ac"), Job("full_ac_offload")] + [Job("ours_at_ckpt")] * at_checkpointing
        + [Job("pytorch", b) for b in budgets] + [Job("ours", b) for b in budgets]
    )


# ---- in the planning process -------------------------------------------------------------------------------------


def block_input_storages(joint, saved) -> dict[str, int]:
    """The storages (name -> bytes) of the saved tensors the joint graph's
    blocks take as inputs: produced outside a block (not a graph input) and
    read inside it."""
    from offload_pass.planning.blocks import find_blocks

    inputs: set[str] = set()
    for nodes in find_blocks(joint.graph).nodes:
        inside = set(nodes)
        inputs |= {a.name for n in nodes for a in n.all_input_nodes if a not in inside and a.op != "placeholder"}
    return {t.storage: t.storage_nbytes for t in saved if t.name in inputs or t.storage in inputs}


def _point_of(state, job: Job) -> dict:
    """A planned state's figures as a point (no sequence length or layers yet)."""
    plan = state.plan
    point = {
        "planner": job.planner, "budget": job.budget, "graph": plan.graph_id,
        "peak": plan.prediction.peak, "step_ms": plan.prediction.step_ms,
        "forward_ms": plan.prediction.forward_ms, "backward_ms": plan.prediction.backward_ms,
        "own_baseline_peak": plan.baseline.peak, "own_baseline_step_ms": plan.baseline.step_ms,
        "level": None if plan.recompute_level is None else str(plan.recompute_level),
        "offloaded_bytes": plan.offloaded_bytes, "copies": len(plan.groups),
    }
    if job.planner in ("ours", "ours_at_ckpt"):
        trials = plan.recompute_trials
        floor = min(trials, key=lambda t: (t.peak, t.step_ms)) if trials else None
        point["reached"] = plan.prediction.peak <= plan.budget
        point["trials"] = [[str(t.level), t.peak, t.step_ms] for t in trials]
        if floor is not None:
            point.update(floor_peak=floor.peak, floor_step_ms=floor.step_ms, floor_level=str(floor.level))
    return point


def _plan_job(ctx, job: Job, peaks: dict):
    """``run_pipeline`` over ``ctx``'s joint graph as ``job`` asks (``peaks``:
    the predicted peak of each planner planned before): (state, extra point fields)."""
    from offload_pass.config import OffloadConfig
    from offload_pass.pipeline.passes import PlanRequest, run_attempt
    from offload_pass.pipeline.search import run_pipeline
    from offload_pass.planning.blocks import BlockCut, find_blocks

    def run(config, request=PlanRequest()):
        return run_pipeline(dataclasses.replace(ctx, config=config, request=request))

    if job.planner == "inductor":
        return run(OffloadConfig()), {}
    if job.planner == "ours":
        return run(OffloadConfig(mode="budget", memory_budget=job.budget)), {}
    if job.planner == "pytorch":
        return run(OffloadConfig(), PlanRequest(level=job.budget)), {}
    if job.planner == "ours_at_ckpt":
        if "full_ac_offload" not in peaks:
            raise ValueError("fronts: ours_at_ckpt is planned after full_ac_offload, in the same process")
        budget = peaks["full_ac_offload"]
        return run(OffloadConfig(mode="budget", memory_budget=budget)), {"budget_bytes": budget}
    of = len(find_blocks(ctx.joint.graph))
    cut = PlanRequest(level=BlockCut(of, of))
    if job.planner == "full_ac":
        return run(OffloadConfig(), cut), {}
    if job.planner != "full_ac_offload":
        raise ValueError(f"fronts: unknown planner {job.planner!r}; valid: {', '.join(PLANNERS)}")
    plain = run_attempt(dataclasses.replace(ctx, config=OffloadConfig(), request=cut))
    wanted = block_input_storages(ctx.joint, plain.saved)
    forced = dataclasses.replace(cut, forced=frozenset(wanted))
    state = run(OffloadConfig(mode="auto", max_overhead=float("inf"), min_bytes=0), forced)
    copied = {g.storage for g in state.plan.groups}
    extra = {
        "block_inputs": len(wanted), "block_input_bytes": sum(wanted.values()),
        "block_inputs_not_copied": sorted(set(wanted) - copied),
    }
    return state, extra


def _planning_jobs(jobs: list[Job], emit: Callable[[dict], None]) -> Callable:
    """A stand-in for ``offline.planner.run_pipeline``: every job planned on the joint graph, each point emitted."""
    def run_jobs(ctx):
        state, peaks = None, {}
        for job in jobs:
            start, cpu = time.perf_counter(), time.process_time()
            state, extra = _plan_job(ctx, job, peaks)
            peaks[job.planner] = state.plan.prediction.peak
            if job.planner in ("inductor", "pytorch", "full_ac") and state.plan.groups:
                raise AssertionError(
                    f"fronts: {job.planner} must offload nothing, its plan copies {len(state.plan.groups)}"
                )
            point = _point_of(state, job)
            point.update(extra, planning_s=time.perf_counter() - start, planning_cpu_s=time.process_time() - cpu)
            emit(point)
        return state

    return run_jobs


def plan_points(seq: int, layers: int, jobs: list[Job], profile: str, model_fn: Callable, emit: Callable) -> float:
    """Trace ``model_fn(seq, layers)`` once and plan every job on it (``emit``
    gets each point); the seconds the whole call took."""
    import offload_pass.offline.planner as planner
    from offload_pass.config import OffloadConfig

    model, inputs = model_fn(seq, layers)
    original = planner.run_pipeline
    where = {"seq": seq, "layers": layers, "device_profile": profile}
    planner.run_pipeline = _planning_jobs(jobs, lambda p: emit({**where, **p}))
    try:
        start = time.perf_counter()
        planner.plan_offline(model, (), inputs, config=OffloadConfig(), device_profile=profile)
        return time.perf_counter() - start
    finally:
        planner.run_pipeline = original


def _llama(seq: int, layers: int):
    from offload_pass.examples.models import llama3_8b_shape

    return llama3_8b_shape(seq=seq, layers=layers)


# ---- the driver ----------------------------------------------------------------------------------------------------


def _key(point: dict) -> tuple:
    return (point["planner"], point["budget"], point["seq"], point["layers"], point["device_profile"])


def with_floors(points: list[dict]) -> list[dict]:
    """``points`` with each (seq, layers)'s ``ours_floor`` point made again
    from its ``ours`` points, and every point's baseline (its ``inductor``
    point's peak and step) filled in where known."""
    kept = [p for p in points if p["planner"] != "ours_floor"]
    groups: dict[tuple, list[dict]] = {}
    for p in kept:
        groups.setdefault((p["seq"], p["layers"], p["device_profile"]), []).append(p)
    for (seq, layers, profile), group in groups.items():
        ours = [p for p in group if p["planner"] in ("ours", "ours_at_ckpt") and "floor_peak" in p]
        if ours:
            low = min(ours, key=lambda p: (p["floor_peak"], p["floor_step_ms"]))
            kept.append({
                "planner": "ours_floor", "budget": None, "seq": seq, "layers": layers, "device_profile": profile,
                "peak": low["floor_peak"], "step_ms": low["floor_step_ms"], "level": low["floor_level"],
                "from_budget": low["budget"],
            })
        base = next((p for p in group if p["planner"] == "inductor"), None)
        for p in kept:
            if base is not None and (p["seq"], p["layers"], p["device_profile"]) == (seq, layers, profile):
                p["baseline_peak"], p["baseline_step_ms"] = base["peak"], base["step_ms"]
    return kept


def _line(p: dict) -> str:
    """One point as a table row."""
    gib = 1 << 30
    rel = ""
    if p.get("baseline_peak"):
        rel = f"{p['peak'] / p['baseline_peak']:6.3f} {p['step_ms'] / p['baseline_step_ms']:6.3f}"
    budget = "" if p["budget"] is None else f"{p['budget']:g}"
    took = f"{p['planning_s']:7.1f}" if "planning_s" in p else " " * 7
    return (
        f"{p['seq']:>6} {p['layers']:>3} {p['planner']:<16} {budget:>4} {p['peak'] / gib:8.2f} {p['step_ms']:9.1f} "
        f"{rel:>13} {took} {p.get('level') or '-'}"
    )


def table(points: list[dict]) -> str:
    order = {name: i for i, name in enumerate(PLANNERS)}
    rows = sorted(points, key=lambda p: (p["seq"], p["layers"], order[p["planner"]], -(p["budget"] or 0)))
    head = (
        f"{'seq':>6} {'L':>3} {'planner':<16} {'b':>4} {'peak GiB':>8} {'step ms':>9} {'peak/b step/b':>13} "
        f"{'plan s':>7} level"
    )
    return "\n".join([head] + [_line(p) for p in rows])


def _todo(jobs: list[Job], points: list[dict], seq: int, layers: int, profile: str) -> list[Job]:
    """The jobs ``points`` does not hold yet; ours at checkpointing's peak
    reads the full_ac_offload point of its own process, so that one is
    planned again before it where held already."""
    done = {_key(p) for p in points}
    todo = [j for j in jobs if (j.planner, j.budget, seq, layers, profile) not in done]
    if any(j.planner == "ours_at_ckpt" for j in todo) and not any(j.planner == "full_ac_offload" for j in todo):
        todo.insert(0, Job("full_ac_offload"))
    return todo


def _write(path: Optional[str], points: list[dict]) -> None:
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(points, f, indent=1)
        os.replace(path + ".tmp", path)


def _run(seq: int, layers: int, jobs: list[Job], args, points: list[dict]) -> Optional[str]:
    """One planning process for ``jobs``: each point appended and written as it arrives; its error, if any."""
    command = [
        sys.executable, os.path.abspath(__file__), "--one", f"{seq},{layers}", "--device-profile", args.device_profile,
        "--jobs", json.dumps([dataclasses.astuple(j) for j in jobs]),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if not line.startswith(_MARK):
            continue
        point = json.loads(line[len(_MARK):])
        if "planner" not in point:
            print(f"seq {seq}, {layers} layers: traced once and planned {point['points']} points in "
                  f"{point['traced_and_planned_s']:.1f} s", flush=True)
            continue
        points[:] = with_floors([p for p in points if _key(p) != _key(point)] + [point])
        _write(args.out, points)
        print(_line(next(p for p in points if _key(p) == _key(point))), flush=True)
    err = proc.stderr.read()
    return None if proc.wait() == 0 else err[-4000:]


_STYLE = {
    "inductor": ("*", "black"), "ours": ("o", "tab:blue"), "ours_floor": ("P", "tab:cyan"),
    "ours_at_ckpt": ("D", "tab:purple"),
    "pytorch": ("s", "tab:orange"), "full_ac": ("^", "tab:red"), "full_ac_offload": ("v", "tab:green"),
}


def plot(points: list[dict], out_dir: str) -> list[str]:
    """One PNG per sequence length: peak / baseline peak against step /
    baseline step, a marker per planner (a shade per layer count); the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    points = [p for p in with_floors(points) if p.get("baseline_peak")]
    written = []
    for seq in sorted({p["seq"] for p in points}):
        fig, ax = plt.subplots(figsize=(7, 5))
        layer_counts = sorted({p["layers"] for p in points if p["seq"] == seq})
        for i, layers in enumerate(layer_counts):
            for planner in PLANNERS:
                mine = sorted(
                    (p for p in points if (p["seq"], p["layers"], p["planner"]) == (seq, layers, planner)),
                    key=lambda p: -(p["budget"] or 0),
                )
                if not mine:
                    continue
                marker, color = _STYLE[planner]
                xs = [p["peak"] / p["baseline_peak"] for p in mine]
                ys = [p["step_ms"] / p["baseline_step_ms"] for p in mine]
                label = planner if len(layer_counts) == 1 else f"{planner}, {layers} layers"
                ax.plot(xs, ys, marker=marker, color=color, alpha=1.0 - 0.5 * i / max(len(layer_counts), 1),
                        linestyle="-" if len(mine) > 1 else "none", label=label)
                labels: dict[tuple, list[str]] = {}  # budgets landing on one point share a label
                for p, x, y in zip(mine, xs, ys):
                    if p["budget"] is not None:
                        labels.setdefault((round(x, 4), round(y, 4)), []).append(f"{p['budget']:g}")
                for (x, y), said in labels.items():
                    ax.annotate(",".join(said), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel("predicted peak / peak without recompute or offload")
        ax.set_ylabel("predicted step / step without recompute or offload")
        ax.set_title(f"Llama-3-8B shape, {seq} tokens, predicted ({points[0]['device_profile']})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        path = os.path.join(out_dir, f"fronts_seq{seq}.png")
        fig.savefig(path, dpi=130, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def _parse(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", default="8192,16384", help="comma-separated sequence lengths")
    p.add_argument("--layers", default="4", help="comma-separated layer counts")
    p.add_argument(
        "--budgets", default=",".join(f"{b:g}" for b in BUDGETS), help="comma-separated fractions ('none': no budget)"
    )
    p.add_argument("--device-profile", default="h200")
    p.add_argument(
        "--at-checkpointing", choices=("yes", "no"), default="yes", help="plan ours at full_ac_offload's peak too"
    )
    p.add_argument("--out", help="the points as JSON")
    p.add_argument("--resume", action="store_true", help="keep the points --out holds; plan only the others")
    p.add_argument("--plot", nargs=2, metavar=("POINTS_JSON", "OUT_DIR"), help="draw a PNG per sequence length")
    p.add_argument(
        "--merge", nargs="+", metavar="POINTS_JSON",
        help="merge the points of these files (runs of parts of the front, fronts_parallel.sh) into --out",
    )
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--jobs", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = _parse(argv)
    if args.plot:
        with open(args.plot[0]) as f:
            print("\n".join(plot(json.load(f), args.plot[1])))
        return 0
    if args.merge:
        merged: dict[tuple, dict] = {}
        for path in args.merge:
            with open(path) as f:
                merged.update({_key(p): p for p in json.load(f)})
        points = with_floors(list(merged.values()))
        _write(args.out, points)
        print(table(points))
        return 0
    if args.one:
        seq, layers = (int(v) for v in args.one.split(","))
        jobs = [Job(*j) for j in json.loads(args.jobs)]
        took = plan_points(seq, layers, jobs, args.device_profile, _llama,
                           lambda p: print(_MARK + json.dumps(p), flush=True))
        print(f"{_MARK}{json.dumps({'traced_and_planned_s': took, 'points': len(jobs)})}", flush=True)
        return 0
    points: list[dict] = []
    if args.resume and args.out and os.path.exists(args.out):
        with open(args.out) as f:
            points = json.load(f)
    budgets = () if args.budgets == "none" else tuple(float(b) for b in args.budgets.split(","))
    failed = 0
    for layers in (int(v) for v in args.layers.split(",")):
        for seq in (int(v) for v in args.seqs.split(",")):
            todo = _todo(jobs_for(budgets, args.at_checkpointing == "yes"), points, seq, layers, args.device_profile)
            print(f"seq {seq}, {layers} layers: {len(todo)} points to plan", flush=True)
            if todo:
                start = time.perf_counter()
                error = _run(seq, layers, todo, args, points)
                print(f"seq {seq}, {layers} layers: {time.perf_counter() - start:.1f} s", flush=True)
                if error:
                    failed += 1
                    print(f"seq {seq}, {layers} layers failed:\n{error}", file=sys.stderr, flush=True)
    print(table(points))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
