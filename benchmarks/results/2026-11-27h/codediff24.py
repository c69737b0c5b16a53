"""Dump Inductor's generated code (forward, backward) for one sweep model on a device,
plain Inductor and offload_pass, deterministic mode; OUT/code_{plain,ours}.txt."""
import os, sys, torch, offload_pass, fnmatch, logging
os.environ.setdefault("DET", "1")
sys.argv, name, out = [sys.argv[0]], sys.argv[1], sys.argv[2]
exec(open(__import__("os").path.join(__import__("os").path.dirname(__file__), "sweep24.py")).read().split("import os\nfor name in sys.argv")[0])
import torch._inductor.codecache as cc
from torch._inductor.graph import GraphLowering
codes = []
orig = GraphLowering.compile_to_module
def grab(self, *a, **k):
    mod = orig(self, *a, **k)
    try:
        codes.append(open(mod.__file__).read())
    except Exception as e:
        codes.append(f"# no code: {e}")
    return mod
GraphLowering.compile_to_module = grab
inputs = lm()
for label in ("plain", "ours"):
    codes.clear()
    m, _, pats = build(name); m = m.to(DEV)
    if label == "ours":
        names = [n for n, _ in m.named_modules() if any(fnmatch.fnmatch(n, p) and n.count(".") == p.count(".") for p in pats)]
        offload_pass.offload_modules(m, *names)
        be = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    else:
        be = "inductor"
    torch._dynamo.reset()
    res = steps(m, be, inputs, n=1, seed=7)
    with open(f"{out}/code_{label}.txt", "w") as f:
        for i, c in enumerate(codes):
            f.write(f"######## module {i}\n{c}\n")
    torch.save(res[0][1], f"{out}/grads_{label}.pt")
    print(label, len(codes), "modules")
