"""Data-parallel training with activation offloading: FSDP2 (or DDP) + offload_pass.

    torchrun --nproc-per-node 2 examples/train_fsdp.py                         # decoder, FSDP2, GPUs
    torchrun --nproc-per-node 2 examples/train_fsdp.py --model moe --check     # MoE, gradient check
    torchrun --nproc-per-node 2 examples/train_fsdp.py --parallel ddp --json ddp.json
    torchrun --nproc-per-node 2 examples/train_fsdp.py --device cpu --check --steps 2   # CPU, gloo

Every rank builds the model with the same seed, shards it with ``fully_shard``
per layer and then the root (``--parallel ddp``: wraps it in
DistributedDataParallel), marks attention and MLP (MoE: the experts' ``fc1``
and ``act`` roles), compiles it with an offload backend and trains ``--steps``
SGD steps on its own data. On CUDA, or with ``--check``, it then runs the same
setup (seed, weights, data) compiled with plain Inductor and no marks.
``--check`` asserts that every rank's gradients (FSDP2: its local shards)
are equal at every step. On CUDA each rank prints its peak memory with and
without offload, the median step time (after ``--warmup`` steps), the bytes
offloaded per step (sum of ``plan.offloaded_bytes`` over the backend's plans)
and R = (peak without - peak with) / bytes offloaded; rank 0 prints a table
and ``--json PATH`` writes it.
``--shared-bandwidth`` (CUDA): before compiling, the ranks measure their
pinned copies alone and all at once (``offload_pass.measure_shared_bandwidth``)
and each plans with the shared figures; each rank prints both.

FSDP2's hooks are not traced by Dynamo: the graph breaks at each sharded
layer, so each layer is a graph of its own with its own plan, and its
parameters come in already gathered. Layers with different marks recompile
once each, hence the raised ``recompile_limit`` below (past it, a layer runs
eagerly, uncompiled and not offloaded).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import offload_pass
from offload_pass.examples.models import make_decoder, make_moe

SIZES = {  # (device, model) -> defaults; any of them can be given on the command line
    ("cpu", "decoder"): dict(layers=2, hidden=32, heads=4, ffn=None, experts=4, seq=16, batch=2),
    ("cpu", "moe"): dict(layers=2, hidden=32, heads=4, ffn=64, experts=4, seq=16, batch=2),
    ("cuda", "decoder"): dict(layers=8, hidden=2048, heads=16, ffn=None, experts=8, seq=2048, batch=2),
    ("cuda", "moe"): dict(layers=4, hidden=1024, heads=8, ffn=2816, experts=8, seq=2048, batch=2),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["decoder", "moe"], default="decoder")
    p.add_argument("--parallel", choices=["fsdp", "ddp"], default="fsdp")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: 2 on CPU, 10 on CUDA)")
    p.add_argument("--warmup", type=int, default=1, help="first steps left out of time and peak")
    p.add_argument("--check", action="store_true", help="assert gradients equal plain Inductor's")
    p.add_argument("--no-trim", action="store_true", help="keep_if_no_gain=False (default on CPU)")
    p.add_argument("--show-plan", action="store_true", help="print rank 0's first plan")
    p.add_argument("--shared-bandwidth", action="store_true",
                   help="CUDA: measure the copy bandwidth with every rank copying at once and plan with it")
    p.add_argument("--json", metavar="PATH", help="write every rank's results here")
    p.add_argument("--seed", type=int, default=0)
    for name in ("layers", "hidden", "heads", "ffn", "experts", "seq", "batch"):
        p.add_argument(f"--{name}", type=int, default=None)
    args = p.parse_args()
    for name, value in SIZES[(args.device, args.model)].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.steps = args.steps or (2 if args.device == "cpu" else 10)
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    return args


def build(args, device: torch.device, mark: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model and what to compile: the model itself under FSDP2, its DDP wrapper."""
    if args.model == "decoder":
        model = make_decoder(args.layers, args.hidden, args.heads, args.ffn, device=device, seed=args.seed)
    else:
        model = make_moe(args.layers, args.hidden, args.ffn, args.experts, device=device, seed=args.seed)
    if args.parallel == "fsdp":
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))  # FSDP2 would take CUDA if it can
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model
    else:
        wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if mark:
        if args.model == "decoder":
            offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
        else:  # Megatron's expert_fc1 + moe_act
            offload_pass.offload_modules(model, "layers.*.experts", roles=["fc1", "act"])
    return model, wrapped


def local(grad: torch.Tensor) -> torch.Tensor:
    return grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP2 grads are DTensors


