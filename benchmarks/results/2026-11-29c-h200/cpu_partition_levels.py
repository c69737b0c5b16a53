"""Thirty-fourth session, on the CPU: the saved sets of PyTorch's partition of one decoder under
activation_memory_budget at each of LEVELS, through plain Inductor, against the partitions offload_pass's
mode="budget" search makes of the same model (its RECOMPUTE_LEVELS set to LEVELS, a budget out of reach so that
it tries them). Traced only: each compile stops after its partitions, nothing runs.

    python benchmarks/results/2026-11-29c-h200/cpu_partition_levels.py LAYERS HIDDEN HEADS SEQ BATCH LEVELS
    python benchmarks/results/2026-11-29c-h200/cpu_partition_levels.py 6 2048 16 4096 2 0.9,0.8,0.6   # the benchmark's decoder
"""
import sys, torch, functools
import torch._functorch.partitioners as P
import offload_pass, offload_pass.backend as backend
from offload_pass.examples.models import make_decoder

L, H, HEADS, S, B = [int(a) for a in sys.argv[1:6]]
levels = [float(a) for a in sys.argv[6].split(",")]
dtype = torch.bfloat16
real = P.min_cut_rematerialization_partition

def saved(fw, kw):
    out = fw.graph.find_nodes(op="output")[0].args[0]
    return [(n.name, tuple(n.meta["val"].shape) if hasattr(n.meta.get("val"), "shape") else None) for n in out[kw["num_fwd_outputs"]:] if isinstance(n, torch.fx.Node)]

def mib(names):
    tot = 0
    for n, shp in names:
        if shp is not None:
            import math; tot += math.prod(shp) * 2
    return tot / 2**20

class Stop(Exception): pass

results = {}
from torch._inductor.custom_graph_pass import CustomPartitionerFn
class PlainP(CustomPartitionerFn):
    def uuid(self): return None
    def __call__(self, joint, inputs, **kw): return plain_partitioner(joint, inputs, **kw)
def plain_partitioner(joint, inputs, **kw):
    for lvl in levels:
        with torch._functorch.config.patch(activation_memory_budget=lvl):
            fw, bw = real(joint, inputs, **kw)
        results[("plain", lvl)] = saved(fw, kw)
    raise Stop()

x = torch.randn(B, S, H, dtype=dtype)
m = make_decoder(L, H, HEADS, dtype=dtype)
torch._dynamo.reset()
try:
    with torch._inductor.config.patch(custom_partitioner_fn=PlainP()):
        torch.compile(m, backend="inductor")(x).backward()
except Exception as e:
    if "Stop" not in repr(e): raise

# ours: wrap backend's partition function
ours_calls = []
def wrapped(joint, inputs, **kw):
    fw, bw = real(joint, inputs, **kw)
    ours_calls.append((torch._functorch.config.activation_memory_budget, saved(fw, kw)))
    if len(ours_calls) > len(levels): raise Stop()
    return fw, bw
backend.min_cut_rematerialization_partition = wrapped
backend.RECOMPUTE_LEVELS = tuple(levels)
torch._dynamo.reset()
be = offload_pass.make_backend(mode="budget", memory_budget=0.05) if hasattr(offload_pass, "make_backend") else None
try:
    torch.compile(m, backend=be)(x).backward()
except Exception as e:
    print("ours raised", type(e).__name__, str(e)[:200])
for lvl in levels:
    p = {n for n, _ in results[("plain", lvl)]}
    print(f"plain {lvl}: {len(p)} saved, {mib(results[('plain', lvl)]):.1f} MiB")
for lvl, s in ours_calls:
    names = {n for n, _ in s}
    print(f"ours  {lvl}: {len(names)} saved, {mib(s):.1f} MiB", end="")
    if ("plain", lvl) in results:
        p = {n for n, _ in results[("plain", lvl)]}
        print(f"  only plain: {sorted(p - names)[:8]} only ours: {sorted(names - p)[:8]}")
    else:
        print()
