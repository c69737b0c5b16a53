"""Which saved set PyTorch's min-cut partitioner gives the bench's decoder (6x2048, seq 4096, b2, bf16) under
activation_memory_budget 1.0 / 0.9 / 0.8 / 0.7, on the joint plain Inductor's compile partitions (compiled under a
global activation_memory_budget=0.8, as the bench's recompute(0.8) variant) and on the one offload_pass's
mode="budget" compile partitions. Nothing runs past the first partition (an exception aborts each compile).
Twenty-eighth session: on the H200 offload_pass's level 0.9 recomputed 1504 MiB (peak 0.712) where PyTorch's
recompute(0.8) recomputed 1152 MiB (peak 0.735); on the CPU the two joints and their saved sets are one."""
import copy
import sys

import torch
import torch._functorch.partitioners as P
import torch._inductor.compile_fx as CF

import offload_pass
import offload_pass.backend as OB
from offload_pass.examples.models import make_decoder

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
real = P.min_cut_rematerialization_partition
sets: dict = {}


class Done(Exception):
    pass


def saved(fw):
    out = fw.graph.find_nodes(op="output")[0].args[0]
    named = {}
    for a in out:
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
            t = a.meta["val"]
            named[a.name] = (t.numel() * t.element_size(), str(a.target), tuple(t.shape))
    return named


def probe(tag):
    def f(gm, inputs, **kw):
        print(tag, "global activation_memory_budget", torch._functorch.config.activation_memory_budget, flush=True)
        print(tag, "partition kwargs", {k: (v if not isinstance(v, (list, tuple)) or len(v) < 8 else f"{len(v)} items")
                                        for k, v in kw.items()}, flush=True)
        sets[tag + " joint"] = [(n.op, str(n.target)) for n in gm.graph.nodes]
        for lvl in (1.0, 0.9, 0.8, 0.7):
            with torch._functorch.config.patch(activation_memory_budget=lvl):
                fw, _ = real(copy.deepcopy(gm), inputs, **kw)
            named = saved(fw)
            sets[(tag, lvl)] = named
            print(tag, lvl, f"{sum(b for b, _, _ in named.values()) / 2**20:.1f} MiB", len(named), flush=True)
        ops = sorted({str(n.target) for n in gm.graph.nodes if "attention" in str(n.target)})
        print(tag, "joint nodes", len(gm.graph.nodes), ops, flush=True)
        raise Done()
    return f


CF.min_cut_rematerialization_partition = probe("inductor")
OB.min_cut_rematerialization_partition = probe("ours")
for tag, backend, patch in (
    ("inductor", "inductor", {"activation_memory_budget": 0.8}),
    ("ours", offload_pass.make_backend(mode="budget", memory_budget=0.8), {}),
):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = make_decoder(6, 2048, 16, dtype=torch.bfloat16, device=device)
    x = torch.randn(2, 4096, 2048, dtype=torch.bfloat16, device=device)
    with torch._functorch.config.patch(**patch):
        try:
            torch.compile(m, backend=backend)(x)
        except Exception as e:  # Dynamo wraps Done
            if "Done" not in repr(e) and not isinstance(e, Done):
                print(tag, "error", type(e).__name__, str(e)[:300])
print("joints equal:", sets.get("inductor joint") == sets.get("ours joint"),
      len(sets.get("inductor joint", [])), len(sets.get("ours joint", [])))
a, b = sets.get("inductor joint", []), sets.get("ours joint", [])
for i, (x1, x2) in enumerate(zip(a, b)):
    if x1 != x2:
        print("first joint difference at", i, x1, x2)
        print("  inductor:", a[max(0, i - 3):i + 6])
        print("  ours:    ", b[max(0, i - 3):i + 6])
        break
from collections import Counter
ca, cb = Counter(t for _, t in a), Counter(t for _, t in b)
print("joint op counts differing:", {k: (ca[k], cb[k]) for k in set(ca) | set(cb) if ca[k] != cb[k]})
for lvl in (0.9, 0.8, 0.7):
    i, o = sets.get(("inductor", lvl), {}), sets.get(("ours", lvl), {})
    print(f"level {lvl}: inductor-only {sorted(set(i) - set(o))[:20]} ours-only {sorted(set(o) - set(i))[:20]}")
i8, i9 = sets.get(("inductor", 0.8), {}), sets.get(("inductor", 0.9), {})
print("inductor 0.8 vs 0.9: in 0.8 only", sorted(set(i8) - set(i9))[:30], "in 0.9 only", sorted(set(i9) - set(i8))[:30])
for lvl in (1.0, 0.9, 0.8, 0.7):
    for tag in ("inductor", "ours"):
        named = sets.get((tag, lvl), {})
        print(f"| {tag} | {lvl} | {len(named)} | {sum(b for b, _, _ in named.values()) / 2**20:.1f} MiB |")
