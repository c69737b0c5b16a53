"""Data-parallel training with activation offloading: FSDP2 (or DDP) + offload_pass.

    torchrun --nproc-per-node 2 examples/train_fsdp.py                         # decoder, FSDP2, GPUs
    torchrun --nproc-per-node 2 examples/train_fsdp.py --model moe --check     # MoE, gradient check
    torchrun --nproc-per-node 2 examples/train_fsdp.py --parallel ddp --json ddp.json
    torchrun --nproc-per-node 2 examples/train_fsdp.py --device cpu --check --steps 2   # CPU, gloo
    torchrun --nproc-per-node 2 examples/train_fsdp.py --model llama --layers 8 --seq 16384 \
        --mode budget --memory-budget 0.5 --ckpt --shared-bandwidth --json llama.json   # the 8B shape, cut

Every rank builds the model with the same seed (``--model llama``: Hugging
Face's ``LlamaForCausalLM`` in Llama-3-8B's shape on CUDA, bf16, fp32 with
``--check``; tiny on CPU), shards it with ``fully_shard`` per layer and then
the root (``--parallel ddp``: wraps it in DistributedDataParallel), marks
attention and MLP (MoE: the experts' ``fc1`` and ``act`` roles), compiles it
with an offload backend (``--mode budget``: ``mode="budget"`` at
``--memory-budget`` over what is marked) and trains ``--steps`` SGD steps on
its own data. On CUDA, or with ``--check``, it then runs the same
setup (seed, weights, data) compiled with plain Inductor and no marks.
``--check`` asserts that every rank's gradients (FSDP2: its local shards)
are equal at every step. On CUDA each rank prints its peak memory with and
without offload, the median step time (after ``--warmup`` steps), the bytes
offloaded per step (sum of ``plan.offloaded_bytes`` over the backend's plans)
and R = (peak without - peak with) / bytes offloaded, and tokens/s;
``--ckpt`` adds the same setup with every layer checkpointed (recomputed
whole in the backward) under plain Inductor, the recipe to beat where plain
training runs out of memory (a run out of device memory says so in its
row). Rank 0 prints a table and ``--json PATH`` writes it.
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
    # Hugging Face Llama: the long-context benchmark's 8B shape on CUDA (as many layers as fit), tiny on CPU.
    ("cpu", "llama"): dict(layers=2, hidden=32, heads=4, ffn=64, experts=0, seq=16, batch=2),
    ("cuda", "llama"): dict(layers=4, hidden=4096, heads=32, ffn=14336, experts=0, seq=8192, batch=1),
}
# Llama's key-value heads and vocabulary, by device (the 8B shape's on CUDA).
LLAMA_REST = {"cpu": dict(kv_heads=2, vocab=128), "cuda": dict(kv_heads=8, vocab=128256)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["decoder", "moe", "llama"], default="decoder")
    p.add_argument("--mode", choices=["marked", "budget"], default="marked",
                   help="offload what is marked, or mode='budget' over it (--memory-budget)")
    p.add_argument("--memory-budget", type=float, default=0.5, help="--mode budget: a fraction of the peak, or bytes")
    p.add_argument("--ckpt", action="store_true",
                   help="also run the same setup with every layer checkpointed (full recompute), plain Inductor")
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


def _llama(args, device: torch.device) -> torch.nn.Module:
    """A Hugging Face ``LlamaForCausalLM`` of ``args``' sizes (SDPA, no KV
    cache; fp32 with --check, else bf16 on CUDA), the same weights on every rank."""
    from transformers import LlamaConfig, LlamaForCausalLM

    rest = LLAMA_REST[device.type]
    config = LlamaConfig(
        hidden_size=args.hidden, intermediate_size=args.ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=rest["kv_heads"], vocab_size=rest["vocab"],
        max_position_embeddings=max(args.seq, 8192), use_cache=False, attn_implementation="sdpa",
    )
    torch.manual_seed(args.seed)
    dtype = torch.bfloat16 if device.type == "cuda" and not args.check else torch.float32
    return LlamaForCausalLM(config).to(device=device, dtype=dtype)


def layers_of(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.model.layers if hasattr(model, "model") else model.layers


def build(args, device: torch.device, mark: bool, ckpt: bool = False) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model and what to compile: the model itself under FSDP2, its DDP
    wrapper. ``ckpt``: every layer checkpointed (recomputed whole in the backward)."""
    if args.model == "decoder":
        model = make_decoder(args.layers, args.hidden, args.heads, args.ffn, device=device, seed=args.seed)
    elif args.model == "moe":
        model = make_moe(args.layers, args.hidden, args.ffn, args.experts, device=device, seed=args.seed)
    else:
        model = _llama(args, device)
    if ckpt:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        layers = layers_of(model)
        for i, layer in enumerate(layers):
            layers[i] = checkpoint_wrapper(layer)
    if args.parallel == "fsdp":
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))  # FSDP2 would take CUDA if it can
        for layer in layers_of(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model
    else:
        wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if mark:
        if args.model == "decoder":
            offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
        elif args.model == "llama":
            offload_pass.offload_modules(model, "model.layers.*.self_attn", "model.layers.*.mlp")
        else:  # Megatron's expert_fc1 + moe_act
            offload_pass.offload_modules(model, "layers.*.experts", roles=["fc1", "act"])
    return model, wrapped


def local(grad: torch.Tensor) -> torch.Tensor:
    return grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP2 grads are DTensors


def _batch(args, generator: torch.Generator, device: torch.device) -> dict:
    """One step's inputs: hidden states for the decoder and MoE stacks, token ids (and labels) for Llama."""
    if args.model == "llama":
        ids = torch.randint(0, LLAMA_REST[device.type]["vocab"], (args.batch, args.seq), generator=generator)
        return {"input_ids": ids.to(device), "labels": ids.to(device)}
    return {"x": torch.randn(args.batch, args.seq, args.hidden, generator=generator).to(device)}


def _loss(out) -> torch.Tensor:
    return out.loss if hasattr(out, "loss") else out


def _backend(args, on_cpu: bool, bandwidth):
    """Ours: what is marked offloaded (the CPU sizes are tiny: whatever its
    size or gain), or mode='budget' over it."""
    overrides = {"min_bytes": 0, "keep_if_no_gain": False} if on_cpu else {}
    if args.no_trim:
        overrides["keep_if_no_gain"] = False
    if bandwidth is not None:  # offload_pass.SharedBandwidth
        overrides["bandwidth_gbps"] = bandwidth.bandwidth_gbps
    if args.mode == "budget":
        budget = args.memory_budget
        overrides.update(mode="budget", memory_budget=int(budget) if budget > 1 else budget)
    return offload_pass.make_backend(**overrides)


def train(args, device: torch.device, rank: int, variant: str, bandwidth=None) -> dict:
    """``variant``: "offload" (ours), "plain" (plain Inductor) or "ckpt"
    (every layer checkpointed, plain Inductor). Out of device memory: the
    row says so (``oom``) instead of its figures."""
    try:
        return _steps(args, device, rank, variant, bandwidth)
    except torch.cuda.OutOfMemoryError as error:
        return {"rank": rank, "oom": str(error).splitlines()[0], "offloaded_bytes": 0, "grads": []}
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        torch._dynamo.reset()


def _steps(args, device: torch.device, rank: int, variant: str, bandwidth) -> dict:
    offload = variant == "offload"
    model, wrapped = build(args, device, mark=offload, ckpt=variant == "ckpt")
    on_cpu = device.type == "cpu"
    backend = _backend(args, on_cpu, bandwidth) if offload else "inductor"
    compiled = torch.compile(wrapped, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(args.seed + 1000 + rank)  # own data per rank, same in every run
    sync = torch.cuda.synchronize if not on_cpu else (lambda: None)
    times, grads = [], []
    for step in range(args.steps):
        batch = _batch(args, generator, device)
        if step == args.warmup:
            sync()
            if not on_cpu:
                torch.cuda.reset_peak_memory_stats()
            copied = offload_pass.runtime.stats()["offload_bytes"]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        _loss(compiled(**batch)).backward()
        optimizer.step()
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
        if args.check:  # SGD leaves .grad as it is: copy it outside the timed step
            grads.append({n: local(p.grad).detach().to("cpu", copy=True) for n, p in model.named_parameters()})
    measured = args.steps - args.warmup
    step_ms = 1e3 * statistics.median(times)
    result = {
        "rank": rank,
        "step_ms": step_ms,
        "tokens_per_s": args.batch * args.seq / (step_ms / 1e3),
        "peak_bytes": None if on_cpu else torch.cuda.max_memory_allocated(),
        "offloaded_bytes": sum(p.offloaded_bytes for p in backend.plans) if offload else 0,
        "copied_bytes_per_step": (offload_pass.runtime.stats()["offload_bytes"] - copied) // measured,
        "plans": len(backend.plans) if offload else 0,
        "offloaded_tensors": sum(len(p.offloaded) for p in backend.plans) if offload else 0,
    }
    if offload and args.show_plan and rank == 0 and backend.plans:
        print(backend.records[0], flush=True)
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


def _line(row: dict) -> str:
    """A rank's figures in a line."""
    if "oom" in row:
        return f"with offload, out of device memory ({row['oom']})"
    mib = 2**-20
    line = (f"offloaded {row['offloaded_bytes'] * mib:.2f} MiB/step ({row['offloaded_tensors']} tensors, "
            f"{row['plans']} plans), step {row['step_ms']:.1f} ms, {row['tokens_per_s']:.0f} tokens/s")
    if row["peak_bytes"] is not None and row.get("peak_bytes_without") is not None:
        line += (f", peak {row['peak_bytes'] * mib:.0f} MiB with offload, "
                 f"{row['peak_bytes_without'] * mib:.0f} MiB without, R {row.get('R', float('nan')):.2f}")
    return line


def _cells(r: dict, suffix: str) -> str:
    """One variant's cells of the table (``suffix``: "" ours, "_without" plain, "_ckpt")."""
    oom = r.get(f"oom{suffix}") if suffix else r.get("oom")
    if oom:
        return f"{'out of device memory':>29}"
    mib = 2**-20
    peak = r.get(f"peak_bytes{suffix}")
    peak_text = "-" if peak is None else f"{peak * mib:.0f}"
    offl = f"{r['offloaded_bytes'] * mib:.2f}" if not suffix else "-"
    r_text = f"{r['R']:.2f}" if not suffix and "R" in r else "-"
    return (f"{peak_text:>9} {r[f'step_ms{suffix}']:>9.1f} {r[f'tokens_per_s{suffix}']:>9.0f} "
            f"{offl:>9} {r_text:>5}")


def _report(args, rows: list[dict], world: int) -> None:
    """Rank 0's table of every rank's rows, the gradient check's verdict, the JSON."""
    print(f"\n{args.model} / {args.parallel} / {args.device}, {world} ranks, {args.layers} layers, "
          f"hidden {args.hidden}, batch {args.batch} x seq {args.seq}, {args.steps} steps")
    print(f"{'rank':>4} {'variant':>8} {'peak MiB':>9} {'step ms':>9} {'tokens/s':>9} {'offl MiB':>9} {'R':>5}")
    for r in rows:
        for name, suffix in (("ours", ""), ("plain", "_without"), ("ckpt", "_ckpt")):
            if suffix and f"step_ms{suffix}" not in r:
                continue
            print(f"{r['rank']:>4} {name:>8} {_cells(r, suffix)}")
    if any(r.get("copied_bytes_per_step", 0) != r["offloaded_bytes"] for r in rows if "oom" not in r):
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
    with_offload = train(args, device, rank, "offload", bandwidth=shared)
    without = train(args, device, rank, "plain") if args.check or device.type == "cuda" else None
    ckpt = train(args, device, rank, "ckpt") if args.ckpt else None
    row = {k: v for k, v in with_offload.items() if k != "grads"}
    if shared is not None:
        row |= {"copy_gbps_solo": shared.solo, "copy_gbps_shared": shared.shared}
    for name, other in (("without", without), ("ckpt", ckpt)):
        if other is not None:
            row |= {f"{key}_{name}": other.get(key) for key in ("step_ms", "peak_bytes", "tokens_per_s", "oom")}
    if row.get("peak_bytes") is not None and row.get("peak_bytes_without") is not None and row.get("offloaded_bytes"):
        row["R"] = (row["peak_bytes_without"] - row["peak_bytes"]) / row["offloaded_bytes"]
    if args.check:
        ran = "oom" not in with_offload and "oom" not in without
        row["grad_failures"] = compare(with_offload["grads"], without["grads"]) if ran else ["out of device memory"]
    print(f"rank {rank}: {_line(row)}", flush=True)

    rows = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        _report(args, rows, world)
    failed_anywhere = args.check and any(r["grad_failures"] for r in rows)
    dist.destroy_process_group()
    if failed_anywhere:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