def train(args, device: torch.device, rank: int, offload: bool, bandwidth=None) -> dict:
    model, wrapped = build(args, device, mark=offload)
    on_cpu = device.type == "cpu"
    backend = "inductor"
    if offload:
        # The CPU sizes are tiny: offload what is marked, whatever its size or gain.
        overrides = {"min_bytes": 0, "keep_if_no_gain": False} if on_cpu else {}
        if args.no_trim:
            overrides["keep_if_no_gain"] = False
        if bandwidth is not None:  # offload_pass.SharedBandwidth
            overrides["bandwidth_gbps"] = bandwidth.bandwidth_gbps
        backend = offload_pass.make_backend(**overrides)
    compiled = torch.compile(wrapped, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(args.seed + 1000 + rank)  # own data per rank, same in both runs
    sync = torch.cuda.synchronize if not on_cpu else (lambda: None)
    times, grads = [], []
    for step in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.hidden, generator=generator).to(device)
        if step == args.warmup:
            sync()
            if not on_cpu:
                torch.cuda.reset_peak_memory_stats()
            copied = offload_pass.runtime.stats()["offload_bytes"]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        compiled(x).backward()
        optimizer.step()
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
        if args.check:  # SGD leaves .grad as it is: copy it outside the timed step
            grads.append({n: local(p.grad).detach().to("cpu", copy=True) for n, p in model.named_parameters()})
    measured = args.steps - args.warmup
    result = {
        "rank": rank,
        "step_ms": 1e3 * statistics.median(times),
        "peak_bytes": None if on_cpu else torch.cuda.max_memory_allocated(),
        "offloaded_bytes": sum(p.offloaded_bytes for p in backend.plans) if offload else 0,
        "copied_bytes_per_step": (offload_pass.runtime.stats()["offload_bytes"] - copied) // measured,
        "plans": len(backend.plans) if offload else 0,
        "offloaded_tensors": sum(len(p.offloaded) for p in backend.plans) if offload else 0,
    }
    if offload and args.show_plan and rank == 0 and backend.plans:
        print(backend.records[0], flush=True)
    del model, wrapped, compiled, optimizer
    gc.collect()
    if not on_cpu:
        torch.cuda.empty_cache()
    torch._dynamo.reset()
    return result | {"grads": grads}


def compare(got: list[dict], want: list[dict]) -> list[str]:
    """Every mismatch, as 'step S, NAME: what differs'."""
    failures = []
    for step, (g, w) in enumerate(zip(got, want)):
        for name in w:
            try:
                torch.testing.assert_close(g[name], w[name], atol=1e-6, rtol=1e-5)
            except AssertionError as error:
                failures.append(f"step {step}, {name}: {str(error).splitlines()[-1]}")
    return failures


def main() -> None:
    args = parse_args()
    if args.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # One compile per marked layer (see the docstring): let every layer compile.
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 2 * args.layers + 8))

    shared = None
    if args.shared_bandwidth:
        if device.type != "cuda":
            raise SystemExit("--shared-bandwidth measures pinned copies to the GPU: it needs --device cuda")
        shared = offload_pass.measure_shared_bandwidth(device)
        print(f"rank {rank}: {shared.describe()}", flush=True)
    with_offload = train(args, device, rank, offload=True, bandwidth=shared)
    without = train(args, device, rank, offload=False) if args.check or device.type == "cuda" else None
    row = {k: v for k, v in with_offload.items() if k != "grads"}
    if shared is not None:
        row |= {"copy_gbps_solo": shared.solo, "copy_gbps_shared": shared.shared}
    if without is not None:
        row |= {"step_ms_without": without["step_ms"], "peak_bytes_without": without["peak_bytes"]}
    if row["peak_bytes"] is not None and row["offloaded_bytes"]:
        row["R"] = (row["peak_bytes_without"] - row["peak_bytes"]) / row["offloaded_bytes"]
    if args.check:
        row["grad_failures"] = compare(with_offload["grads"], without["grads"])
    mib = 2**-20
    line = (f"rank {rank}: offloaded {row['offloaded_bytes'] * mib:.2f} MiB/step "
            f"({row['offloaded_tensors']} tensors, {row['plans']} plans), step {row['step_ms']:.1f} ms")
    if row["peak_bytes"] is not None:
        line += (f", peak {row['peak_bytes'] * mib:.0f} MiB with offload, "
                 f"{row['peak_bytes_without'] * mib:.0f} MiB without, R {row.get('R', float('nan')):.2f}")
    print(line, flush=True)

    rows = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        print(f"\n{args.model} / {args.parallel} / {args.device}, {world} ranks, {args.layers} layers, "
              f"hidden {args.hidden}, batch {args.batch} x seq {args.seq}, {args.steps} steps")
        print(f"{'rank':>4} {'peak off':>9} {'peak base':>9} {'offl MiB':>9} {'R':>5} {'ms off':>8} {'ms base':>8}")
        for r in rows:
            peaks = [r.get(k) for k in ("peak_bytes", "peak_bytes_without")]
            peaks = ["-" if p is None else f"{p * mib:.0f}" for p in peaks]
            base_ms = f"{r['step_ms_without']:.1f}" if "step_ms_without" in r else "-"
            r_text = f"{r['R']:.2f}" if "R" in r else "-"
            print(f"{r['rank']:>4} {peaks[0]:>9} {peaks[1]:>9} {r['offloaded_bytes'] * mib:>9.2f} "
                  f"{r_text:>5} {r['step_ms']:>8.1f} {base_ms:>8}")
        if any(r["copied_bytes_per_step"] != r["offloaded_bytes"] for r in rows):
            print("note: bytes copied per step (runtime) differ from the plans' sum:",
                  [r["copied_bytes_per_step"] for r in rows])
        if args.check:
            failed = {r["rank"]: r["grad_failures"] for r in rows if r["grad_failures"]}
            for r, failures in failed.items():
                print(f"rank {r}: {len(failures)} gradients differ from plain Inductor:\n  " + "\n  ".join(failures[:20]))
            if not failed:
                print(f"gradient check passed: every rank, {args.steps} steps, equal to plain Inductor")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "ranks": rows}, f, indent=2)
    failed_anywhere = args.check and any(r["grad_failures"] for r in rows)
    dist.destroy_process_group()
    if failed_anywhere:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
