"""What is alive on the GPU at the peak of one training step, measured and simulated.

Records the CUDA caching allocator's history over one step (after warm-up),
replays it to find the peak, and prints the blocks alive there grouped by the
line of the compiled graph (or offload_pass runtime op) that allocated them,
with that line's text, then the allocations leading up to the peak. With
offload it also prints the pass's simulated timeline (``timeline.simulate_step``
on the rewritten graphs): its peak per phase and what it holds there, so the
two can be compared. ``--out DIR`` writes the raw events, the simulated
timeline and the compiled code there.

  python benchmarks/memory_at_peak.py --mark all --out /tmp/mem
  python benchmarks/memory_at_peak.py --mark none          # plain Inductor
  python benchmarks/memory_at_peak.py --model moe --layers 4 --batch 8 --mark roles=all
  python benchmarks/memory_at_peak.py --model hf_llama --layers 8 --ffn 5632 --batch 1 --mark all
  python benchmarks/memory_at_peak.py --model hf_llama --layers 8 --ffn 5632 --batch 1 --mark none \
      --config 'mode="budget";memory_budget=0.6'      # nothing marked, the planner chooses

It also prints the highest memory in each sixteenth of the backward's
allocator events (from the autograd engine's first allocation on): how close
the backward stands to the step's peak, i.e. the room reloads have
(``OffloadConfig.reload_headroom``).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import linecache
import os
import shutil

import torch

import offload_pass
import offload_pass.backend as backend_module
from offload_pass.feedback import schedule as compiled_graph
from offload_pass.examples.models import make_decoder, make_moe
from offload_pass.planning.timeline import simulate_step

from bench_offload import model_inputs, run_model


def origin(frames: list[dict]) -> tuple[str, int, str]:
    """(file, line, function) of the frame that explains an allocation: the
    offload_pass runtime op, else the compiled graph's line, else autograd."""
    for f in frames:
        if "offload_pass/runtime/" in f.get("filename", ""):
            return f["filename"], f.get("line", 0), f"offload_pass.{f.get('name')}"
    for f in frames:
        name = f.get("filename", "")
        if "torchinductor" in name or name.startswith("/tmp/"):
            return name, f.get("line", 0), f.get("name", "")
    for f in frames:
        if "autograd" in f.get("filename", ""):
            return f["filename"], f.get("line", 0), f"autograd:{f.get('name')}"
    f = frames[0] if frames else {}
    return f.get("filename", "?"), f.get("line", 0), f.get("name", "?")


def mib(n: float) -> str:
    return f"{n / 2**20:9.1f} MiB"


def build(args: argparse.Namespace):
    if args.model == "hf_llama":
        from bench_offload import hf_model, marked_modules

        model = hf_model(args, torch.bfloat16)
        if args.mark == "none":
            return model, offload_pass.make_backend(**_overrides(args)) if args.config else "inductor"
        if args.mark != "all":
            raise SystemExit(f"--model hf_llama takes --mark none or all, not {args.mark!r}")
        modules, _ = marked_modules(model, "all")
        offload_pass.offload_modules(model, *modules)
        return model, offload_pass.make_backend(**_overrides(args))
    if args.model == "moe":
        model = make_moe(args.layers, args.hidden, args.ffn, args.experts, dtype=torch.bfloat16, device="cuda")
    else:
        model = make_decoder(args.layers, args.hidden, args.heads, dtype=torch.bfloat16, device="cuda")
    n = len(model.layers)
    if args.mark == "none":
        return model, offload_pass.make_backend(**_overrides(args)) if args.config else "inductor"
    if args.mark == "all":
        offload_pass.offload_modules(model, *[f"layers.{i}.{m}" for i in range(n) for m in ("attn", "mlp")])
    elif args.mark.startswith("roles="):
        roles = args.mark[len("roles="):].split("+")
        offload_pass.offload_modules(
            model, *[f"layers.{i}.experts" for i in range(n)], roles=None if roles == ["all"] else roles
        )
    else:
        raise SystemExit(f"unknown --mark {args.mark!r}; valid: none, all, roles=R1+R2, roles=all")
    return model, offload_pass.make_backend(**_overrides(args))


