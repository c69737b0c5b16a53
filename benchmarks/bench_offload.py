"""Side-by-side offload benchmark on one GPU.

Same model, same process, one variant after the other:
  inductor      torch.compile without offload (the reference)
  offload_pass  torch.compile(backend=offload_backend) with the marks below

Per variant: step time (median of --steps after --warmup), peak allocated
memory over a step and over the forward, memory at the forward/backward
boundary, bytes offloaded (from the plan), and
  R = (measured peak reduction vs inductor) / (offloaded bytes)
every offloaded tensor being alive at the reference's forward/backward
boundary; R < 1 where the step's peak sits later in backward, next to the
reloads in flight and backward temporaries.
  R_boundary = (reduction at the forward/backward boundary) / (offloaded bytes)
checks that every offloaded byte really left the device by the end of forward.
Also the physical floor max(compute time, offloaded bytes / one-way
bandwidth), the bandwidth measured here with a pinned 1 GiB copy.

  python benchmarks/bench_offload.py --layers 6 --hidden 2048 --seq 4096 --batch 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import offload_pass
from offload_pass.models import make_decoder, make_moe


def measure_bandwidth(nbytes: int = 1 << 30) -> dict[str, float]:
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out = {}
    for name, (dst, src) in {"d2h": (host, dev), "h2d": (dev, host)}.items():
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        out[name] = 5 * nbytes / (time.perf_counter() - start) / 1e9
    return out


def mark(model: torch.nn.Module, what: str) -> None:
    if what.startswith("roles="):
        roles = what[len("roles="):].split("+")
        offload_pass.offload_modules(model, "layers.*.experts", roles=None if roles == ["all"] else roles)
    elif what == "all":
        offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    elif what == "attn-but-last":
        n = len(model.layers)
        offload_pass.offload_modules(model, *[f"layers.{i}.attn" for i in range(n - 1)])
    else:
        raise SystemExit(f"unknown --mark {what!r}; valid: all, attn-but-last, roles=act+fc2, roles=all")


def parse_overrides(name: str) -> dict[str, int]:
    """"offload_pass(prefetch=1;max_inflight=4)" -> {"prefetch": 1, "max_inflight": 4}."""
    if "(" not in name:
        return {}
    inner = name[name.index("(") + 1 : name.rindex(")")]
    return {k: int(v) for k, v in (kv.split("=") for kv in inner.split(";") if kv)}


def run_variant(name: str, args: argparse.Namespace, x: torch.Tensor) -> dict:
    torch._dynamo.reset()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    if args.model == "moe":
        model = make_moe(args.layers, args.hidden, args.ffn, args.experts, dtype=dtype, device="cuda")
    else:
        model = make_decoder(args.layers, args.hidden, args.heads, dtype=dtype, device="cuda")
    backend = "inductor"
    plan = None
    offload = name.startswith("offload_pass")
    if offload:
        mark(model, args.mark)
        backend = offload_pass.make_backend(min_bytes=args.min_bytes, **parse_overrides(name))
    compiled = torch.compile(model, backend=backend)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        compiled(x).backward()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = compiled(x)
    torch.cuda.synchronize()
    boundary = torch.cuda.memory_allocated() - base
    forward_peak = torch.cuda.max_memory_allocated() - base
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    times = []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    roles = {}
    if offload:
        plan = backend.plans[-1]
        print(plan, file=sys.stderr)
        for e in plan.entries:
            if e.role and e.decision == "offload":
                roles[e.role] = roles.get(e.role, 0) + e.nbytes / 2**20
    result = {
        "variant": name,
        "step_ms": statistics.median(times),
        "peak_mib": peak / 2**20,
        "boundary_mib": boundary / 2**20,
        "forward_peak_mib": forward_peak / 2**20,
        "offloaded_mib": (plan.offloaded_bytes / 2**20) if plan else 0.0,
        "offloaded_tensors": len(plan.offloaded) if plan else 0,
        "offloaded_mib_by_role": roles,
    }
    del compiled, model
    torch.cuda.empty_cache()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="decoder", choices=["decoder", "moe"])
    p.add_argument("--ffn", type=int, default=2048, help="moe: per-expert ffn size")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--mark", default="all")
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument(
        "--variants",
        default="inductor,offload_pass",
        help="comma-separated: inductor, offload_pass, or offload_pass(knob=value;knob=value) "
        "with OffloadConfig knobs",
    )
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_offload.py needs a CUDA device")

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.seq, args.hidden, device="cuda", dtype=dtype)
    bandwidth = measure_bandwidth()
    results = [run_variant(v, args, x) for v in args.variants.split(",")]
    ref = next((r for r in results if r["variant"] == "inductor"), None)
    for r in results:
        if ref is None:
            continue
        offloaded = r["offloaded_mib"]
        r["peak_reduction_mib"] = ref["peak_mib"] - r["peak_mib"]
        r["R"] = r["peak_reduction_mib"] / offloaded if offloaded else None
        r["boundary_reduction_mib"] = ref["boundary_mib"] - r["boundary_mib"]
        r["R_boundary"] = r["boundary_reduction_mib"] / offloaded if offloaded else None
        r["slowdown"] = r["step_ms"] / ref["step_ms"]
        floor_ms = max(ref["step_ms"], offloaded * 2**20 / (bandwidth["d2h"] * 1e9) * 1e3)
        r["floor_ms"] = floor_ms
        r["vs_floor"] = r["step_ms"] / floor_ms
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "args": vars(args),
        "bandwidth_gbps": bandwidth,
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(f"{report['device']}  torch {report['torch']}  d2h {bandwidth['d2h']:.1f} GB/s  h2d {bandwidth['h2d']:.1f} GB/s")
    for r in results:
        if r.get("offloaded_mib_by_role"):
            print(f"{r['variant']}: offloaded MiB by role {r['offloaded_mib_by_role']}")
    cols = [
        "variant", "step_ms", "peak_mib", "forward_peak_mib", "boundary_mib", "offloaded_mib",
        "peak_reduction_mib", "R", "R_boundary", "slowdown", "floor_ms", "vs_floor",
    ]
    print(" | ".join(cols))
    for r in results:
        print(" | ".join(
            f"{r.get(c):.3f}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols
        ))


if __name__ == "__main__":
    main()
