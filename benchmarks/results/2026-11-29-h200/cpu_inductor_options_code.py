"""Thirty-second session, on the CPU: the code Inductor generates for a small bottleneck network (forward and
backward), plain and through offload_pass with nothing marked (no copies), with the two Inductor options the
backend turns off given back or not; counts kernels, allocations and reused buffers, and writes each graph's code
to OUTDIR/VARIANT_I.py to diff.

    python cpu_inductor_options_code.py OUTDIR inductor
    python cpu_inductor_options_code.py OUTDIR ours_none ""
    python cpu_inductor_options_code.py OUTDIR ours_none_both_on "" "{'allow_buffer_reuse': True, 'reorder_for_peak_memory': True}"
"""
import torch, torch.nn as nn, re, sys
import offload_pass
from torch._inductor.utils import run_and_get_code

class Block(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c1 = nn.Conv2d(c, c//4, 1, bias=False); s.b1 = nn.BatchNorm2d(c//4)
        s.c2 = nn.Conv2d(c//4, c//4, 3, padding=1, bias=False); s.b2 = nn.BatchNorm2d(c//4)
        s.c3 = nn.Conv2d(c//4, c, 1, bias=False); s.b3 = nn.BatchNorm2d(c)
    def forward(s, x):
        y = torch.relu(s.b1(s.c1(x))); y = torch.relu(s.b2(s.c2(y))); return torch.relu(s.b3(s.c3(y)) + x)
def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), *[Block(64) for _ in range(4)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
x = torch.randn(4, 3, 32, 32)
def run(backend, **kw):
    torch._dynamo.reset()
    m = make()
    c = torch.compile(m, backend=backend, **kw)
    def f():
        c(x).sum().backward()
    _, codes = run_and_get_code(f)
    return codes
outdir, variant = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[1:]
if variant == "inductor":
    codes = run("inductor")
elif variant == "recompute":
    torch._functorch.config.activation_memory_budget = float(sys.argv[2])
    codes = run("inductor")
else:
    b = offload_pass.make_backend(**eval("dict(%s)" % (sys.argv[2] if len(sys.argv) > 2 else "")))
    codes = run(b, options=eval(sys.argv[3]) if len(sys.argv) > 3 else None)
for i, c in enumerate(codes):
    open(f"{outdir}/{variant}_{i}.py", "w").write(c)
    calls = len(re.findall(r"^\s+(cpp_fused\w*|extern_kernels\.\w+|aten\.\w+)", c, re.M))
    allocs = len(re.findall(r"empty_strided", c)); dels = len(re.findall(r"^\s+del ", c, re.M)); reuse = len(re.findall(r"# reuse", c))
    print(variant, i, "lines", c.count("\n"), "calls", calls, "allocs", allocs, "dels", dels, "reuse", reuse)
