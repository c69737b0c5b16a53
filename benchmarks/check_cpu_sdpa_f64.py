"""Does plain Inductor train float64 attention on the CPU with this torch?
(pytorch/pytorch#185539: torch 2.11's meta function calls the logsumexp of
CPU flash attention float32 for a float64 query; the backward then fails.)
The draws of tests/test_reliability.py that fail on torch 2.11 are checked
too. One line per case:
  PYTHONPATH=. python benchmarks/check_cpu_sdpa_f64.py
"""
import sys

import torch
import torch.nn as nn

sys.path.insert(0, "tests")
from test_reliability import random_case  # noqa: E402

from offload_pass.examples.models import make_decoder  # noqa: E402


class DoubleAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24, dtype=torch.float64)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sin().sum()


def attempt(name, model, x):
    torch._dynamo.reset()
    try:
        torch.compile(model, backend="inductor")(x).backward()
        print(name, "plain inductor: ok", flush=True)
    except Exception as e:  # noqa: BLE001
        print(name, "plain inductor:", type(e).__name__, str(e).splitlines()[0][:120], flush=True)


print(torch.__version__)
torch.manual_seed(0)
attempt("DoubleAttention", DoubleAttention(), torch.randn(2, 6, 8, dtype=torch.float64))
for seed in (0, 3, 4):
    layers, heads, hidden, seq, dtype, offload, keep, config = random_case(seed)
    model = make_decoder(layers=layers, hidden=hidden, heads=heads, dtype=dtype, seed=seed)
    x = torch.randn(2, seq, hidden, dtype=dtype, generator=torch.Generator().manual_seed(seed))
    attempt(f"random_case({seed}) {dtype}", model, x)
