"""Models we did not write, as a new user would try them: every module marked,
gradients against plain Inductor's and the exact (float64, eager) ones.

Hugging Face architectures built from small configs (no download) and,
convolutional networks (a small residual one of our own; timm's ResNet-18,
``resnet18``, and any timm model by name, ``timm:NAME``, where timm is
installed): each model runs ``--steps`` training
steps (the same weights and batch each step) compiled with plain Inductor and
with ``offload_modules(model, "**")`` under the offload backend (``min_bytes=0,
keep_if_no_gain=False``: every saved tensor the marks allow is offloaded). A
model passes when every parameter's gradient of every step stands within
``--factor`` x plain Inductor's own distance from the exact gradient (plus
``--floor`` of the exact gradient's largest value: where plain Inductor is
exact to the last bit); the losses alike. The table lists what was offloaded,
how many of the copies read a temporary the compiler made
(``stats()["temporary_sources"]``) and each model's worst ratio; ``--json``
writes the rows.

    python benchmarks/model_zoo.py --device cuda --json OUT/zoo.json
    python benchmarks/model_zoo.py --device cuda --models timm:convnext_atto,timm:densenet121
    python benchmarks/model_zoo.py --device cpu --models mamba,t5 --hidden 64
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import traceback
import warnings
from typing import Callable

import torch

import offload_pass
from offload_pass.enums import Decision


def _hf(name: str, hidden: int, layers: int, vocab: int) -> torch.nn.Module:
    import transformers as T

    heads, ffn = 4, 2 * hidden
    head_dim = hidden // heads
    common = dict(vocab_size=vocab, max_position_embeddings=1024)
    decoder = dict(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=2,
        intermediate_size=ffn, **common,
    )
    builders: dict[str, Callable[[], torch.nn.Module]] = {
        "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(head_dim=head_dim, **decoder)),
        "gemma3": lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(head_dim=head_dim, sliding_window=16, **decoder)),
        "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(pad_token_id=0, **decoder)),
        "olmo2": lambda: T.Olmo2ForCausalLM(T.Olmo2Config(pad_token_id=0, **decoder)),
        "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, **(decoder | {"intermediate_size": hidden}))),
        "gpt_oss": lambda: T.GptOssForCausalLM(T.GptOssConfig(
            head_dim=head_dim, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
            layer_types=["sliding_attention", "full_attention"] * (layers // 2) + ["sliding_attention"] * (layers % 2),
            **(decoder | {"intermediate_size": hidden}))),
        "deepseek_v3": lambda: T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
            moe_intermediate_size=hidden // 2, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
            first_k_dense_replace=1, q_lora_rank=hidden // 2, kv_lora_rank=hidden // 4, qk_rope_head_dim=head_dim // 2,
            qk_nope_head_dim=head_dim // 2, v_head_dim=head_dim, **(decoder | {"num_key_value_heads": heads}))),
        "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(
            num_layers=layers, num_decoder_layers=layers, d_model=hidden, d_kv=head_dim, num_heads=heads, d_ff=ffn,
            vocab_size=vocab, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)),
        "mamba": lambda: T.MambaForCausalLM(T.MambaConfig(
            num_hidden_layers=layers, hidden_size=hidden, state_size=16, vocab_size=vocab)),
    }
    return builders[name]()


HF_MODELS = ("gemma2", "gemma3", "phi3", "olmo2", "mixtral", "gpt_oss", "deepseek_v3", "t5", "mamba")


def _timm(name: str, image: int) -> torch.nn.Module:
    import timm

    # Vision transformers are built for one image size; the others take any.
    sized = {"img_size": image} if name.startswith(("vit", "deit", "swin")) else {}
    return timm.create_model(name, num_classes=10, pretrained=False, **sized)


def _is_image_model(name: str) -> bool:
    return name in ("resnet18", "convnet") or name.startswith("timm:")


class _Block(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def _convnet() -> torch.nn.Module:
    """A small residual network of our own (where timm is not installed)."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), _Block(32), _Block(32), torch.nn.MaxPool2d(2), _Block(32),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    )


