"""Offloading under data parallelism: FSDP2 and DDP, two CPU processes (gloo).

Each test spawns 2 ranks on localhost. On every rank, a small decoder with
attention and MLP marked is trained for 2 steps (SGD in between) compiled with
an offload backend, then the same model, weights and inputs compiled with
plain Inductor and no marks. The ranks send their losses, local gradients and
plans back here, and the asserts run in this (pytest) process:

(a) every rank's gradients equal the reference's (FSDP2: the local shards);
(b) the offloaded tensors are the same on both ranks, and each layer offloads;
(c) no offloaded tensor was produced by a collective (c10d / FSDP ops). On
    torch 2.13 no collective is inside a compiled graph at all (below); the
    check is there for versions or settings that trace them.

How the two wrappers reach the backend (torch 2.13, CPU):

- FSDP2 (``fully_shard``) works on CPU with gloo. Its hooks are
  ``torch._dynamo.disable``d, so Dynamo breaks the graph at each sharded
  layer: each layer's forward is its own graph (one plan per layer), its
  parameters arrive already all-gathered as graph inputs, and no collective
  is inside a compiled graph.
- DDP under ``torch.compile`` goes through DDPOptimizer, which splits the
  graph at gradient-bucket boundaries and calls the backend once per piece.
  Buckets cannot be made smaller than DDPOptimizer's first bucket (1 MiB), so
  the DDP model is wide enough (hidden 128, ~1.5 MiB of parameters) to give
  two pieces with ``bucket_cap_mb=1``.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
import traceback
import warnings

import pytest
import torch
import torch.multiprocessing as mp

WORLD_SIZE = 2
STEPS = 2
LAYERS = 2
SEQ = 16
HIDDEN = {"fsdp": 32, "ddp": 128}
TIMEOUT_S = 240  # whole spawn; each test takes about a minute on 2 cores
# Namespaces of ops that FSDP, DDP and functional collectives put in graphs.
COLLECTIVE_NAMESPACES = {
    "c10d",
    "_c10d_functional",
    "c10d_functional",
    "_c10d_functional_autograd",
    "_dtensor",
    "fsdp",
}


# --------------------------------------------------------------------------
# Child processes


def _local(grad: torch.Tensor) -> torch.Tensor:
    """FSDP2 gradients are DTensors: compare this rank's shard."""
    return grad.to_local() if hasattr(grad, "to_local") else grad