def _overrides(args: argparse.Namespace) -> dict:
    overrides = {}
    for item in filter(None, args.config.split(";")):
        key, value = item.split("=", 1)
        overrides[key] = json.loads(value)
    return overrides


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="decoder", choices=["decoder", "moe", "hf_llama"])
    p.add_argument("--vocab", type=int, default=8192, help="hf_llama: vocabulary size")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--ffn", type=int, default=2048, help="moe: per-expert ffn size; hf_llama: MLP size")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument(
        "--mark", default="all",
        help="none (plain Inductor; with --config, offload_pass with nothing marked), all, roles=all, roles=fc1+act",
    )
    p.add_argument("--config", default="", help='OffloadConfig overrides, "key=json;key=json"')
    p.add_argument("--before", type=int, default=30, help="allocations shown before the peak")
    p.add_argument("--out", default=None, help="directory for raw events, timeline and compiled code")
    args = p.parse_args()

    # Keep what the simulation holds at each point, for the comparison below.
    backend_module.simulate_step = functools.partial(simulate_step, record_alive=True)
    model, backend = build(args)
    compiled = torch.compile(model, backend=backend)
    x = model_inputs(args, torch.bfloat16)
    # Past the calibration's measured calls and its re-plans (each re-plan is
    # measured on its own calls FIRST_MEASURED_CALL on; at most two of them).
    for _ in range(3 * (compiled_graph.FIRST_MEASURED_CALL + compiled_graph.MEASURED_CALLS)):
        model.zero_grad(set_to_none=True)
        run_model(compiled, x).backward()
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    loss = run_model(compiled, x)
    torch.cuda.synchronize()
    forward_peak = torch.cuda.max_memory_allocated() - base
    loss.backward()
    torch.cuda.synchronize()
    step_peak = torch.cuda.max_memory_allocated() - base
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"max_memory_allocated over the step: forward {mib(forward_peak)}, step {mib(step_peak)}")

    live: dict[int, tuple[int, tuple]] = {}
    total = peak = 0
    peak_live: dict[int, tuple[int, tuple]] = {}
    peak_at = 0
    events = []
    files: list[str] = []  # compiled files in the order they first allocate: forward, backward
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    for ev in trace:
        if ev["action"] == "alloc":
            where = origin(ev.get("frames", []))
            if where[0].startswith("/tmp/") and where[0] not in files:
                files.append(where[0])
            live[ev["addr"]] = (ev["size"], where)
            total += ev["size"]
            size = ev["size"]
            if total > peak:
                peak, peak_live, peak_at = total, dict(live), len(events)
        elif ev["action"] == "free_requested":
            size, where = live.pop(ev["addr"], (0, ("?", 0, "?")))
            total -= size
        else:
            continue
        events.append((ev["action"], size, ev.get("stream", 0), total, *where))
    names = {f: ("forward" if k == 0 else "backward" if k == 1 else f"graph{k}") for k, f in enumerate(files)}

    def label(where: tuple) -> str:
        file, line, func = where
        text = linecache.getline(file, line).strip() if file in names else ""
        return f"{names.get(file, os.path.basename(file))}:{line} {func}  {text[:110]}"

    print(f"peak over the step (replayed history, allocated by the step): {mib(peak)} at event {peak_at} of {len(events)}")
    # The backward starts where the autograd engine first allocates (the
    # gradients the backward receives), else at the second compiled file.
    start = next((k for k, e in enumerate(events) if e[6] == "autograd:_make_grads"), None)
    if start is None and len(files) > 1:
        start = next(k for k, e in enumerate(events) if e[4] == files[1])
    if start is not None and len(events) - start >= 16:
        bounds = [start + k * (len(events) - start) // 16 for k in range(17)]
        tops = [max(e[3] for e in events[a:b]) for a, b in zip(bounds, bounds[1:])]
        print("highest memory in each sixteenth of the backward's allocator events, MiB: "
              + " ".join(f"{t / 2**20:.0f}" for t in tops))
        print(f"  below the step's peak by {(peak - max(tops[1:])) / 2**20:.0f} MiB at least after its first sixteenth")
    groups: dict[str, int] = collections.Counter()
    for size, where in peak_live.values():
        groups[label(where)] += size
    print("alive at the measured peak, by allocating line:")
    for what, size in groups.most_common(40):
        print(f"  {mib(size)}  {what}")
    print(f"the {args.before} allocations / frees before the peak:")
    shown = [e for e in events[: peak_at + 1]][-args.before:]
    for action, size, stream, running, *where in shown:
        print(f"  {action:>14} {mib(size)} stream {stream:>3} total {mib(running)}  {label(tuple(where))}")

    # The graphs of the step just recorded, as their plans simulated them.
    ran = [] if backend == "inductor" else [plan for plan, _ in backend.last_step().graphs]
    records = [r for r in getattr(backend, "records", []) if any(r.plan is plan for plan in ran)]
    timelines = [r.timeline_after for r in records]
    if timelines:
        for k, after in enumerate(timelines):
            for phase in ("forward", "backward"):
                idx = [i for i, ph in enumerate(after.phases) if ph == phase]
                if not idx:
                    continue
                top = max(idx, key=lambda i: after.live_bytes[i])
                print(
                    f"simulated {records[k].plan.graph_id} {phase} peak {mib(after.live_bytes[top])} after node "
                    f"{after.nodes[top]} ({idx.index(top)} of {len(idx)})"
                )
                alive = sorted(after.alive[top].items(), key=lambda kv: -kv[1])
                for name, size in alive[:40]:
                    print(f"    {mib(size)}  {name}")
        for record in records:
            print(record.plan)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "events.json"), "w") as f:
            json.dump({"files": names, "peak_at": peak_at, "events": events}, f)
        for file, name in names.items():
            shutil.copy(file, os.path.join(args.out, f"{name}.py"))
        if timelines:
            t = timelines[-1]
            with open(os.path.join(args.out, "simulated.json"), "w") as f:
                json.dump({"phases": t.phases, "nodes": t.nodes, "live": t.live_bytes, "alive": t.alive}, f)


if __name__ == "__main__":
    main()
