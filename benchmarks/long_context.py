"""Long-context training throughput on one GPU: a Llama-3-8B-shaped model
(hidden 4096, 32 layers, 32 query / 8 KV heads, FFN 14336, vocab 128256,
bf16; Hugging Face ``LlamaForCausalLM`` from a ``LlamaConfig``, random
weights, SDPA attention, no KV cache) trained step by step: forward,
backward, AdamW step. The base weights are frozen; a rank-16 adapter pair
(``LoRALinear``, written here) on every q_proj and v_proj is all that
trains, the same in every variant.

The loss is a chunked cross-entropy over the final hidden states: the
logits of ``LOSS_CHUNK`` tokens at a time, each chunk inside
``torch.utils.checkpoint`` (recomputed in backward), so the 128256-wide
logits never exist for every token at once.

Variants (``--variant``):
  inductor          torch.compile(model)
  hf_ckpt           HF gradient checkpointing (non-reentrant) + torch.compile
  hf_ckpt_offload   the same, the checkpoints' inputs in pinned host memory:
                    HF's ``offload=True`` where the installed transformers has
                    it, else save_on_cpu around each checkpointed decoder layer
  pt_budget_X       torch.compile under activation_memory_budget=X (0.5, 0.3, 0.1)
  pt_offload        PyTorch's enable_activation_offloading, every layer's
                    self_attn and mlp marked should_offload (as bench_offload's
                    builtin variant); "not in this torch" where it is absent
  ours_marked       offload_pass, every layer's self_attn and mlp marked
  ours_budget       offload_pass mode="budget", memory_budget = the device's
                    free bytes after the model and optimizer state, less 2 GiB
  ours_auto         offload_pass mode="auto", max_overhead=0.02

Each row: tokens/s (median over the steps after ``--warmup``), every step
time, the peak device memory over the measured steps, pinned host memory
(torch's host allocator; for ours also the plans' host pool), compile +
first-step time, the graphs Dynamo compiled, OOM, and for ours each plan's
predicted step and peak beside the measured ones. Ours run with
``host_memory_limit`` at ``--host-limit`` of the host memory available (a
plan past it keeps tensors on the device rather than the host's OOM killer
ending the row). Paired control, as bench_offload.py's
``--paired`` (one reference timed before and after every block of the
variant): a fixed workload, the 2-layer cut of the same shape at
``--control-seq`` compiled with plain Inductor, runs before and after each
of ``--blocks`` blocks of the measured steps, in the row's own process; the
row's ``paired_ratio`` is each block's median over its two control blocks'
mean, and ``--all`` adds ``tokens_per_s_paired``, the tokens/s scaled by
this row's control against the median control of every row (the device's
drift between rows divided out). Plain Inductor itself cannot be the
control: at long sequences it does not fit.

  python benchmarks/long_context.py --all --out OUT/long_context.json        # one process per row
  python benchmarks/long_context.py --variant ours_marked --seq 16384 --out row.json
  python benchmarks/long_context.py --grad-check                             # 2 layers, seq 1024, fp32
  python benchmarks/long_context.py --grad-check --grad-variants ours_attn --grad-reference ours_attn  # ours against ours
  python benchmarks/long_context.py --plot OUT/long_context.json OUT/long_context.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable, Optional

import torch
import torch.nn.functional as F

LLAMA3_8B = dict(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256)
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=256)
VARIANTS = (
    "inductor", "hf_ckpt", "hf_ckpt_offload", "pt_budget_0.5", "pt_budget_0.3", "pt_budget_0.1",
    "pt_offload", "ours_marked", "ours_budget", "ours_auto",
)
DEFAULT_SEQS = (8192, 16384, 32768, 65536)
LOSS_CHUNK = 4096
LORA_RANK = 16
GIB = 1 << 30
LOSS_NOTE = (
    f"chunked cross-entropy: logits of {LOSS_CHUNK} tokens at a time, each chunk in torch.utils.checkpoint "
    "(the full logits never exist)"
)


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable rank-``rank`` pair: ``base(x) + b(a(x))``.
    ``b`` starts small and non-zero, so both adapters get gradients from the first step."""

    def __init__(self, base: torch.nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base
        factory = dict(device=base.weight.device, dtype=base.weight.dtype)
        self.a = torch.nn.Linear(base.in_features, rank, bias=False, **factory)
        self.b = torch.nn.Linear(rank, base.out_features, bias=False, **factory)
        torch.nn.init.normal_(self.b.weight, std=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(x))


def _chunk_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = (hidden @ weight.t()).float()
    return F.cross_entropy(logits, labels, reduction="sum")


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` against ``labels``, ``chunk``
    tokens at a time, each chunk checkpointed (its logits recomputed in backward)."""
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk):
        part = slice(start, start + chunk)
        total = total + torch.utils.checkpoint.checkpoint(
            _chunk_loss, hidden[part], weight, labels[part], use_reentrant=False
        )
    return total / labels.numel()


def build_model(shape: dict, seq: int, dtype: torch.dtype, device: str, chunk: int) -> torch.nn.Module:
    """The Llama-shaped causal LM (random weights, frozen) with adapters on
    q_proj and v_proj; its forward(input_ids, labels) returns the chunked loss.
    Built on ``device`` in ``dtype`` directly (8B parameters never pass the host)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    class ChunkedLossLlama(LlamaForCausalLM):
        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            hidden = self.model(input_ids=input_ids, use_cache=False).last_hidden_state
            return chunked_cross_entropy(hidden, self.lm_head.weight, labels, self.loss_chunk)

    config = LlamaConfig(
        hidden_size=shape["hidden"], num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"], intermediate_size=shape["ffn"], vocab_size=shape["vocab"],
        max_position_embeddings=seq, rope_theta=500000.0, attention_dropout=0.0, use_cache=False,
        attn_implementation="sdpa",
    )
    _causal_by_sdpa()
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = ChunkedLossLlama(config)
    finally:
        torch.set_default_dtype(default)
    model.loss_chunk = chunk
    model.requires_grad_(False)
    for layer in model.model.layers:
        layer.self_attn.q_proj = LoRALinear(layer.self_attn.q_proj, LORA_RANK)
        layer.self_attn.v_proj = LoRALinear(layer.self_attn.v_proj, LORA_RANK)
    return model.train()


def _causal_by_sdpa() -> None:
    """Llama's causal mask left to SDPA's ``is_causal`` (its flash kernel), as
    transformers does eagerly for a batch without padding. Under
    torch.compile transformers builds the mask as a tensor instead (S x S:
    4 GiB at 64k tokens, kept for backward) and SDPA cannot use its flash
    kernel with one; every variant runs with this."""
    from transformers.models.llama import modeling_llama

    modeling_llama.create_causal_mask = lambda *args, **kwargs: None


def adapters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def batch(vocab: int, seq: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence of random ids and its next-token labels (wrapped at the end)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (1, seq), generator=g)
    return ids.to(device), torch.roll(ids, -1, dims=1).to(device)


class _SaveOnCpuLayer(torch.nn.Module):
    """A decoder layer checkpointed with its saved inputs in pinned host memory
    (for a transformers without ``gradient_checkpointing_enable(offload=...)``)."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, *args, **kwargs):
        with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
            return torch.utils.checkpoint.checkpoint(self.layer, *args, use_reentrant=False, **kwargs)


def _hf_offload_supported() -> bool:
    import inspect

    from transformers import PreTrainedModel

    return "offload" in inspect.signature(PreTrainedModel.gradient_checkpointing_enable).parameters


def _pt_offload_patches(layers: int) -> tuple[dict, dict, dict]:
    """(functorch patches, inductor patches, row notes) for PyTorch's own offload:
    every layer's self_attn and mlp marked, its copy stream and prefetch where this torch has them."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_offload import _BuiltinMarks

    config = torch._functorch.config
    patches = {"enable_activation_offloading": True}
    for name in ("activation_offload_separate_stream", "activation_reload_prefetch"):
        if hasattr(config, name):
            patches[name] = True
    marks = _BuiltinMarks([f"model.layers.{i}.{m}" for i in range(layers) for m in ("self_attn", "mlp")])
    return patches, {"joint_custom_pre_pass": marks}, {"pt_offload_config": patches}


def host_limit_bytes(fraction: float) -> Optional[int]:
    """``fraction`` of the host memory available now (/proc/meminfo), or None
    (a fraction of 0, or no /proc: the package's default, half of the
    available memory): ours' host_memory_limit, so a plan that would pin
    more than the host has keeps tensors on the device instead."""
    if not fraction:
        return None
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None
    return int(available * fraction)


def _ours_backend(variant: str, args, budget_bytes: Optional[int]):
    import offload_pass

    # Tiny shapes: every tensor is under the default min_bytes (1 MiB); let them move.
    small = {"min_bytes": 0} if args.tiny else {}
    if args.host_limit_bytes is not None:
        small["host_memory_limit"] = args.host_limit_bytes
    if variant == "ours_marked":
        return offload_pass.make_backend(**small)
    if variant == "ours_budget":
        return offload_pass.make_backend(mode="budget", memory_budget=budget_bytes, **small)
    return offload_pass.make_backend(mode="auto", max_overhead=0.02, **small)


def setup_variant(variant: str, model: torch.nn.Module, args, budget_bytes: Optional[int]) -> dict:
    """Prepare ``model`` for ``variant``: marks, checkpointing. Returns
    {"compiled", "backend", "functorch", "inductor", "notes"}; raises
    NotImplementedError where this torch lacks the variant."""
    import offload_pass

    out = {"backend": None, "functorch": {}, "inductor": {}, "notes": {}}
    compile_backend: object = "inductor"
    if variant in ("hf_ckpt", "hf_ckpt_offload"):
        kwargs = {"gradient_checkpointing_kwargs": {"use_reentrant": False}}
        # transformers pins its host copies with no accelerator too, which fails on a CPU: the wrapper there.
        if variant == "hf_ckpt_offload" and _hf_offload_supported() and args.device == "cuda":
            model.gradient_checkpointing_enable(offload=True, **kwargs)
            out["notes"]["offload_by"] = "transformers gradient_checkpointing_enable(offload=True)"
        elif variant == "hf_ckpt_offload":
            model.model.layers = torch.nn.ModuleList(_SaveOnCpuLayer(layer) for layer in model.model.layers)
            out["notes"]["offload_by"] = (
                f"save_on_cpu(pin_memory={torch.cuda.is_available()}) around each checkpointed decoder layer"
            )
        else:
            model.gradient_checkpointing_enable(**kwargs)
        if hasattr(model, "disable_input_require_grads"):
            # gradient_checkpointing_enable makes the embeddings' output require grad (for reentrant
            # checkpoints, which these are not) by a hook Dynamo breaks the graph on: removed.
            model.disable_input_require_grads()
    elif variant.startswith("pt_budget_"):
        out["functorch"] = {"activation_memory_budget": float(variant[len("pt_budget_"):])}
    elif variant == "pt_offload":
        if not hasattr(torch._functorch.config, "enable_activation_offloading"):
            raise NotImplementedError("not in this torch")
        out["functorch"], out["inductor"], out["notes"] = _pt_offload_patches(len(model.model.layers))
    elif variant.startswith("ours_"):
        from offload_pass.planning.cost_model import device_profile

        # Measured before the compile (as bench_offload.py): a graph with nothing to copy would leave it unmeasured.
        device_profile(torch.device(args.device))
        if variant == "ours_marked":
            offload_pass.offload_modules(model, "model.layers.*.self_attn", "model.layers.*.mlp")
        compile_backend = out["backend"] = _ours_backend(variant, args, budget_bytes)
    elif variant != "inductor":
        raise SystemExit(f"unknown --variant {variant!r}; valid: {', '.join(VARIANTS)}")
    if "offload_by" in out["notes"]:
        print(f"hf_ckpt_offload: {out['notes']['offload_by']}", file=sys.stderr, flush=True)
    out["compiled"] = torch.compile(model, backend=compile_backend)
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def make_step(compiled, optimizer, ids, labels, device: str) -> Callable[[], float]:
    """A synchronized training step (forward, backward, AdamW); returns its seconds."""

    def step() -> float:
        start = time.perf_counter()
        loss = compiled(ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        return time.perf_counter() - start

    return step


def make_control(args, shape: dict, dtype: torch.dtype) -> Optional[Callable[[], float]]:
    """The paired control's step: the 2-layer cut of the shape at --control-seq, plain Inductor."""
    if not args.control_seq:
        return None
    torch.manual_seed(0)
    model = build_model(shape | {"layers": 2}, args.control_seq, dtype, args.device, args.chunk)
    compiled = torch.compile(model, backend=_plain_inductor())
    optimizer = torch.optim.AdamW(adapters(model).values(), lr=1e-4)
    return make_step(compiled, optimizer, *batch(shape["vocab"], args.control_seq, args.device), args.device)


def _plain_inductor() -> Callable:
    """Plain Inductor as a backend of its own: Dynamo takes two "inductor"
    strings for one backend (bench_offload.py's ``_own_inductor``)."""
    from torch._inductor.compile_fx import compile_fx

    return lambda gm, example_inputs: compile_fx(gm, example_inputs)


def budget_bytes_now(args) -> Optional[int]:
    """ours_budget's memory_budget: free device bytes now (model, adapters and
    their AdamW state resident), less 2 GiB; on a CPU, a fraction (0.5)."""
    if args.device != "cuda":
        return None
    torch.cuda.empty_cache()  # the control's cached blocks are free to the variant too
    free, _ = torch.cuda.mem_get_info()
    return int(free - 2 * GIB)


def plan_figures(backend) -> dict:
    """Ours: the plans of the last step, predicted against measured (as bench_offload.py reads them)."""
    report = backend.last_step()
    if report is None:
        return {}
    graphs = report.graphs
    out = {
        "graphs_in_step": len(graphs),
        "plans": len(backend.plans),
        "offloaded_bytes": report.offloaded_bytes,
        "host_pool_bytes": sum(p.host_pool[0] * calls for p, calls in graphs if p.host_pool),
        "recompute_level": [  # a block cut (planning.blocks.BlockCut) as it reads
            p.recompute_level if p.recompute_level is None or isinstance(p.recompute_level, float)
            else format(p.recompute_level) for p, _ in graphs
        ],
        "replan_reasons": [str(r.replan_reason) for r in backend.records if r.replan_reason],
    }
    ran = [(p, calls) for p, calls in graphs if p.prediction is not None]
    if ran and len(ran) == len(graphs):
        out["predicted_step_ms"] = {
            "without": sum(p.baseline.step_ms * c for p, c in ran), "with": sum(p.prediction.step_ms * c for p, c in ran)
        }
        # The peak is the highest graph's own, above the resident weights (planning.timeline).
        out["predicted_peak_bytes"] = {
            "without": max(p.baseline.peak for p, _ in ran), "with": max(p.prediction.peak for p, _ in ran)
        }
    return out


def _error_row(row: dict, error: BaseException) -> dict:
    # The first and the last line: a compiler's wrapper says where, its cause what.
    lines = [line for line in str(error).splitlines() if line.strip() and not line.startswith("Set TORCHDYNAMO")]
    text = f"{type(error).__name__}: " + " ... ".join(dict.fromkeys([lines[0][:200], lines[-1][:200]]) if lines else [])
    oom = isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()
    return row | {"oom": oom, "error": text}


def timed_blocks(step: Callable[[], float], control, backend, args) -> tuple[list[float], dict]:
    """The measured steps in --blocks blocks, the control before and after each
    (none without a control: one block); the peak read over the variant's
    blocks only. Returns (step seconds, row fields)."""
    measured = args.steps - args.warmup
    blocks = max(1, min(args.blocks if control else 1, measured))
    sizes = [measured // blocks + (i < measured % blocks) for i in range(blocks)]
    times: list[float] = []
    controls: list[float] = []
    peak, plain = 0, []
    if control:
        controls.append(statistics.median(control() for _ in range(args.control_steps)))
    for size in sizes:
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for _ in range(size):
            times.append(step())
            # mode="auto" runs plain Inductor's graph by turns beside its plan's (feedback.schedule).
            plain.append(bool(backend is not None and backend.last_step().plain_inductor))
        if args.device == "cuda":
            peak = max(peak, torch.cuda.max_memory_allocated())
        if control:
            controls.append(statistics.median(control() for _ in range(args.control_steps)))
    fields: dict = {"peak_bytes": peak if args.device == "cuda" else None, "plain_inductor_steps": sum(plain)}
    if any(plain) and not all(plain):  # the steps that ran the plans alone
        fields["tokens_per_s_plan_only"] = args.seq[0] / statistics.median(t for t, p in zip(times, plain) if not p)
    if control:
        medians = [statistics.median(times[sum(sizes[:i]) : sum(sizes[: i + 1])]) for i in range(len(sizes))]
        fields["control_step_s"] = controls
        fields["paired_ratio"] = [m / ((a + b) / 2) for m, a, b in zip(medians, controls, controls[1:])]
    return times, fields


def _pinned_reset(device: str) -> None:
    if device == "cuda" and hasattr(torch.cuda, "reset_peak_host_memory_stats"):
        torch.cuda.reset_peak_host_memory_stats()


def _pinned_peak(device: str) -> Optional[int]:
    """Peak pinned host bytes in use (torch's caching host allocator), since the last reset."""
    if device != "cuda" or not hasattr(torch.cuda, "host_memory_stats"):
        return None
    return torch.cuda.host_memory_stats().get("active_bytes.peak")


def measure(args, shape: dict, seq: int, dtype: torch.dtype) -> dict:
    """Build, compile, warm up and time one (variant, seq): the row's figures."""
    torch.manual_seed(0)
    model = build_model(shape, seq, dtype, args.device, args.chunk)
    control = make_control(args, shape, dtype)
    if control:  # compiled and warm before any variant's config patch is on
        control(), control()
    trained = adapters(model)
    optimizer = torch.optim.AdamW(trained.values(), lr=1e-4)
    # AdamW's state (two moments per adapter) is created at its first step: counted here.
    state_bytes = 2 * sum(p.numel() * p.element_size() for p in trained.values())
    budget = budget_bytes_now(args)
    budget = None if budget is None else budget - state_bytes
    graphs_before = _dynamo_graphs()
    setup = setup_variant(args.variant, model, args, budget if budget is not None else 0.5)
    ids, labels = batch(shape["vocab"], seq, args.device)
    step = make_step(setup["compiled"], optimizer, ids, labels, args.device)
    row: dict = {"memory_budget_bytes": budget if args.variant == "ours_budget" else None, **setup["notes"]}
    if args.variant.startswith("ours_"):
        row["host_memory_limit_bytes"] = args.host_limit_bytes
    with torch._functorch.config.patch(**setup["functorch"]), torch._inductor.config.patch(**setup["inductor"]):
        row["compile_and_first_step_s"] = step()
        warm = [step() for _ in range(args.warmup - 1)]
        # Graphs Dynamo compiled for the variant (1 where nothing broke the step: save_on_cpu does, per layer).
        row["dynamo_graphs"] = _dynamo_graphs() - graphs_before
        row["resident_bytes"] = torch.cuda.memory_allocated() if args.device == "cuda" else None
        _pinned_reset(args.device)
        times, fields = timed_blocks(step, control, setup["backend"], args)
    row |= fields
    median = statistics.median(times)
    row |= {
        "warmup_step_s": warm, "step_s": times, "median_step_s": median, "tokens_per_s": seq / median,
        "pinned_host_peak_bytes": _pinned_peak(args.device),
    }
    if row.get("paired_ratio"):
        row["paired_step_over_control"] = statistics.median(row["paired_ratio"])
    if setup["backend"] is not None:
        row |= plan_figures(setup["backend"])
        if "predicted_peak_bytes" in row and row["peak_bytes"] is not None:
            row["measured_peak_above_resident_bytes"] = row["peak_bytes"] - row["resident_bytes"]
    return row


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _header(args, shape: dict) -> dict:
    import transformers

    return {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "dtype": str(args.dtype), "shape": shape, "loss": LOSS_NOTE.replace(str(LOSS_CHUNK), str(args.chunk)),
        "lora_rank": LORA_RANK, "warmup_steps": args.warmup, "measured_steps": args.steps - args.warmup,
    }


def run_row(args) -> dict:
    """One (variant, seq) row; an OOM or another failure is the row's, not the process's."""
    shape = _shape(args)
    seq = args.seq[0]
    row = {"variant": args.variant, "seq": seq, "layers": shape["layers"], "tokens_per_s": None, "oom": False,
           "error": None} | _header(args, shape)
    try:
        row |= measure(args, shape, seq, args.dtype)
    except NotImplementedError as error:
        row["error"] = str(error)
    except Exception as error:  # torch.OutOfMemoryError among them: the row records it
        traceback.print_exc(file=sys.stderr)
        row = _error_row(row, error)
    return row


def _shape(args) -> dict:
    if args.tiny:
        return dict(TINY)
    return LLAMA3_8B | {"layers": args.layers}


# The grad check's marked variants: marks and config. Beside ours_marked, the
# pieces a difference is traced to (--grad-variants): attention or MLP alone,
# and every mark planned but the rewrite off (the partition, no copies).
_MARKED = ("model.layers.*.self_attn", "model.layers.*.mlp")
_GRAD_MARKS = {
    "ours_marked": (_MARKED, {}),
    "ours_attn": (_MARKED[:1], {}),
    "ours_mlp": (_MARKED[1:], {}),
    "ours_no_rewrite": (_MARKED, {"disabled_passes": ("offload",)}),
}
GRAD_VARIANTS = ("ours_marked", "ours_budget", *list(_GRAD_MARKS)[1:])


def _grad_run(variant: str, shape: dict, seq: int, args) -> tuple[list, Optional[int]]:
    """Loss and adapter gradients of --grad-steps steps (AdamW between them) of
    one variant, fp32, from the same weights and batch: [(loss, {name: grad})], bytes offloaded."""
    import offload_pass

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(shape, seq, torch.float32, args.device, args.chunk)
    backend: object = _plain_inductor()
    if variant in _GRAD_MARKS:
        # Every marked saved tensor moves, however small (as arch_sweep.py): the copies are what is checked.
        marks, extra = _GRAD_MARKS[variant]
        offload_pass.offload_modules(model, *marks)
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, **extra)
    elif variant == "ours_budget":
        backend = offload_pass.make_backend(mode="budget", memory_budget=0.5, min_bytes=0)
    compiled = torch.compile(model, backend=backend)
    trained = adapters(model)
    optimizer = torch.optim.AdamW(trained.values(), lr=1e-4)
    ids, labels = batch(shape["vocab"], seq, args.device)
    out = []
    for _ in range(args.grad_steps):
        loss = compiled(ids, labels)
        loss.backward()
        out.append((loss.detach().clone(), {k: p.grad.detach().clone() for k, p in trained.items()}))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    offloaded = backend.last_step().offloaded_bytes if hasattr(backend, "last_step") else None
    return out, offloaded


def _compare(got: list, want: list) -> dict:
    """torch.equal over every step's loss and adapter gradients; the largest absolute difference where not equal."""
    differing, compared, largest = 0, 0, 0.0
    for (l1, g1), (l2, g2) in zip(got, want):
        for ours, theirs in [(l1, l2)] + [(g1.get(k), g2[k]) for k in g2]:
            compared += 1
            if ours is None:
                differing, largest = differing + 1, float("inf")
            elif not torch.equal(ours, theirs):
                differing, largest = differing + 1, max(largest, (ours - theirs).abs().max().item())
    return {"equal": differing == 0, "differing": differing, "compared": compared, "max_abs_diff": largest}


def grad_check(args) -> dict:
    """The ``--grad-variants`` (default ours_marked and ours_budget at
    memory_budget=0.5) against ``--grad-reference`` (default plain
    Inductor; a variant: ours against ours): loss and adapter gradients bit
    for bit, fp32, deterministic algorithms."""
    # cuBLAS is deterministic only with a fixed workspace, set before its first handle (strict mode raises without).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    shape = _shape(args) if args.tiny else LLAMA3_8B | {"layers": 2}
    seq = args.seq[0] if args.seq_given else (64 if args.tiny else 1024)
    header = {k: v for k, v in _header(args, shape).items() if k not in ("warmup_steps", "measured_steps")}
    verdict = {"grad_check": True, "seq": seq, "steps": args.grad_steps} | header | {"dtype": "float32"}
    verdict["variants"] = {}
    reference = args.grad_reference
    if reference != "inductor" and reference not in GRAD_VARIANTS:
        raise SystemExit(f"--grad-reference {reference}: valid are inductor, {', '.join(GRAD_VARIANTS)}")
    itself = f"{reference}_vs_itself"
    verdict["reference"] = reference
    with _deterministic():
        want, _ = _grad_run(reference, shape, seq, args)
        # On a GPU, the reference against itself too: where it differs, its kernels are not deterministic here.
        chosen = tuple(v for v in args.grad_variants.split(",") if v)
        unknown = [v for v in chosen if v not in GRAD_VARIANTS]
        if unknown:
            raise SystemExit(f"--grad-variants: no variant {', '.join(unknown)}; valid: {', '.join(GRAD_VARIANTS)}")
        for variant in chosen + ((None,) if args.device == "cuda" else ()):
            key = itself if variant is None else variant
            try:
                got, offloaded = _grad_run(reference if variant is None else variant, shape, seq, args)
                verdict["variants"][key] = _compare(got, want) | {"offloaded_bytes": offloaded}
            except Exception as error:  # the verdict names it
                traceback.print_exc(file=sys.stderr)
                verdict["variants"][key] = {"equal": False, "error": f"{type(error).__name__}: {error}"[:300]}
    verdict["equal"] = all(v["equal"] for k, v in verdict["variants"].items() if k != itself)
    return verdict


@contextlib.contextmanager
def _deterministic():
    """PyTorch's deterministic algorithms, strict (an op without a deterministic
    kernel raises, naming itself), and Inductor's deterministic mode (no kernel
    chosen by timing), restored after. Strict, not warn-only: under warn-only,
    CUDA's memory-efficient attention backward keeps splitting the keys and
    summing their partial gradients in whatever order its blocks finish, which
    other streams' work (the reloads) changes."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=False)
    config = torch._inductor.config
    try:
        with config.patch({"deterministic": True} if hasattr(config, "deterministic") else {}):
            yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _child(args, variant: str, seq: int, log_dir: str) -> dict:
    """One row in a process of its own (an OOM, a crash or a hang ends that row only)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.abspath(__file__), "--variant", variant, "--seq", str(seq), "--out", path,
           "--layers", str(args.layers), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--blocks", str(args.blocks), "--control-seq", str(args.control_seq),
           "--control-steps", str(args.control_steps), "--chunk", str(args.chunk),
           "--host-limit", str(args.host_limit)] + (["--tiny"] if args.tiny else [])
    began = time.perf_counter()
    try:
        done = subprocess.run(cmd, timeout=args.row_timeout, capture_output=True, text=True)
        log, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as error:
        log, rc = f"{error.stdout or ''}{error.stderr or ''}", None
    if isinstance(log, bytes):
        log = log.decode(errors="replace")
    with open(os.path.join(log_dir, f"{variant}_{seq}.log"), "w") as f:
        f.write(log)
    row = {"variant": variant, "seq": seq, "layers": args.layers, "tokens_per_s": None}
    try:
        with open(path) as f:
            row = json.load(f)[0]
    except (OSError, ValueError, IndexError):
        reason = f"timed out after {args.row_timeout} s" if rc is None else f"exit status {rc}: {log[-300:]}"
        if rc is not None and rc < 0:  # a signal: SIGKILL is the kernel's OOM killer where the host ran out
            reason = f"killed by signal {-rc} (SIGKILL: host memory?): {log[-300:]}"
        row |= {"oom": "out of memory" in log.lower(), "error": reason}
    os.unlink(path)
    row["process_s"] = time.perf_counter() - began
    return row


def add_paired(rows: list[dict]) -> None:
    """tokens_per_s_paired: each row's tokens/s times its control's step over the median control of every row."""
    controls = [statistics.mean(r["control_step_s"]) for r in rows if r.get("control_step_s")]
    if not controls:
        return
    reference = statistics.median(controls)
    for r in rows:
        if r.get("control_step_s") and r.get("tokens_per_s"):
            r["tokens_per_s_paired"] = r["tokens_per_s"] * statistics.mean(r["control_step_s"]) / reference


def run_all(args) -> list[dict]:
    """Every (variant, seq) row, one process each; past the listed lengths, doubling
    while some variant still ran (to --max-seq); a variant that ran out of memory
    at a length is not run longer (its rows say so)."""
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown --variants {unknown}; valid: {', '.join(VARIANTS)}")
    log_dir = os.path.splitext(args.out)[0] + "_logs"
    os.makedirs(log_dir, exist_ok=True)
    seqs, rows, oom_at = list(args.seq), [], {}
    if args.resume and os.path.exists(args.out):
        with open(args.out) as f:
            rows = json.load(f)
        for r in sorted(rows, key=lambda r: -r["seq"]):
            if r.get("oom"):
                oom_at[r["variant"]] = r["seq"]
    for seq in seqs:  # grows while it runs
        for variant in variants:
            if any(r["variant"] == variant and r["seq"] == seq for r in rows):
                continue  # --resume: already there
            if variant in oom_at and oom_at[variant] < seq:
                rows.append({"variant": variant, "seq": seq, "layers": args.layers, "tokens_per_s": None, "oom": True,
                             "error": f"not run: out of memory at seq {oom_at[variant]}"})
                continue
            rows.append(_child(args, variant, seq, log_dir))
            if rows[-1].get("oom"):
                oom_at[variant] = seq
            r = rows[-1]
            print(f"{variant} seq {seq}: " + (f"{r['tokens_per_s']:.0f} tokens/s" if r.get("tokens_per_s")
                  else f"{'OOM' if r.get('oom') else 'failed'}: {r.get('error')}"), file=sys.stderr, flush=True)
            _write(args.out, rows)
        ran = any(r["seq"] == seq and r.get("tokens_per_s") for r in rows)
        if seq == seqs[-1] and args.extend and ran and 2 * seq <= args.max_seq:
            seqs.append(2 * seq)
    add_paired(rows)
    _write(args.out, rows)
    return rows


def _write(path: Optional[str], rows: list[dict]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def plot(results: str, out: str) -> None:
    """Tokens/s against sequence length, one line per variant; OOM rows an x on the axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(results) as f:
        rows = json.load(f)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        ran = sorted((r["seq"], r["tokens_per_s"]) for r in mine if r.get("tokens_per_s"))
        (line,) = ax.plot([s for s, _ in ran], [t for _, t in ran], marker="o", label=variant)
        ooms = sorted(r["seq"] for r in mine if r.get("oom"))
        ax.scatter(ooms, [0] * len(ooms), marker="x", s=60, color=line.get_color(), clip_on=False, zorder=3)
    ax.set_xscale("log", base=2)
    seqs = sorted({r["seq"] for r in rows})
    ax.set_xticks(seqs, [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqs])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("sequence length (tokens, batch 1)")
    ax.set_ylabel("tokens/s (median step)")
    first = next((r for r in rows if r.get("shape")), rows[0] if rows else {})
    hidden = first.get("shape", {}).get("hidden", "?")
    ax.set_title(f"Llama-3-8B-shaped, {first.get('layers', '?')} layers x hidden {hidden}, rank-{LORA_RANK} q/v "
                 f"adapters, {first.get('device_name', '')} (x: out of memory)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=130)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="inductor", choices=VARIANTS)
    p.add_argument("--variants", default=",".join(VARIANTS), help="--all: comma-separated")
    p.add_argument("--seq", type=int, nargs="+", default=None, help=f"default {' '.join(map(str, DEFAULT_SEQS))}")
    p.add_argument("--layers", type=int, default=LLAMA3_8B["layers"], help="2: the gradient-check cut")
    p.add_argument("--steps", type=int, default=12, help="steps per row, the --warmup first")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--blocks", type=int, default=2, help="measured steps in this many blocks, the control around each")
    p.add_argument("--control-seq", type=int, default=None, help="paired control's length (0: none; default 4096, tiny 0)")
    p.add_argument("--control-steps", type=int, default=3, help="steps per control block")
    p.add_argument("--chunk", type=int, default=None, help=f"loss chunk in tokens (default {LOSS_CHUNK}, tiny 32)")
    p.add_argument("--all", action="store_true", help="every (variant, seq), one process each")
    p.add_argument("--extend", action=argparse.BooleanOptionalAction, default=True,
                   help="--all: double the length past the list while a variant still runs")
    p.add_argument("--max-seq", type=int, default=262144)
    p.add_argument("--row-timeout", type=int, default=3600, help="--all: seconds per row")
    p.add_argument("--resume", action="store_true", help="--all: keep the rows --out holds, run the others")
    p.add_argument("--host-limit", type=float, default=0.8,
                   help="ours: host_memory_limit, this fraction of the host memory available at the row's start "
                        "(0: the package's default, half of it)")
    p.add_argument("--grad-check", action="store_true")
    p.add_argument("--grad-steps", type=int, default=2)
    p.add_argument("--grad-variants", default="ours_marked,ours_budget",
                   help=f"--grad-check: comma-separated, of {', '.join(GRAD_VARIANTS)}")
    p.add_argument("--grad-reference", default="inductor",
                   help="--grad-check: what the variants are compared with: inductor (plain Inductor) or a variant")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, vocab 256, seq 64, fp32, CPU")
    p.add_argument("--plot", nargs=2, metavar=("RESULTS.json", "OUT.png"))
    p.add_argument("--out", default=None, help="JSON: a list of rows")
    args = p.parse_args(argv)
    args.seq_given = args.seq is not None
    args.seq = args.seq or ([64] if args.tiny else list(DEFAULT_SEQS))
    args.device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    args.dtype = torch.float32 if args.tiny or args.grad_check else torch.bfloat16
    args.chunk = args.chunk or (32 if args.tiny else LOSS_CHUNK)
    if args.control_seq is None:
        args.control_seq = 0 if args.tiny else 4096
    if args.tiny:
        args.layers = TINY["layers"]
    args.host_limit_bytes = host_limit_bytes(args.host_limit)
    if args.warmup < 1 or args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}), which must be at least 1")
    if args.all and not args.out:
        p.error("--all needs --out PATH.json")
    if not (args.all or args.grad_check or args.plot) and len(args.seq) != 1:
        p.error(f"one --variant runs one --seq; got {args.seq} (--all runs a list)")
    return args


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    if args.plot:
        plot(*args.plot)
        return
    from offload_pass.compile_caches import graph_caches_off

    # Every row compiles cold, the same for each variant (no graph served from another's cache).
    graph_caches_off(tempfile.mkdtemp(prefix="long_context_kernels_"))
    if args.grad_check:
        verdict = grad_check(args)
        print(json.dumps(verdict, indent=1))
        if args.out:
            _write(args.out, [verdict])
        return
    if args.all:
        run_all(args)
        return
    row = run_row(args)
    print(json.dumps(row, indent=1, default=str))
    _write(args.out, [row])


if __name__ == "__main__":
    main()
