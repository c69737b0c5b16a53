"""Compile time of offload_pass against plain Inductor, and the planner's share.

    python benchmarks/compile_overhead.py [--runs 3] [--models llama,decoder]

For each model (a tiny Hugging Face Llama from a config, and
``offload_pass.examples.models.make_decoder``) and each backend (plain
Inductor, offload_pass with attention and MLP marked and ``min_bytes=0``, so
copies are planned and placed), runs ``--runs`` fresh processes, each with its
own empty Inductor cache, that time the first call's forward and backward
(``torch._dynamo.reset()`` first: nothing compiled before). offload_pass's
compile pipeline logs each pass's time at DEBUG on the "offload_pass"
logger; their sum less "partition" (PyTorch's min-cut partitioner, which
plain Inductor runs too) is the planner's share. Prints one JSON object: per
model, each backend's median seconds, the ratio, and the median time in our
passes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

BACKENDS = ("inductor", "offload_pass")
MODELS = ("llama", "decoder")
_PASS_LINE = re.compile(r"pass (\S+): ([0-9.]+) ms")


def _build(name: str):
    """(model, call) where ``call(compiled)`` runs one forward and backward."""
    import torch

    if name == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=128, max_position_embeddings=64,
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
        return model, ("model.layers.*.self_attn", "model.layers.*.mlp"), (
            lambda compiled: compiled(input_ids=ids, labels=ids).loss.backward()
        )
    from offload_pass.examples.models import make_decoder

    model = make_decoder(layers=2, hidden=64, heads=8)
    x = torch.randn(2, 32, 64, generator=torch.Generator().manual_seed(1))
    return model, ("layers.*.attn", "layers.*.mlp"), lambda compiled: compiled(x).backward()


class _PassTimes(logging.Handler):
    """Adds up the pass times the compile pipeline logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.ms: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        found = _PASS_LINE.search(record.getMessage())
        if found:
            self.ms[found.group(1)] = self.ms.get(found.group(1), 0.0) + float(found.group(2))


def child(model_name: str, backend_name: str) -> dict:
    """One fresh process's first fwd+bwd: seconds, and our passes' ms."""
    import torch

    import offload_pass

    times = _PassTimes()
    logger = logging.getLogger("offload_pass")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(times)
    model, patterns, call = _build(model_name)
    backend = "inductor"
    if backend_name == "offload_pass":
        offload_pass.offload_modules(model, *patterns)
        backend = offload_pass.make_backend(min_bytes=0)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    start = time.perf_counter()
    call(compiled)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "passes_ms": times.ms}


def _run_child(model_name: str, backend_name: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        out = subprocess.run(
            [sys.executable, __file__, "--child", model_name, backend_name],
            env=env, check=True, capture_output=True, text=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    models = args.models.split(",")
    runs: dict = {m: {b: [] for b in BACKENDS} for m in models}
    for _ in range(args.runs):  # interleaved, so a busy machine slows every backend alike
        for m in models:
            for b in BACKENDS:
                runs[m][b].append(_run_child(m, b))
    result = {}
    for m in models:
        seconds = {b: statistics.median(r["seconds"] for r in runs[m][b]) for b in BACKENDS}
        ours = [
            sum(ms for name, ms in r["passes_ms"].items() if name != "partition") / 1e3
            for r in runs[m]["offload_pass"]
        ]
        per_pass = {}
        for r in runs[m]["offload_pass"]:
            for name, ms in r["passes_ms"].items():
                per_pass.setdefault(name, []).append(ms)
        result[m] = {
            "inductor_s": round(seconds["inductor"], 2),
            "offload_pass_s": round(seconds["offload_pass"], 2),
            "ratio": round(seconds["offload_pass"] / seconds["inductor"], 3),
            "planner_s": round(statistics.median(ours), 3),
            "planner_share": round(statistics.median(ours) / seconds["offload_pass"], 3),
            "slowest_passes_ms": dict(
                sorted(((k, round(statistics.median(v), 1)) for k, v in per_pass.items()), key=lambda kv: -kv[1])[:5]
            ),
            "runs": {b: [round(r["seconds"], 2) for r in runs[m][b]] for b in BACKENDS},
        }
    import torch

    print(json.dumps({"torch": torch.__version__, "runs": args.runs, "models": result}, indent=1))


if __name__ == "__main__":
    main()
