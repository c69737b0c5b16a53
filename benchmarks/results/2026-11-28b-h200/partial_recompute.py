"""Experiment (not landed): what the step simulator predicts for recomputing
only part of PyTorch's level-0.9 recompute set on HF Llama (plan_proxy's
scale-8 model, budget 0.8), the rest left to offload. A pseudo-level in
RECOMPUTE_LEVELS, 0.9xx, means: partition at the default budget with the
level-0.9 recompute set's tensors of layers >= K tagged MUST_RECOMPUTE."""
import re
import sys

sys.path.insert(0, "benchmarks")
import torch
from torch.utils.checkpoint import CheckpointPolicy

import offload_pass.backend as backend
from offload_pass.marking.naming import module_name

real = backend.min_cut_rematerialization_partition
PSEUDO = {}  # level -> first layer recomputed
cache = {}


def saved_names(fw_gm, kwargs):
    out = fw_gm.graph.find_nodes(op="output")[0].args[0]
    return {n.name for n in out[kwargs["num_fwd_outputs"]:] if isinstance(n, torch.fx.Node)}


def wrapper(joint, joint_inputs, **kwargs):
    level = torch._functorch.config.activation_memory_budget
    if level not in PSEUDO:
        return real(joint, joint_inputs, **kwargs)
    if "R" not in cache:
        with torch._functorch.config.patch(activation_memory_budget=1.0):
            none = saved_names(real(joint, joint_inputs, **kwargs)[0], kwargs)
        with torch._functorch.config.patch(activation_memory_budget=0.9):
            deep = saved_names(real(joint, joint_inputs, **kwargs)[0], kwargs)
        cache["R"] = none - deep
    first = PSEUDO[level]
    tagged = {}
    for node in joint.graph.nodes:
        if node.name in cache["R"]:
            m = re.search(r"layers\.(\d+)", module_name(node) or "")
            if m and int(m.group(1)) >= first:
                tagged[node] = node.meta.get("recompute")
                node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    try:
        with torch._functorch.config.patch(activation_memory_budget=1.0):
            return real(joint, joint_inputs, **kwargs)
    finally:
        for node, old in tagged.items():
            if old is None:
                node.meta.pop("recompute", None)
            else:
                node.meta["recompute"] = old


backend.min_cut_rematerialization_partition = wrapper
levels = []
for arg in sys.argv[1].split(","):
    if arg.startswith("L"):  # L4: recompute layers >= 4
        k = int(arg[1:])
        lvl = 0.95 + k / 1000
        PSEUDO[lvl] = k
        levels.append(lvl)
    else:
        levels.append(float(arg))
backend.RECOMPUTE_LEVELS = tuple(levels)
import runpy
sys.argv = ["plan_proxy.py", *sys.argv[2:]]
runpy.run_path("benchmarks/plan_proxy.py", run_name="__main__")
