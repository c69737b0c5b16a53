"""Gradients bit for bit against plain Inductor, over Hugging Face architectures
built from tiny configs (no download).

Each architecture's attention and MLP modules are marked (by name pattern) and
the model runs ``--steps`` training steps (fp32, the same weights, batch and
seeds) compiled twice: with plain Inductor and with the offload backend
(``min_bytes=0, keep_if_no_gain=False``: every saved tensor the marks allow is
offloaded). The loss and every parameter's gradient of every step are compared
with ``torch.equal``; where they differ, the largest absolute difference is
reported. One row per setting (BERT runs twice: without and with dropout 0.1).
PyTorch's deterministic algorithms and Inductor's deterministic mode are on
(``--no-deterministic`` turns them off): without them the CPU's ``index_put``
adds in thread order and plain Inductor differs from itself.

    python benchmarks/arch_sweep.py --json OUT/arch_sweep.json
    python benchmarks/arch_sweep.py --models bert,bert_dropout --device cuda
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import time
import traceback
import warnings
from typing import Callable

import torch

import offload_pass

VOCAB = 128
SMALL = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64)
DECODER = ["model.layers.*.self_attn", "model.layers.*.mlp"]


def _builders() -> dict[str, tuple[str, Callable[[], torch.nn.Module], list[str]]]:
    """Setting name -> (architecture, builder, module name patterns to mark)."""
    import transformers as T

    kv = dict(num_hidden_layers=2, num_key_value_heads=2, **SMALL)
    bert = dict(num_hidden_layers=2, **SMALL)
    bert_marks = ["bert.encoder.layer.*.attention", "bert.encoder.layer.*.intermediate"]
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return {
        "llama": ("Llama", lambda: T.LlamaForCausalLM(T.LlamaConfig(**kv)), DECODER),
        "mistral": ("Mistral", lambda: T.MistralForCausalLM(T.MistralConfig(**kv)), DECODER),
        "qwen2": ("Qwen2", lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**kv)), DECODER),
        "gemma": ("Gemma", lambda: T.GemmaForCausalLM(T.GemmaConfig(head_dim=16, **kv)), DECODER),
        "gemma2": ("Gemma 2", lambda: T.Gemma2ForCausalLM(T.Gemma2Config(head_dim=16, **kv)), DECODER),
        "phi3": ("Phi-3", lambda: T.Phi3ForCausalLM(T.Phi3Config(pad_token_id=0, **kv)), DECODER),
        "olmo2": ("OLMo 2", lambda: T.Olmo2ForCausalLM(T.Olmo2Config(pad_token_id=0, **kv)), DECODER),
        "mixtral": ("Mixtral", lambda: T.MixtralForCausalLM(T.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, **kv)), DECODER),
        "opt": ("OPT", lambda: T.OPTForCausalLM(T.OPTConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128, vocab_size=VOCAB,
            max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.0, attention_dropout=0.0)),
            ["model.decoder.layers.*.self_attn", "model.decoder.layers.*.fc1"]),
        "bert": ("BERT", lambda: T.BertForMaskedLM(T.BertConfig(**bert, **no_dropout)), bert_marks),
        "bert_dropout": ("BERT", lambda: T.BertForMaskedLM(T.BertConfig(
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, **bert)), bert_marks),
        "t5": ("T5", lambda: T.T5ForConditionalGeneration(T.T5Config(
            num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, vocab_size=VOCAB,
            dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)),
            ["encoder.block.*.layer.*", "decoder.block.*.layer.*"]),
        "falcon": ("Falcon", lambda: T.FalconForCausalLM(T.FalconConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=VOCAB,
            hidden_dropout=0.0, attention_dropout=0.0)), ["transformer.h.*.self_attention", "transformer.h.*.mlp"]),
        "gptneox": ("GPT-NeoX", lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(
            hidden_dropout=0.0, attention_dropout=0.0, **bert)), ["gpt_neox.layers.*.attention", "gpt_neox.layers.*.mlp"]),
    }


def _inputs(device: str) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 16), generator=g).to(device)
    return {"input_ids": ids, "labels": ids.clone()}


def _steps(model: torch.nn.Module, backend, inputs: dict, n: int) -> list[tuple[torch.Tensor, dict]]:
    """Loss and gradients of ``n`` steps, each seeded alike (dropout draws the same masks)."""
    compiled = torch.compile(model, backend=backend)
    out = []
    for i in range(n):
        torch.manual_seed(7 + i)
        model.zero_grad(set_to_none=True)
        loss = compiled(**inputs).loss
        loss.backward()
        out.append((loss.detach().clone(), {k: p.grad.clone() for k, p in model.named_parameters()
                                            if p.grad is not None}))
    return out


def _differences(got: list, want: list) -> tuple[int, float]:
    """How many of the compared tensors differ, and the largest absolute difference."""
    count, largest = 0, 0.0
    for (l1, g1), (l2, g2) in zip(got, want):
        pairs = [(l1, l2)] + [(g1.get(k), g2[k]) for k in g2]
        for ours, theirs in pairs:
            if ours is None:
                count, largest = count + 1, float("inf")
            elif not torch.equal(ours, theirs):
                count, largest = count + 1, max(largest, (ours - theirs).abs().max().item())
    return count, largest


def run_one(setting: str, args: argparse.Namespace) -> dict:
    architecture, build, patterns = _builders()[setting]
    start = time.time()
    torch.manual_seed(0)
    reference = build().to(args.device)
    torch.manual_seed(0)
    model = build().to(args.device)
    names = [n for n, _ in model.named_modules()
             if any(fnmatch.fnmatch(n, p) and n.count(".") == p.count(".") for p in patterns)]
    offload_pass.offload_modules(model, *names)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    inputs = _inputs(args.device)
    torch._dynamo.reset()
    want = _steps(reference, "inductor", inputs, args.steps)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _steps(model, backend, inputs, args.steps)
    torch._dynamo.reset()
    differing, largest = _differences(got, want)
    compared = args.steps * (1 + len(want[0][1]))
    offloaded = [e for p in backend.plans for e in p.entries if str(e.decision) == "offload"]
    return {"setting": setting, "architecture": architecture, "graphs": len(backend.plans), "marked": len(names),
            "offloaded": len(offloaded), "offloaded_kib": round(sum(e.nbytes for e in offloaded) / 1024, 1),
            "compared": compared, "differing": differing, "max_difference": largest,
            "bitwise": differing == 0, "seconds": round(time.time() - start, 1)}


def _header(args: argparse.Namespace) -> dict:
    import transformers

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
            "transformers": transformers.__version__, "commit": commit,
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "args": vars(args)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default=",".join(_builders()))
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false")
    p.add_argument("--json")
    args = p.parse_args()
    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch._inductor.config.deterministic = True
    rows = []
    for setting in args.models.split(","):
        try:
            row = run_one(setting, args)
        except Exception as error:  # reported per model: one failure must not hide the others
            traceback.print_exc()
            row = {"setting": setting, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(_header(args) | {"rows": rows}, f, indent=1)
    print(f"\n{'setting':<13} {'graphs':>6} {'marked':>6} {'offloaded':>9} {'differing':>9} {'max diff':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['setting']:<13} ERROR {r['error']}")
            continue
        print(f"{r['setting']:<13} {r['graphs']:>6} {r['marked']:>6} {r['offloaded']:>9} "
              f"{r['differing']:>5}/{r['compared']:<3} {r['max_difference']:>9.2e}")


if __name__ == "__main__":
    main()
