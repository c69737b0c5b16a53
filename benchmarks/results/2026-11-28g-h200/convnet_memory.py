"""Twenty-ninth and thirtieth sessions: timm ResNet-18 (batch 64, 224x224, fp32) on the GPU, every module marked, against plain
Inductor: peak memory above the weights, the synchronized step (median of 10 after 5 warm-up steps), and how many
offloads read a temporary the compiler made (Inductor lays convolution outputs out channels last; the copy reads
them with the strides of the traced values). Run: python convnet_memory.py"""
import statistics
import timm
import torch
import offload_pass
from offload_pass.runtime import ops

rows = []
for variant in ("inductor", "offload_pass"):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = timm.create_model("resnet18", num_classes=1000).cuda()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    backend = "inductor"
    if variant == "offload_pass":
        offload_pass.offload_modules(model, "**")
        backend = offload_pass.make_backend()
    compiled = torch.compile(model, backend=backend)

    def step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(compiled(x), y).backward()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ops.reset_stats()
    step()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    stats = ops.stats()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); step(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    offloaded = 0
    if variant == "offload_pass":
        offloaded = sum(e.nbytes for p in backend.plans for e in p.entries if e.decision == "offload") / 2**20
    rows.append((variant, statistics.median(times), peak, offloaded, stats.get("offload_calls", 0), stats.get("temporary_sources", 0)))
print(f"{'variant':<14} {'step ms':>8} {'peak MiB':>9} {'offloaded MiB':>13} {'copies':>6} {'temporaries':>11}")
for v, t, p, o, c, tmp in rows:
    print(f"{v:<14} {t:>8.2f} {p:>9.1f} {o:>13.1f} {c:>6} {tmp:>11}")