def _train(parallel: str, rank: int, backend: object, mark: bool) -> list[dict]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    import offload_pass
    from offload_pass.examples.models import make_decoder

    hidden = HIDDEN[parallel]
    model = make_decoder(layers=LAYERS, hidden=hidden, heads=4, seed=0)  # same weights on every rank
    if parallel == "fsdp":
        # An explicit CPU mesh: by default FSDP2 takes CUDA when there is a GPU.
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model
    else:
        wrapped = DDP(model, bucket_cap_mb=1)
    if mark:
        offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    compiled = torch.compile(wrapped, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # Different data on each rank (so the gradient reduction matters), the
    # same data for the offloaded and the reference run.
    generator = torch.Generator().manual_seed(1000 + rank)
    inputs = [torch.randn(2, SEQ, hidden, generator=generator) for _ in range(STEPS)]
    history = []
    for x in inputs:
        optimizer.zero_grad(set_to_none=True)
        loss = compiled(x)
        loss.backward()
        history.append(
            {
                "loss": loss.detach().clone(),
                "grads": {n: _local(p.grad).detach().clone() for n, p in model.named_parameters()},
            }
        )
        optimizer.step()
    return history


def _worker(rank: int, parallel: str, port: int, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(WORLD_SIZE),
        OFFLOAD_PASS_CACHE_DIR=os.path.join(out_dir, f"offload-pass-rank{rank}"),
    )
    import torch._inductor.config
    import torch.distributed as dist

    import offload_pass
    from offload_pass.compile_caches import graph_caches_off

    # As tests/conftest.py: no graph cache decides what a test sees; the
    # ranks build each kernel once, for both.
    graph_caches_off(os.path.join(out_dir, "inductor-kernels"))
    torch._inductor.config.compile_threads = 1  # no compile worker pool: 2 ranks on 2 cores
    torch.set_num_threads(1)

    dist.init_process_group(
        "gloo", rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=TIMEOUT_S)
    )
    path = os.path.join(out_dir, f"rank{rank}.pt")
    try:
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _train(parallel, rank, backend, mark=True)
        torch._dynamo.reset()
        want = _train(parallel, rank, "inductor", mark=False)
        plans = [
            {
                "graph_id": plan.graph_id,
                "entries": [
                    (e.name, e.op, e.module, e.role, e.decision, str(dict(e.detail).get("by", ""))) for e in plan.entries
                ],
                "offloaded_bytes": plan.offloaded_bytes,
            }
            for plan in backend.plans
        ]
        result = {
            "rank": rank,
            "got": got,
            "want": want,
            "plans": plans,
            "warnings": sorted({str(w.message) for w in caught if "offload_pass" in str(w.message)}),
        }
    except BaseException:
        result = {"rank": rank, "error": traceback.format_exc()}
        torch.save(result, path)
        raise
    torch.save(result, path)
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# Parent (pytest)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(parallel: str, out_dir) -> list[dict]:
    """Spawn the ranks, wait for them (at most TIMEOUT_S), return their results."""
    context = mp.start_processes(
        _worker,
        args=(parallel, _free_port(), str(out_dir)),
        nprocs=WORLD_SIZE,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not context.join(timeout=5):  # raises if a rank failed (and stops the others)
            if time.monotonic() > deadline:
                pytest.fail(f"{parallel}: the ranks did not finish within {TIMEOUT_S} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join()
    results = []
    for rank in range(WORLD_SIZE):
        result = torch.load(out_dir / f"rank{rank}.pt", weights_only=False)
        assert "error" not in result, f"rank {rank} failed:\n{result['error']}"
        results.append(result)
    return results


def _offloaded(result: dict) -> list[tuple]:
    return sorted(
        (plan["graph_id"], name, op, module, reason)
        for plan in result["plans"]
        for name, op, module, _role, decision, reason in plan["entries"]
        if decision == "offload"
    )


@pytest.mark.parametrize("parallel", ["fsdp", "ddp"])
def test_offload_under_data_parallel(parallel, tmp_path):
    results = _run_ranks(parallel, tmp_path)
    for result in results:  # shown on failure; see /tmp/distributed_findings.md #3 for DDP's
        for message in result["warnings"]:
            print(f"{parallel}, rank {result['rank']}: warning: {message}")

    # (a) gradients (and losses) equal plain Inductor's, on every rank and step.
    for result in results:
        rank = result["rank"]
        assert len(result["got"]) == len(result["want"]) == STEPS
        for step, (got, want) in enumerate(zip(result["got"], result["want"])):
            where = f"{parallel}, rank {rank}, step {step}"
            torch.testing.assert_close(
                got["loss"], want["loss"], atol=1e-6, rtol=1e-5, msg=lambda m: f"{where}, loss: {m}"
            )
            assert got["grads"].keys() == want["grads"].keys(), where
            for name in want["grads"]:
                # A vanishing gradient would pass any comparison.
                assert want["grads"][name].abs().max() > 1e-4, f"{where}: reference grad of {name} ~ 0"
                torch.testing.assert_close(
                    got["grads"][name],
                    want["grads"][name],
                    atol=1e-6,
                    rtol=1e-5,
                    msg=lambda m: f"{where}, grad of {name}: {m}",
                )

    # (b) the same tensors offloaded on both ranks; every layer offloads.
    offloaded = [_offloaded(result) for result in results]
    for result, chosen in zip(results, offloaded):
        plans = "\n".join(str(p["entries"]) for p in result["plans"])
        assert chosen, f"{parallel}, rank {result['rank']}: nothing was offloaded; plans:\n{plans}"
        marks = " ".join(by for *_, by in chosen)
        for layer in range(LAYERS):
            for part in ("attn", "mlp"):
                assert f"layers.{layer}.{part}" in marks, (
                    f"{parallel}, rank {result['rank']}: nothing offloaded by layers.{layer}.{part} "
                    f"(did the layer run uncompiled?); offloaded: {chosen}"
                )
    keys = [[(graph_id, name) for graph_id, name, *_ in chosen] for chosen in offloaded]
    assert keys[0] == keys[1], (
        f"{parallel}: the ranks offloaded different tensors:\n"
        f"only rank 0: {sorted(set(keys[0]) - set(keys[1]))}\n"
        f"only rank 1: {sorted(set(keys[1]) - set(keys[0]))}"
    )

    # (c) nothing a collective produced is offloaded.
    for result, chosen in zip(results, offloaded):
        bad = [entry for entry in chosen if entry[2].split(".")[0] in COLLECTIVE_NAMESPACES]
        assert not bad, f"{parallel}, rank {result['rank']}: collective outputs offloaded: {bad}"

    if parallel == "ddp":
        # DDPOptimizer split the graph and the backend planned each piece.
        assert all(len(result["plans"]) >= 2 for result in results), (
            f"ddp: expected DDPOptimizer to split the graph into >= 2 pieces, got "
            f"{[len(result['plans']) for result in results]} plans per rank"
        )
