"""Thirty-fourth session, on the CPU: the saved sets of PyTorch's partition of one decoder under
activation_memory_budget at each of LEVELS, through plain Inductor, against the partitions offload_pass's
mode="budget" search makes of the same model (its RECOMPUTE_LEVELS set to LEVELS, a budget out of reach so that
it tries them). PyTorch's compile stops after its partitions; ours compiles and runs one step (at the
benchmark's size, about a minute on a 2-core CPU).

    python benchmarks/results/2026-11-29c-h200/cpu_partition_levels.py LAYERS HIDDEN HEADS SEQ BATCH LEVELS
    python benchmarks/results/2026-11-29c-h200/cpu_partition_levels.py 6 2048 16 4096 2 0.9,0.8,0.6   # the benchmark's decoder
"""
import sys

import torch
import torch._functorch.partitioners as partitioners
from torch._inductor.custom_graph_pass import CustomPartitionerFn

import offload_pass
import offload_pass.backend as backend
from offload_pass.examples.models import make_decoder

layers, hidden, heads, seq, batch = (int(a) for a in sys.argv[1:6])
levels = [float(a) for a in sys.argv[6].split(",")]
real = partitioners.min_cut_rematerialization_partition


class Stop(Exception):
    pass


def saved(fw: torch.fx.GraphModule, kwargs: dict) -> dict[str, int]:
    """The forward's saved tensors: name -> bytes."""
    out = fw.graph.find_nodes(op="output")[0].args[0]
    nodes = [n for n in out[kwargs["num_fwd_outputs"]:] if isinstance(n, torch.fx.Node)]
    return {n.name: n.meta["val"].numel() * n.meta["val"].element_size() if isinstance(n.meta.get("val"), torch.Tensor) else 0
            for n in nodes}


plain: dict[float, dict[str, int]] = {}


class PlainLevels(CustomPartitionerFn):
    """PyTorch's partitioner at each level, then stop the compile."""

    def uuid(self):
        return None

    def __call__(self, joint, inputs, **kwargs):
        for level in levels:
            with torch._functorch.config.patch(activation_memory_budget=level):
                plain[level] = saved(real(joint, inputs, **kwargs)[0], kwargs)
        raise Stop()


x = torch.randn(batch, seq, hidden, dtype=torch.bfloat16)
model = make_decoder(layers, hidden, heads, dtype=torch.bfloat16)
torch._dynamo.reset()
try:
    with torch._inductor.config.patch(custom_partitioner_fn=PlainLevels()):
        torch.compile(model, backend="inductor")(x).backward()
except Exception as error:
    if "Stop" not in repr(error):
        raise

ours: list[tuple[float, dict[str, int]]] = []


def recorded(joint, inputs, **kwargs):
    fw, bw = real(joint, inputs, **kwargs)
    ours.append((torch._functorch.config.activation_memory_budget, saved(fw, kwargs)))
    return fw, bw


backend.min_cut_rematerialization_partition = recorded
backend.RECOMPUTE_LEVELS = tuple(levels)
torch._dynamo.reset()
# A budget out of reach: the search partitions every level (those saving a set seen before are skipped).
torch.compile(model, backend=offload_pass.make_backend(mode="budget", memory_budget=0.05))(x).backward()

for level, names in plain.items():
    print(f"PyTorch at {level}: {len(names)} saved, {sum(names.values()) / 2**20:.1f} MiB")
for level, names in ours:
    line = f"ours at {level}: {len(names)} saved, {sum(names.values()) / 2**20:.1f} MiB"
    if level in plain:
        line += f"; only PyTorch's: {sorted(set(plain[level]) - set(names))}, only ours: {sorted(set(names) - set(plain[level]))}"
    print(line)
