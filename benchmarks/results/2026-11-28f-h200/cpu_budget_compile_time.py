"""Thirtieth session, on the CPU (torch 2.13): how long mode="budget" takes to compile a ResNet-50-shaped network
(width 16, batch 4, 64 x 64), and where the time goes. Run: python cpu_budget_compile_time.py [BUDGET]"""
import logging, sys, time, cProfile, pstats
import torch, torch.nn as nn
import offload_pass

class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = mid * 4
        self.c1, self.b1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None if (cin == cout and stride == 1) else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(self, x):
        h = torch.relu(self.b1(self.c1(x)))
        h = torch.relu(self.b2(self.c2(h)))
        h = self.b3(self.c3(h))
        return torch.relu(h + (x if self.down is None else self.down(x)))

def resnet50(width=64):
    layers, cin = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], width
    for i, (n, mid) in enumerate([(3, width), (4, width * 2), (6, width * 4), (3, width * 8)]):
        for j in range(n):
            layers.append(Bottleneck(cin, mid, 2 if (j == 0 and i > 0) else 1)); cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)

budget = float(sys.argv[1]) if len(sys.argv) > 1 else 0.6
logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(name)s: %(message)s")
logging.getLogger("offload_pass").setLevel(logging.INFO)
torch.manual_seed(0)
model = resnet50(16)
x = torch.randn(4, 3, 64, 64)
backend = offload_pass.make_backend(mode="budget", memory_budget=budget)
compiled = torch.compile(model, backend=backend)
prof = cProfile.Profile()
start = time.time()
prof.enable()
compiled(x).square().mean().backward()
prof.disable()
print(f"first step (compile) {time.time() - start:.1f} s")
pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
print(backend.plans[-1])
