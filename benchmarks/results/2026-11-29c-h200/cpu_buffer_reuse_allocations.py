"""Thirty-fourth session, on the CPU: what Inductor's `allow_buffer_reuse=False` (which offload_pass's backend sets,
design.md 6) changes in the code of one partition: PyTorch's compile of a 6 x 256 decoder under
activation_memory_budget=0.8, with the option as Inductor sets it and off; counts the allocations
(`empty_strided`) and kernel calls in the generated forward and backward.

    python benchmarks/results/2026-11-29c-h200/cpu_buffer_reuse_allocations.py
"""
import re

import torch
from torch._inductor.utils import run_and_get_code

from offload_pass.examples.models import make_decoder

x = torch.randn(2, 256, 256)


def counts(options: dict) -> list[tuple[int, int]]:
    torch._dynamo.reset()
    model = make_decoder(6, 256, 4)
    compiled = torch.compile(model, backend="inductor", options=options)
    _, codes = run_and_get_code(lambda: compiled(x).backward())
    out = []
    for code in codes:
        call = code[code.find("def call("):]
        out.append((len(re.findall(r"empty_strided", call)), len(re.findall(r"\.run\(|extern_kernels\.|cpp_fused", call))))
    return out


with torch._functorch.config.patch(activation_memory_budget=0.8):
    for name, options in [("buffer reuse on (Inductor's default)", {}), ("buffer reuse off", {"allow_buffer_reuse": False})]:
        (fa, fk), (ba, bk) = counts(options)
        print(f"{name}: forward {fa} allocations, {fk} kernel calls; backward {ba} allocations, {bk} kernel calls")
