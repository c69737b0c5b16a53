"""Reliability on a GPU: 100 steps, leaks, and a race check with slowed copy streams.

1. 100 training steps of an offloaded decoder: device memory allocated after
   each step (gradients dropped) must be the same every step, the host bytes
   held by offloaded copies must drop back to 0 after every backward, the
   host pool must stay one buffer of the plan's size, and no warning may be
   raised. Also: how long page-locking a buffer of the pool's size takes,
   against PyTorch's pinned allocator for the same bytes.
2. Race check: before every step a large unrelated copy is queued on the
   device->host and host->device copy streams, so every offload copy and
   reload runs late; gradients must still equal plain Inductor's, bit for bit.

  python benchmarks/reliability_gpu.py --steps 100
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings

import torch

import offload_pass
from offload_pass import runtime
from offload_pass.examples.models import make_decoder


def _pinned_pool():
    """(bytes owned, cudaHostAlloc calls) of PyTorch's pinned host allocator, if it reports them."""
    stats_fn = getattr(torch.cuda.memory, "host_memory_stats", None)
    if stats_fn is None:
        return None
    stats = stats_fn()
    return stats.get("allocated_bytes.current", stats.get("reserved_bytes.current")), stats.get("num_host_alloc")


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--race-steps", type=int, default=5)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--deterministic-attention", action="store_true",
                   help="math SDPA for both runs: flash/cuDNN attention backward accumulates dq "
                   "with atomics, so two runs differ in the last bits even without offload")
    args = p.parse_args()
    dev = "cuda"
    if args.deterministic_attention:
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(False)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    model = make_decoder(args.layers, args.hidden, 8, dtype=dtype, device=dev)
    reference = copy.deepcopy(model)
    offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    backend = offload_pass.make_backend()
    compiled = torch.compile(model, backend=backend)
    compiled_ref = torch.compile(reference)
    x = torch.randn(2, args.seq, args.hidden, device=dev, dtype=dtype)

    # 1. many steps
    allocated, held, pool, pools = [], [], [], []
    if args.steps == 0:
        compiled(x).backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            compiled(x).backward()
            torch.cuda.synchronize()
            held.append(runtime.host_bytes_held())
            pool.append(_pinned_pool())
            pools.append(runtime.host_pool_stats())
            model.zero_grad(set_to_none=True)
            allocated.append(torch.cuda.memory_allocated())
    relevant = [str(w.message) for w in caught if "offload_pass" in str(w.message)]
    if args.steps:
        print(f"steps: {args.steps}; offloaded {backend.plans[-1].offloaded_bytes / 2**20:.0f} MiB per step")
        print(f"device memory after each step: min {min(allocated)} max {max(allocated)} bytes "
              f"({'constant' if len(set(allocated)) == 1 else 'VARIES'})")
        print(f"host bytes held after each step: {sorted(set(held))}; pending events {runtime.pending_events()}")
        print(f"offload_pass warnings: {relevant or 'none'}")
        plan_pool = backend.plans[-1].host_pool
        print(f"plan's host pool: {plan_pool[0]} bytes, {plan_pool[1]} slots "
              f"(offloaded {backend.plans[-1].offloaded_bytes} bytes)")
        print(f"offload_pass host pools after step 1: {pools[0]}, after step {len(pools)}: {pools[-1]}; "
              f"{'the same every step' if all(p == pools[0] for p in pools) else 'VARIES'}")
        if pool and pool[0] is not None:
            grew = [i for i in range(1, len(pool)) if pool[i][1] > pool[i - 1][1]]
            print(f"PyTorch's pinned allocator (bytes, cudaHostAlloc calls) after step 1: {pool[0]}, "
                  f"after step {len(pool)}: {pool[-1]}; steps after the first where it grew: {grew or 'none'}")
        nbytes = plan_pool[0]
        start = time.perf_counter()
        raw, base, _ = runtime._page_locked(nbytes, True, torch.device("cuda"))
        registered = time.perf_counter() - start
        torch.cuda.cudart().cudaHostUnregister(base)
        del raw
        start = time.perf_counter()
        pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        allocated_s = time.perf_counter() - start
        del pinned
        print(f"page-locking {nbytes} bytes: offload_pass pool {registered * 1e3:.1f} ms (exactly that); "
              f"PyTorch's pinned allocator {allocated_s * 1e3:.1f} ms (rounds up to "
              f"{1 << (nbytes - 1).bit_length()} bytes)")

    # 2. race check: the copy streams start each step behind a large copy
    d2h, h2d = runtime.streams_for(torch.device(dev))
    big = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    big_host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    mismatches = 0
    for step in range(args.race_steps):
        xs = torch.randn_like(x)
        runs = {}
        # Same compiled offloaded graph, copy streams free vs. slowed: with
        # deterministic kernels any difference can only come from a missing
        # wait. Plain Inductor is printed for scale.
        for name, m, fn, slow in (
            ("inductor", reference, compiled_ref, False),
            ("offload", model, compiled, False),
            ("offload, slowed copies", model, compiled, True),
        ):
            m.zero_grad(set_to_none=True)
            if slow:
                with torch.cuda.stream(d2h):
                    big_host.copy_(big, non_blocking=True)
                with torch.cuda.stream(h2d):
                    big.copy_(big_host, non_blocking=True)
            fn(xs).backward()
            torch.cuda.synchronize()
            runs[name] = grads(m)
        fast, slowed, plain = runs["offload"], runs["offload, slowed copies"], runs["inductor"]
        bad = [n for n in fast if not torch.equal(fast[n], slowed[n])]
        mismatches += len(bad)
        vs_plain = max((fast[n] - plain[n]).abs().max().item() for n in fast)
        print(f"race step {step}: slowed vs free copy streams: "
              + ("identical" if not bad else f"MISMATCH in {', '.join(bad[:3])}")
              + f"; offload vs plain Inductor max abs diff {vs_plain:.3g}")
    print(f"race check: {args.race_steps} steps, {mismatches} mismatched gradients")


if __name__ == "__main__":
    main()