def build(name: str, args: argparse.Namespace) -> tuple[torch.nn.Module, dict]:
    """The model (float32) and its batch, both on ``args.device``."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if _is_image_model(name):
        model = _convnet() if name == "convnet" else _timm(name.removeprefix("timm:"), args.image)
        batch = {"x": torch.randn(args.batch, 3, args.image, args.image, generator=g),
                 "labels": torch.randint(0, 10, (args.batch,), generator=g)}
    else:
        model = _hf(name, args.hidden, args.layers, args.vocab)
        # Mamba's scan (transformers' path without its CUDA kernels) is a loop
        # over the sequence, unrolled in the graph: 128 positions compiled
        # for 8 minutes on the H200.
        seq = min(args.seq, 32) if name == "mamba" else args.seq
        ids = torch.randint(0, args.vocab, (args.batch, seq), generator=g)
        batch = {"input_ids": ids, "labels": ids.clone()}
    model, batch = model.to(args.device), {k: v.to(args.device) for k, v in batch.items()}
    if args.channels_last and _is_image_model(name):
        # As users of convolutional networks train them.
        model = model.to(memory_format=torch.channels_last)
        batch["x"] = batch["x"].contiguous(memory_format=torch.channels_last)
    return model, batch


def loss_of(name: str, model, batch: dict) -> torch.Tensor:
    if _is_image_model(name):
        return torch.nn.functional.cross_entropy(model(batch["x"]), batch["labels"])
    return model(**batch).loss


def steps(name: str, model: torch.nn.Module, runner, batch: dict, n: int) -> list[tuple[torch.Tensor, dict]]:
    out = []
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        loss = loss_of(name, runner, batch)
        loss.backward()
        out.append((loss.detach().double(), {k: p.grad.detach().double() for k, p in model.named_parameters()
                                              if p.grad is not None}))
    return out


def worst_ratio(got: list, plain: list, exact: tuple, floor: float) -> tuple[float, str]:
    """The largest distance from the exact values, ours over plain Inductor's
    (plus ``floor`` x the exact value's largest magnitude), over steps and
    parameters; and where it was."""
    exact_loss, exact_grads = exact
    worst, where = 0.0, ""
    for step, ((l1, g1), (l2, g2)) in enumerate(zip(got, plain)):
        pairs = [("loss", l1, l2, exact_loss)] + [(k, g1.get(k), g2[k], exact_grads[k]) for k in g2]
        for key, ours, theirs, want in pairs:
            if ours is None:
                return float("inf"), f"{key}: no gradient with offload"
            scale = want.abs().max().item()
            ratio = (ours - want).abs().max().item() / ((theirs - want).abs().max().item() + floor * scale + 1e-30)
            if ratio > worst:
                worst, where = ratio, f"{key} (step {step})"
    return worst, where


def run_one(name: str, args: argparse.Namespace) -> dict:
    row: dict = {"model": name}
    start = time.time()
    model, batch = build(name, args)
    reference = copy.deepcopy(model)
    exact_model = copy.deepcopy(model).double()
    if hasattr(exact_model, "set_experts_implementation"):
        # grouped_mm has no float64 kernel on the GPU; the per-expert loop
        # computes the same function.
        exact_model.set_experts_implementation("eager")
    exact_batch = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    exact = steps(name, exact_model, exact_model, exact_batch, 1)[0]
    del exact_model
    torch._dynamo.reset()
    plain = steps(name, reference, torch.compile(reference, backend="inductor"), batch, args.steps)
    torch._dynamo.reset()
    row["marked"] = len(offload_pass.offload_modules(model, "**"))
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    offload_pass.runtime.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = steps(name, model, torch.compile(model, backend=backend), batch, args.steps)
    copies = offload_pass.runtime.stats()
    torch._dynamo.reset()
    offloaded = [e for p in backend.plans for e in p.entries if e.decision == Decision.OFFLOAD]
    row["graphs"] = len(backend.plans)
    row["offloaded"] = len(offloaded)
    row["offloaded_mib"] = round(sum(e.nbytes for e in offloaded) / 2**20, 3)
    row["copies"], row["temporaries"] = copies["offload_calls"], copies["temporary_sources"]
    row["worst_ratio"], row["worst_at"] = worst_ratio(got, plain, exact, args.floor)
    row["passed"] = row["worst_ratio"] <= args.factor
    row["seconds"] = round(time.time() - start, 1)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default=",".join(HF_MODELS + ("convnet", "resnet18")))
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--channels-last", action="store_true", help="image models and their input channels last")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--factor", type=float, default=4.0)
    p.add_argument("--floor", type=float, default=1e-6)
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    for name in args.models.split(","):
        try:
            row = run_one(name, args)
        except Exception as error:  # reported per model: one failure must not hide the others
            traceback.print_exc()
            row = {"model": name, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
                   "passed": False}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                       "torch": torch.__version__, "args": vars(args), "rows": rows}, f, indent=1)
    width = max(12, *(len(r["model"]) for r in rows))
    print(f"\n{'model':<{width}} {'graphs':>6} {'marked':>6} {'offloaded':>9} {'MiB':>8} {'copies':>6} "
          f"{'temporaries':>11} {'worst ours/plain':>16}  result")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<{width}} ERROR {r['error']}")
            continue
        print(f"{r['model']:<{width}} {r['graphs']:>6} {r['marked']:>6} {r['offloaded']:>9} {r['offloaded_mib']:>8.2f} "
              f"{r['copies']:>6} {r['temporaries']:>11} {r['worst_ratio']:>16.3f}  "
              f"{'pass' if r['passed'] else 'FAIL at ' + r['worst_at']}")


if __name__ == "__main__":
    main()
