"""Side-by-side offload benchmark on one GPU: offload_pass against every peer.

Same model, same process, one variant after the other:
  inductor           torch.compile without offload (the reference)
  offload_pass       torch.compile(backend=make_backend(...)) with the marks below;
                     "offload_pass(knob=value;knob=value)" sets OffloadConfig knobs
  builtin(MODE)      PyTorch's own pass (torch._functorch.config.enable_activation_offloading),
                     the same modules' forward nodes marked "should_offload" by a
                     joint_custom_pre_pass; MODE: sync, stream (separate stream),
                     stream+sink (wait sinking), stream+prefetch (reload prefetch).
                     A mode that crashes is reported with its error.
  recompute(B)       PyTorch's recompute-only budget: plain Inductor with
                     torch._functorch.config.activation_memory_budget=B
  VARIANT{k=v;...}   any compiled variant with these Inductor options (torch.compile's
                     options=; plain Inductor's config patched): e.g.
                     "recompute(0.8){allow_buffer_reuse=false}"
  save_on_cpu        torch.autograd.graph.save_on_cpu(pin_memory=True) around the
                     compiled forward (every saved tensor goes to host);
                     save_on_cpu(eager): around the model run without compile

Per variant: step time (median of --steps after --warmup), peak allocated
memory over a step and over the forward, memory at the forward/backward
boundary, bytes offloaded (from the plan), and
  R = (measured peak reduction vs inductor) / (offloaded bytes)
every offloaded tensor being alive at the reference's forward/backward
boundary; R < 1 where the step's peak sits later in backward, next to the
reloads in flight and backward temporaries.
  R_boundary = (reduction at the forward/backward boundary) / (offloaded bytes)
checks that every offloaded byte really left the device by the end of forward.
Also the physical floor max(compute time, offloaded bytes / one-way
bandwidth), the bandwidth measured here with a pinned 1 GiB copy, and the
two-way floor max(forward, out / d2h) + max(backward, in / h2d): to lower the
peak by every offloaded byte, each byte must have left before the forward
ends and come back during the backward. With --profile, one step of each
offloading variant runs under torch.profiler: the copy time per direction,
the streams the copies ran on, and how much of it overlapped compute kernels.

  python benchmarks/bench_offload.py --layers 6 --hidden 2048 --seq 4096 --batch 2 --json out.json
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import gzip
import io
import json
import logging
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import traceback
from typing import Callable, Optional, Sequence

# --deadline counts from here: before torch's import, which takes seconds.
_STARTED = time.perf_counter()

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_load  # noqa: E402

import offload_pass
from offload_pass.examples.models import make_decoder, make_moe
from offload_pass.compile_caches import graph_caches_off
from offload_pass.feedback.schedule import first_plain_call
from offload_pass.planning.cost_model import device_profile


def measure_bandwidth(nbytes: int = 1 << 30) -> dict[str, float]:
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out = {}
    for name, (dst, src) in {"d2h": (host, dev), "h2d": (dev, host)}.items():
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        # Best of five: one slow copy (another process, a page fault) would
        # otherwise lower the floor the variants are judged against.
        best = 0.0
        for _ in range(5):
            start = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
        out[name] = best
    return out


def _layer_names(model: torch.nn.Module) -> tuple[str, str, str, str]:
    """(layer list path, attention, MLP, experts) module names of a model:
    ours (``layers.0.attn``) or a Hugging Face decoder
    (``model.layers.0.self_attn``, ``.mlp``, ``.mlp.experts``)."""
    if hasattr(model, "layers"):
        return "layers", "attn", "mlp", "experts"
    return "model.layers", "self_attn", "mlp", "mlp.experts"


def _image_stages(model: torch.nn.Module) -> list[str]:
    """A timm network's stages, in order (its ``feature_info`` less the stem)."""
    return [info["module"] for info in model.feature_info][1:]


def marked_modules(model: torch.nn.Module, what: str) -> tuple[list[str], object]:
    """(module names to mark, roles) for a --mark value."""
    if hasattr(model, "feature_info"):  # a timm image network
        if what == "none":
            return [], None
        if what == "all":
            return ["**"], None
        if what.startswith("stages:"):
            return _image_stages(model)[: int(what[len("stages:"):])], None
        raise SystemExit(f"unknown --mark {what!r} for a timm network; valid: none, all, stages:K (first K stages)")
    layers, attn, mlp, experts = _layer_names(model)
    n = len(model.get_submodule(layers))
    if what == "none":  # with mode=auto / budget: every eligible saved tensor is a candidate
        return [], None
    if what.startswith(("mlp:", "layers:")):  # the MLP / attention + MLP of the first K layers
        kind, k = what.split(":")
        parts = (mlp,) if kind == "mlp" else (attn, mlp)
        return [f"{layers}.{i}.{m}" for i in range(int(k)) for m in parts], None
    if what.startswith("roles="):
        roles = what[len("roles="):].split("+")
        return [f"{layers}.{i}.{experts}" for i in range(n)], None if roles == ["all"] else roles
    if what == "all":
        return [f"{layers}.{i}.{m}" for i in range(n) for m in (attn, mlp)], None
    if what == "attn-but-last":
        return [f"{layers}.{i}.{attn}" for i in range(n - 1)], None
    if what == "attn":
        return [f"{layers}.{i}.{attn}" for i in range(n)], None
    if what.startswith("attn:"):  # the attention of the first K layers
        return [f"{layers}.{i}.{attn}" for i in range(int(what[len("attn:"):]))], None
    raise SystemExit(
        f"unknown --mark {what!r}; valid: none, all, attn, attn-but-last, attn:K / mlp:K / "
        "layers:K (first K layers), roles=act+fc2, roles=all"
    )


def variant_mark(name: str, default: str) -> str:
    """"offload_pass[attn:3](...)" -> "attn:3": a marker set for this variant alone."""
    if "[" in name.split("(")[0]:
        return name[name.index("[") + 1 : name.index("]")]
    return default


def split_inductor_options(name: str) -> tuple[str, dict[str, object]]:
    """"recompute(0.8){allow_buffer_reuse=false}" -> ("recompute(0.8)", {"allow_buffer_reuse": False})."""
    if not name.endswith("}"):
        return name, {}
    start = name.rindex("{")
    return name[:start], _key_values(name[start + 1 : -1])


def parse_overrides(name: str) -> dict[str, object]:
    """"offload_pass(prefetch=1;schedule=fixed)" -> {"prefetch": 1, "schedule": "fixed"}."""
    if "(" not in name:
        return {}
    return _key_values(name[name.index("(") + 1 : name.rindex(")")])


def _key_values(inner: str) -> dict[str, object]:
    """"a=1;b=false;c=x" -> {"a": 1, "b": False, "c": "x"}."""
    out: dict[str, object] = {}
    for key, value in (kv.split("=") for kv in inner.split(";") if kv):
        if key == "disabled_passes":  # "calibrate+recompute" -> ("calibrate", "recompute")
            out[key] = tuple(value.split("+"))
        elif value in ("true", "false"):
            out[key] = value == "true"
        else:
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


class _BuiltinMarks:
    """joint_custom_pre_pass for PyTorch's pass: marks the forward nodes of the
    chosen modules ``should_offload`` (its pass then keeps what it can offload)."""

    def __init__(self, prefixes: list[str]) -> None:
        self.prefixes = tuple(prefixes)

    def __call__(self, graph: torch.fx.Graph) -> None:
        from offload_pass.marking.naming import module_name

        for node in graph.nodes:
            path = module_name(node)
            if any(path == p or path.startswith(p + ".") for p in self.prefixes):
                node.meta["should_offload"] = True

    def uuid(self) -> str:  # for caches that ask; the benchmark turns caches off
        return repr(self.prefixes)


BUILTIN_MODES = {
    "sync": {},
    "stream": {"activation_offload_separate_stream": True},
    "stream+sink": {"activation_offload_separate_stream": True, "activation_offload_sink_wait": True},
    "stream+prefetch": {"activation_offload_separate_stream": True, "activation_reload_prefetch": True},
}


def _intervals_overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the union of ``a`` intersected with the union of ``b``."""

    def union(iv):
        out = []
        for s, e in sorted(iv):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    ua, ub = union(a), union(b)
    total, j = 0.0, 0
    for s, e in ua:
        while j < len(ub) and ub[j][1] <= s:
            j += 1
        k = j
        while k < len(ub) and ub[k][0] < e:
            total += min(e, ub[k][1]) - max(s, ub[k][0])
            k += 1
    return total


# Steps in a row that must run the plan alone (no plain Inductor call, no
# new plan) before a variant is timed: more than the plan runs alone in a
# row while mode="auto" still measures it (calls 1-10 of a plan, then
# blocks of 8 between its turns beside plain Inductor's graph).
SETTLED_STEPS = first_plain_call() + 1


def steps_until_settled(step: Callable[[], object], backend: object, limit: int, quiet: int = SETTLED_STEPS) -> int:
    """Run ``step`` past the warm-up until ``quiet`` steps in a row ran
    only the backend's plans: mode="auto" runs plain Inductor's graph in
    turns beside each new plan (feedback.schedule.plain_calls) and may plan
    again after, so a fixed warm-up can end inside a plan's measurement
    (a late re-plan leaves plain Inductor's turns in the steps timed as the
    plan's). Returns the steps run; raises RuntimeError after ``limit``."""
    plans, run, steps = len(backend.plans), 0, 0
    while run < quiet:
        if steps >= limit:
            raise RuntimeError(
                f"mode='auto' still measuring its plans after {steps} steps past the warm-up "
                f"({len(backend.plans)} plans so far); time it with a longer --warmup"
            )
        step()
        steps += 1
        report = backend.last_step()
        if len(backend.plans) != plans or report is None or report.plain_inductor:
            plans, run = len(backend.plans), 0
        else:
            run += 1
    return steps


def profile_step(step, keep_trace: Optional[str] = None) -> dict:
    """One step under torch.profiler: copy time per direction, their streams,
    and the part of it that ran while a compute kernel ran on another stream.
    ``keep_trace``: a path to write the chrome trace to (gzip)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        # The step's start on the host: a trace reader times the device's
        # first kernel from it (the host's latency a synchronized step has).
        with torch.profiler.record_function("bench_offload.step"):
            step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    if keep_trace:
        with gzip.open(keep_trace, "wt") as f:
            json.dump(trace, f)
    kernels: dict[int, list] = {}
    copies: dict[str, list] = {"d2h": [], "h2d": []}
    copy_streams: dict[str, set] = {"d2h": set(), "h2d": set()}
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        cat, name = ev.get("cat", ""), ev.get("name", "")
        stream = ev.get("args", {}).get("stream")
        span = (float(ev["ts"]), float(ev["ts"]) + float(ev["dur"]))
        if cat == "kernel":
            kernels.setdefault(stream, []).append(span)
        elif cat == "gpu_memcpy":
            direction = "d2h" if "DtoH" in name else "h2d" if "HtoD" in name else None
            if direction:
                copies[direction].append((span, stream))
                copy_streams[direction].add(stream)
    out = {}
    for direction, spans in copies.items():
        busy = sum(e - s for (s, e), _ in spans)
        overlapped = 0.0
        for (s, e), stream in spans:
            others = [iv for st, ivs in kernels.items() if st != stream for iv in ivs]
            overlapped += _intervals_overlap([(s, e)], others)
        out[f"{direction}_copy_ms"] = busy / 1e3
        out[f"{direction}_overlap"] = overlapped / busy if busy else None
        out[f"{direction}_streams"] = sorted(str(s) for s in copy_streams[direction])
    out["compute_streams"] = sorted(str(s) for s in kernels)
    both = _intervals_overlap([sp for sp, _ in copies["d2h"]], [sp for sp, _ in copies["h2d"]])
    out["d2h_h2d_concurrent_ms"] = both / 1e3
    return out


HF_MODELS = ("hf_llama", "hf_qwen3_moe")


def model_choice(value: str) -> str:
    """--model: ours, a Hugging Face decoder, or ``timm:NAME`` (any timm network, images ``--image``)."""
    if value in ("decoder", "moe", *HF_MODELS) or (value.startswith("timm:") and len(value) > 5):
        return value
    raise argparse.ArgumentTypeError(f"unknown model {value!r}; valid: decoder, moe, {', '.join(HF_MODELS)}, timm:NAME")


def host_profile_forward(forward: Callable[[], torch.Tensor], zero_grad: Callable[[], None], path: str) -> None:
    """Where the host's time to issue the forward goes, written to ``path``:
    cProfile over 5 synchronized forwards (each followed by its backward,
    unprofiled), by own time and by cumulative time, then one forward under
    torch.profiler (CPU and CUDA runtime calls), by self CPU time: a call
    that blocks the host (a copy into pageable memory, an allocator's
    synchronize) stands out in either."""
    from torch.profiler import ProfilerActivity, profile

    profiler = cProfile.Profile()
    for _ in range(5):
        zero_grad()
        torch.cuda.synchronize()
        profiler.enable()
        loss = forward()
        profiler.disable()
        loss.backward()
        torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    zero_grad()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        loss = forward()
    loss.backward()
    torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    # The other Python threads of the process, where they are now (a thread
    # busy beside the main one takes the GIL whenever a torch call lets it go).
    main = threading.get_ident()
    stacks = "".join(
        f"thread {ident}:\n" + "".join(traceback.format_stack(frame, limit=8))
        for ident, frame in sys._current_frames().items() if ident != main
    ) or "none\n"
    with open(path, "w") as f:
        f.write(
            "torch.profiler, one forward, by self CPU time:\n" + table + "\n\ncProfile, 5 forwards:\n"
            + text.getvalue() + "\n\nother Python threads:\n" + stacks
        )


def hf_model(args: argparse.Namespace, dtype: torch.dtype, device: str = "cuda") -> torch.nn.Module:
    """A Hugging Face decoder from a config (nothing downloaded): Llama, or
    Qwen3-MoE with grouped_mm experts (top-2 routing). ``args``: model,
    layers, hidden, heads, vocab, seq, ffn (per expert), experts.
    ``plan_proxy.py`` builds its HF Llama here too."""
    common = dict(
        num_hidden_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        num_key_value_heads=args.heads, vocab_size=args.vocab, max_position_embeddings=args.seq,
        attention_dropout=0.0,
    )
    if args.model == "hf_llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(intermediate_size=args.ffn, **common))
    else:
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        config = Qwen3MoeConfig(
            moe_intermediate_size=args.ffn, num_experts=args.experts, num_experts_per_tok=2,
            head_dim=args.hidden // args.heads, experts_implementation="grouped_mm", **common,
        )
        model = Qwen3MoeForCausalLM(config)
    return model.to(device=device, dtype=dtype)


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    if args.model in HF_MODELS:
        return hf_model(args, dtype)
    if args.model.startswith("timm:"):
        import timm

        model = timm.create_model(args.model[len("timm:"):], pretrained=False)
        return model.to(device="cuda", dtype=dtype, memory_format=torch.channels_last)
    if args.model == "moe":
        return make_moe(args.layers, args.hidden, args.ffn, args.experts, dtype=dtype, device="cuda")
    return make_decoder(args.layers, args.hidden, args.heads, dtype=dtype, device="cuda")


def model_inputs(args: argparse.Namespace, dtype: torch.dtype) -> object:
    """Token ids for a Hugging Face model (labels: the same ids), images for a
    timm network (channels last, as such networks are trained), else hidden states."""
    if args.model in HF_MODELS:
        return torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    if args.model.startswith("timm:"):
        images = torch.randn(args.batch, 3, args.image, args.image, device="cuda", dtype=dtype)
        return images.contiguous(memory_format=torch.channels_last)
    return torch.randn(args.batch, args.seq, args.hidden, device="cuda", dtype=dtype)


def run_model(compiled, x: torch.Tensor) -> torch.Tensor:
    """The loss of one forward: HF models take ids and labels; an image
    network's logits are reduced to one number (no labels needed to time it)."""
    if x.dtype == torch.long:
        return compiled(input_ids=x, labels=x).loss
    if x.dim() == 4:
        return compiled(x).float().logsumexp(-1).mean()
    return compiled(x)


def _own_inductor() -> Callable:
    """Plain Inductor as a backend object of its own (see ``run_variant``)."""
    from torch._inductor.compile_fx import compile_fx

    return lambda gm, example_inputs: compile_fx(gm, example_inputs)


def run_variant(name: str, args: argparse.Namespace, x: torch.Tensor, kept: Optional[list] = None) -> dict:
    """Compile, warm up and time one variant. ``kept`` (``--interleave``):
    the variant's model stays alive and ``(result, timed_step)`` is appended
    for ``interleave``; Dynamo's caches are then not reset between variants
    (each variant's model is its own object, each backend its own: Dynamo
    guards on both)."""
    if kept is None:
        torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(args)
    full_name, (name, inductor_options) = name, split_inductor_options(name)
    mark = variant_mark(name, args.mark)
    modules, roles = marked_modules(model, mark)
    backend: object = "inductor"
    plan = None
    forward_context = contextlib.nullcontext
    functorch_patches: dict = {}
    inductor_patches: dict = {}
    kind = name.split("(")[0].split("[")[0]
    if kind == "offload_pass":
        if modules:
            offload_pass.offload_modules(model, *modules, roles=roles)
        backend = offload_pass.make_backend(**({"min_bytes": args.min_bytes} | parse_overrides(name)))
    elif kind == "builtin":
        mode = name[name.index("(") + 1 : name.rindex(")")] if "(" in name else "sync"
        functorch_patches = {"enable_activation_offloading": True, **BUILTIN_MODES[mode]}
        inductor_patches = {"joint_custom_pre_pass": _BuiltinMarks(modules)}
    elif kind == "recompute":
        # PyTorch's own recompute-only budget: the min-cut partitioner under
        # activation_memory_budget=B, plain Inductor otherwise.
        functorch_patches = {"activation_memory_budget": float(name[name.index("(") + 1 : name.rindex(")")])}
    elif kind == "save_on_cpu":
        forward_context = lambda: torch.autograd.graph.save_on_cpu(pin_memory=True)  # noqa: E731
    elif kind != "inductor":
        raise SystemExit(f"unknown variant {name!r}")
    if kept is not None and backend == "inductor":
        # Dynamo takes two "inductor" backends for one and would serve this
        # variant the graph an earlier one compiled under other patches
        # (recompute(B) ran plain Inductor's partition): a backend of its own.
        backend = _own_inductor()
    # "save_on_cpu(eager)": the same hooks around the model run eagerly.
    if name.endswith("(eager)"):
        if inductor_options:
            raise SystemExit(f"{full_name!r}: Inductor options need a compiled variant")
        compiled = model
    elif kind == "offload_pass":
        compiled = torch.compile(model, backend=backend, options=inductor_options or None)
    else:
        inductor_patches |= inductor_options
        compiled = torch.compile(model, backend=backend)

    def forward():
        with forward_context():
            return run_model(compiled, x)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        forward().backward()

    def timed_step() -> tuple[float, float, float, float]:
        """One synchronized step: (step, forward) ms on the device, the host's ms to issue the forward,
        and the iteration's ms on the host (zero_grad to the synchronize after the backward: a loop
        of these runs one per that; the device idles at its start and end)."""
        iteration_start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        host_start = time.perf_counter()
        loss = forward()
        host_ms = (time.perf_counter() - host_start) * 1e3
        mid.record()
        loss.backward()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), start.elapsed_time(mid), host_ms, (time.perf_counter() - iteration_start) * 1e3

    def unsynced_steps() -> float:
        """``args.steps`` steps back to back, nothing synchronized between
        them (as a training loop runs): the mean step, ms."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            forward().backward()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / args.steps

    result: dict = {"variant": full_name, "mark": mark}
    with torch._functorch.config.patch(**functorch_patches), torch._inductor.config.patch(**inductor_patches):
        try:
            # Synchronized like the timed steps: the calls the backend
            # measures (compiled_graph.FIRST_MEASURED_CALL) then run in the
            # loop that is timed. The device's clock follows its load (the
            # power cap): back to back it ran up to 10 % slower than
            # synchronized step by step.
            for _ in range(args.warmup):
                step()
                torch.cuda.synchronize()
            if kind == "offload_pass":
                result["settle_steps"] = steps_until_settled(
                    lambda: (step(), torch.cuda.synchronize()), backend, limit=2 * args.warmup
                )
        except Exception as error:  # a peer mode that crashes is reported, not hidden
            result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            traceback.print_exc(file=sys.stderr)
            del compiled, model
            torch.cuda.empty_cache()
            return result
        model.zero_grad(set_to_none=True)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = forward()
        torch.cuda.synchronize()
        boundary = torch.cuda.memory_allocated() - base
        forward_peak = torch.cuda.max_memory_allocated() - base
        loss.backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del loss
        load_before = host_load.snapshot()
        times, forward_times, host_forward_times, iteration_times = map(
            list, zip(*(timed_step() for _ in range(args.steps)))
        )
        # What else used the host's CPUs meanwhile (a busy thread or process slows the host's issue).
        result["host_load"] = host_load.describe(load_before, host_load.snapshot())
        # The same steps back to back, without a synchronize between them:
        # the host runs ahead, and its own time (launches, Python, autograd)
        # is hidden wherever the device is the slower; a synchronized step
        # exposes it. The step simulator predicts the device's work alone.
        result["unsynced_step_ms"] = unsynced_steps()
        safe = "".join(c if c.isalnum() else "_" for c in full_name)  # the variant in a file name
        if args.profile:
            trace = None
            if args.trace_dir:
                os.makedirs(args.trace_dir, exist_ok=True)
                trace = os.path.join(args.trace_dir, f"{mark.replace(':', '')}_{safe}.json.gz")
            result["profile"] = profile_step(step, trace)
        if args.host_profile:
            os.makedirs(args.host_profile, exist_ok=True)
            host_profile_forward(
                forward, lambda: model.zero_grad(set_to_none=True), os.path.join(args.host_profile, f"host_{safe}.txt")
            )
    offloaded_mib = None
    by_role: dict[str, float] = {}
    if plan is None and kind == "offload_pass":
        plan = backend.plans[-1]
        print(backend.records[-1], file=sys.stderr)  # the plan, and what the device measured of it
        offloaded_mib = plan.offloaded_bytes / 2**20
        for e in plan.entries:
            if e.role and e.decision == "offload":
                by_role[e.role] = by_role.get(e.role, 0) + e.nbytes / 2**20
        # The step simulator's prediction over every graph of the last step,
        # each as many times as it ran (graph breaks, a graph reused by
        # several layers): without offload, then with it. The peak is the
        # highest graph's own (what earlier graphs leave alive is not in it).
        ran = [(p, calls) for p, calls in backend.last_step().graphs if p.prediction is not None]
        if ran and len(ran) == len(backend.last_step().graphs):
            result["predicted_step_ms"] = (
                sum(p.baseline.step_ms * calls for p, calls in ran), sum(p.prediction.step_ms * calls for p, calls in ran)
            )
            result["predicted_peak_mib"] = (
                max(p.baseline.peak for p, _ in ran) / 2**20, max(p.prediction.peak for p, _ in ran) / 2**20
            )
            result["prediction_times"] = ran[-1][0].prediction.times
            result["graphs_in_step"] = [(p.graph_id, calls) for p, calls in ran]
            # The same as the loop ran it: the time each measured call spent
            # outside its graph (between steps, between forward and backward)
            # added, measured (calibration.PredictionCheck.as_run). Only
            # where each graph's is measured (a step of one graph).
            # What the loop measured is each plan's compile record's.
            checked = {id(r.plan): r.measured for r in backend.records}
            as_run = [
                (checked[id(p)].as_run(p.baseline), checked[id(p)].step_as_run_ms, calls)
                for p, calls in ran if checked[id(p)]
            ]
            if len(as_run) == len(ran) and all(a is not None for a, _, _ in as_run):
                result["predicted_step_as_run_ms"] = (
                    sum(a * calls for a, _, calls in as_run), sum(b * calls for _, b, calls in as_run)
                )
                result["outside_ms"] = sum(checked[id(p)].measured.outside_ms * calls for p, calls in ran)
        result["selection"] = plan.selection
        # The device's check of each plan's prediction (the median of calls 40-42 of its graph,
        # feedback/loop.py), before and after a re-plan, and the calibrations.
        result["checks"] = [
            {
                "graph": r.plan.graph_id, "calibrated": r.calibration is not None, "call": r.measured.measured.call,
                "replan_reason": r.replan_reason and str(r.replan_reason),
                "step_error": r.measured.step_error, "peak_error": r.measured.peak_error,
                "stall_error": r.measured.stall_error,
                "outside_ms": r.measured.measured.outside_ms, "step_as_run_ms": r.measured.step_as_run_ms,
                # mode="auto": plain Inductor's graph measured right before the plan's calls.
                "plain_work_ms": None if r.measured.plain is None else r.measured.plain.work_ms,
                "measured_overhead": r.measured.measured_overhead,
                "budget_mib": None if r.plan.budget is None else r.plan.budget / 2**20,
                "predicted_peak_mib": r.plan.prediction.peak / 2**20,
                "measured_peak_mib": None if r.measured.measured.peak is None else r.measured.measured.peak / 2**20,
                "text": r.measured.describe(),
            }
            for r in backend.records if r.measured is not None
        ]
        result["calibrations"] = [
            f"{r.plan.graph_id}: {r.calibration.describe()}" for r in backend.records if r.calibration
        ]
        # A level (float, None) as it is; a block cut (planning.blocks.BlockCut) as it reads.
        result["recompute_level"] = [
            p.recompute_level if p.recompute_level is None or isinstance(p.recompute_level, float)
            else format(p.recompute_level) for p, _ in backend.last_step().graphs
        ]
        graphs = backend.last_step().graphs
        result["recomputed_mib"] = sum(p.recomputed_bytes * calls for p, calls in graphs) / 2**20
        # What the recompute starts from, newly saved: the saved bytes fall by recomputed_mib less this.
        result["saved_for_recompute_mib"] = sum(p.saved_for_recompute_bytes * calls for p, calls in graphs) / 2**20
    result.update({
        "step_ms": statistics.median(times),
        "forward_ms": statistics.median(forward_times),
        # The host's time to issue the forward (nothing synchronized inside):
        # near forward_ms, the forward is as fast as the host launches it.
        "host_forward_ms": statistics.median(host_forward_times),
        "host_forward_range_ms": (min(host_forward_times), max(host_forward_times)),
        # The synchronized loop's period: the step plus the loop's own time
        # (zero_grad, the synchronize) outside it.
        "iteration_ms": statistics.median(iteration_times),
        "backward_ms": statistics.median(t - f for t, f in zip(times, forward_times)),
        "peak_mib": peak / 2**20,
        "boundary_mib": boundary / 2**20,
        "forward_peak_mib": forward_peak / 2**20,
        # Peers keep no plan: their bytes offloaded are what left the device
        # by the end of forward (the boundary reduction), filled in by main().
        "offloaded_mib": offloaded_mib,
        "offloaded_tensors": len(plan.offloaded) if plan else None,
        "offloaded_mib_by_role": by_role,
    })
    if kept is not None:
        kept.append((result, timed_step, unsynced_steps))
        return result
    del compiled, model
    torch.cuda.empty_cache()
    return result


def interleave(kept: list[tuple[dict, Callable, Callable]], rounds: int, steps: int) -> None:
    """Time the kept variants again, round-robin: ``rounds`` rounds of, for
    each variant in turn, ``steps`` synchronized steps and ``steps`` steps
    back to back. The device's speed
    drifts over a run (its clock follows its load and temperature under the
    power cap: on an H200 one plan's median step moved by 2.5 % between
    rows of one process), and variants timed one after the other carry that
    drift into their slowdowns; interleaved, each variant sees the same
    device. ``step_ms`` (and ``forward_ms``, ``backward_ms``,
    ``host_forward_ms``) become the medians over the rounds' synchronized
    steps, ``unsynced_step_ms`` the median of the rounds' back-to-back
    means; the figures timed right after each variant's warm-up stay as
    ``*_alone``."""
    timed: list[list[tuple[float, float, float, float]]] = [[] for _ in kept]
    unsynced: list[list[float]] = [[] for _ in kept]
    for _ in range(rounds):
        for i, (_, timed_step, unsynced_steps) in enumerate(kept):
            timed[i] += [timed_step() for _ in range(steps)]
            unsynced[i].append(unsynced_steps())
    _summarise_rounds(kept, timed, unsynced)


def _summarise_rounds(
    kept: list[tuple[dict, Callable, Callable]],
    timed: list[list[tuple[float, float, float, float]]],
    unsynced: list[list[float]],
) -> None:
    """Each kept variant's headline figures from its rounds (``interleave``)."""
    for (result, _, _), runs, means in zip(kept, timed, unsynced):
        for key in ("step_ms", "forward_ms", "backward_ms", "host_forward_ms", "iteration_ms", "unsynced_step_ms"):
            result[f"{key}_alone"] = result[key]
        result["step_ms"] = statistics.median(t for t, _, _, _ in runs)
        result["forward_ms"] = statistics.median(f for _, f, _, _ in runs)
        result["backward_ms"] = statistics.median(t - f for t, f, _, _ in runs)
        result["host_forward_ms"] = statistics.median(h for _, _, h, _ in runs)
        result["iteration_ms"] = statistics.median(i for _, _, _, i in runs)
        result["unsynced_step_ms"] = statistics.median(means)
        result["unsynced_rounds_ms"] = means
        result["interleaved_steps"] = len(runs)


def paired_schedule(variants: int, rounds: int) -> list[int]:
    """The blocks ``--paired`` times, as indices into the variants: the
    reference (0) before and after every block of another variant
    (0, 1, 0, 2, ..., 0, k-1, 0, ...), ``rounds`` times over the others,
    every other round in reverse order (each variant follows and precedes
    a different neighbour's reference block from round to round)."""
    if variants < 2 or rounds < 1:
        raise ValueError(
            f"--paired needs a reference, another variant and a round: got {variants} variants, {rounds} rounds"
        )
    order: list[int] = []
    for r in range(rounds):
        others = list(range(1, variants))
        order += others if r % 2 == 0 else others[::-1]
    schedule = [0]
    for v in order:
        schedule += [v, 0]
    return schedule


def paired_ratios(blocks: list[tuple[int, float]]) -> dict[int, list[float]]:
    """Per variant (other than the reference, 0), each of its blocks' time
    over the mean of the reference blocks right before and after it:
    ``blocks`` is (variant, time) in the order they ran (``paired_schedule``)."""
    ratios: dict[int, list[float]] = {}
    for j, (variant, value) in enumerate(blocks):
        if variant == 0:
            continue
        if j == 0 or j == len(blocks) - 1 or blocks[j - 1][0] != 0 or blocks[j + 1][0] != 0:
            raise ValueError(f"block {j} (variant {variant}) is not between two reference blocks")
        ratios.setdefault(variant, []).append(value / ((blocks[j - 1][1] + blocks[j + 1][1]) / 2))
    return ratios


def interleave_paired(kept: list[tuple[dict, Callable, Callable]], rounds: int, steps: int, settle: int) -> None:
    """``interleave``, with the first kept variant (plain Inductor) timed
    before and after every block of another (``paired_schedule``), each
    block ``settle`` synchronized steps untimed, then ``steps``
    synchronized and ``steps`` back to back. A variant's
    ``paired_slowdown`` (``paired_unsynced_slowdown``) is the median over
    its blocks of its median synchronized step (back-to-back mean) over the
    mean of the two reference blocks around it (``paired_ratios``). Why:
    a block's first steps run at the clock the block before left (on an
    H200, plain Inductor's synchronized steps right after a copy-bound
    plan's read 2 % fast, the hand set after the 30 % plan 3 % fast against
    the one after it), so a round-robin
    slowdown carries its neighbour's load; and two compiles of plain
    Inductor read 1.6-2.6 % apart in one process. A second plain Inductor
    row among the variants is the control: its paired slowdown is the
    method's noise. The reference's result keeps every block's step times
    (``paired_blocks``) to show how fast a block settles."""
    schedule = paired_schedule(len(kept), rounds)
    timed: list[list[tuple[float, float, float, float]]] = [[] for _ in kept]
    unsynced: list[list[float]] = [[] for _ in kept]
    sync_blocks: list[tuple[int, float]] = []
    unsync_blocks: list[tuple[int, float]] = []
    trace = []
    for v in schedule:
        _, timed_step, unsynced_steps = kept[v]
        settling = [timed_step()[0] for _ in range(settle)]
        runs = [timed_step() for _ in range(steps)]
        mean = unsynced_steps()
        timed[v] += runs
        unsynced[v].append(mean)
        sync_blocks.append((v, statistics.median(t for t, _, _, _ in runs)))
        unsync_blocks.append((v, mean))
        trace.append({"variant": v, "settle_ms": settling, "sync_ms": [t for t, _, _, _ in runs], "unsynced_ms": mean})
    _summarise_rounds(kept, timed, unsynced)
    sync_ratios, unsync_ratios = paired_ratios(sync_blocks), paired_ratios(unsync_blocks)
    for v, (result, _, _) in enumerate(kept):
        if v == 0:
            result["paired_blocks"] = trace
            continue
        result["paired_rounds"] = sync_ratios[v]
        result["paired_unsynced_rounds"] = unsync_ratios[v]
        result["paired_slowdown"] = statistics.median(sync_ratios[v])
        result["paired_unsynced_slowdown"] = statistics.median(unsync_ratios[v])


def interleave_seconds(iteration_ms: Sequence[float], rounds: int, steps: int, settle: int, paired: bool) -> float:
    """A forecast of ``interleave`` (``paired``: ``interleave_paired``) over
    variants whose synchronized iterations take ``iteration_ms`` (the first:
    the reference), in seconds: each block runs ``steps`` synchronized and
    ``steps`` back-to-back steps (paired: ``settle`` synchronized steps
    more), each counted as one synchronized iteration."""
    if rounds < 1 or not iteration_ms:
        return 0.0
    if paired:
        blocks = paired_schedule(len(iteration_ms), rounds) if len(iteration_ms) > 1 else []
        return sum((settle + 2 * steps) * iteration_ms[v] for v in blocks) / 1e3
    return rounds * sum(2 * steps * ms for ms in iteration_ms) / 1e3


def next_variant_fits(left_s: float, variant_s: Sequence[float], iteration_ms: Sequence[float], args) -> bool:
    """``--deadline``: whether one more variant can run with ``left_s``
    seconds left, after variants that took ``variant_s`` seconds each
    (compile, warm-up, timed steps) and whose iterations take
    ``iteration_ms`` (those kept for ``--interleave``): the next is taken
    to take as long as the longest so far and to iterate as slowly as the
    slowest, and the rounds of ``--interleave`` must fit after it. The
    first variant always runs (nothing to forecast it from)."""
    if not variant_s:
        return True
    rounds = interleave_seconds(
        [*iteration_ms, max(iteration_ms, default=0.0)], args.interleave, args.steps, args.settle, args.paired
    )
    return left_s >= max(variant_s) + rounds


def rounds_that_fit(left_s: float, iteration_ms: Sequence[float], args) -> int:
    """``--deadline``: the most rounds of ``--interleave`` (up to the rounds
    asked for) that the forecast fits in ``left_s`` seconds; 0: none."""
    fits = 0
    for rounds in range(1, args.interleave + 1):
        if interleave_seconds(iteration_ms, rounds, args.steps, args.settle, args.paired) > left_s:
            break
        fits = rounds
    return fits


def derive(results: list[dict], bandwidth: dict[str, float]) -> None:
    """The figures each row gets against the first plain Inductor row of
    ``results`` (slowdown, peak reduction, R, floors, copy-out window,
    prediction errors), in place. Run at the end of ``main``; a JSON cut
    at a time limit (written before this ran) can be completed with it."""
    ref = next((r for r in results if r["variant"] == "inductor" and "error" not in r), None)
    for r in results:
        if ref is None or "error" in r:
            continue
        r["boundary_reduction_mib"] = ref["boundary_mib"] - r["boundary_mib"]
        if r["offloaded_mib"] is None and r["variant"] != "inductor":
            r["offloaded_mib"] = r["boundary_reduction_mib"]
        offloaded = r["offloaded_mib"] or 0.0
        r["peak_reduction_mib"] = ref["peak_mib"] - r["peak_mib"]
        r["R"] = r["peak_reduction_mib"] / offloaded if offloaded else None
        r["R_boundary"] = r["boundary_reduction_mib"] / offloaded if offloaded else None
        r["slowdown"] = r["step_ms"] / ref["step_ms"]
        # Steps back to back, as a training loop runs them (the host ahead).
        r["unsynced_slowdown"] = r["unsynced_step_ms"] / ref["unsynced_step_ms"]
        out_ms = offloaded * 2**20 / (bandwidth["d2h"] * 1e9) * 1e3
        in_ms = offloaded * 2**20 / (bandwidth["h2d"] * 1e9) * 1e3
        r["floor_ms"] = max(ref["step_ms"], out_ms)
        r["vs_floor"] = r["step_ms"] / r["floor_ms"]
        r["floor2_ms"] = max(ref["forward_ms"], out_ms) + max(ref["backward_ms"], in_ms)
        r["vs_floor2"] = r["step_ms"] / r["floor2_ms"]
        # The floor is the device's alone; a step timed back to back has
        # no host latency before its first kernel (a synchronized one does).
        r["unsynced_vs_floor2"] = r["unsynced_step_ms"] / r["floor2_ms"]
        # What can leave the device while the forward runs: bandwidth x the
        # measured forward of plain Inductor (the copy-out window).
        r["window_mib"] = bandwidth["d2h"] * 1e9 * ref["forward_ms"] / 1e3 / 2**20
        r["freed_vs_window"] = r["peak_reduction_mib"] / r["window_mib"]
        if r.get("predicted_step_ms"):
            without, chosen = r["predicted_step_ms"]
            r["predicted_slowdown"] = chosen / without if without else None
            r["slowdown_error"] = (r["predicted_slowdown"] - r["slowdown"]) / r["slowdown"] if without else None
            r["predicted_step_error"] = (chosen - r["step_ms"]) / r["step_ms"]
            r["predicted_unsynced_error"] = (chosen - r["unsynced_step_ms"]) / r["unsynced_step_ms"]
            without, chosen = r["predicted_peak_mib"]
            r["predicted_reduction_mib"] = without - chosen
            r["predicted_peak_error"] = (chosen - r["peak_mib"]) / r["peak_mib"]
            if r.get("predicted_step_as_run_ms") and r.get("iteration_ms"):
                # Against the synchronized loop's period: the measured calls ran in such a loop
                # (the warm-up), and the time they measured outside the graph is that loop's.
                without_as_run, as_run = r["predicted_step_as_run_ms"]
                r["as_run_error"] = (as_run - r["iteration_ms"]) / r["iteration_ms"]
                ref.setdefault("as_run_error", (without_as_run - ref["iteration_ms"]) / ref["iteration_ms"])
            # The plain Inductor row is the prediction without offload.
            ref.setdefault("predicted_step_error", (r["predicted_step_ms"][0] - ref["step_ms"]) / ref["step_ms"])
            ref.setdefault(
                "predicted_unsynced_error",
                (r["predicted_step_ms"][0] - ref["unsynced_step_ms"]) / ref["unsynced_step_ms"],
            )
            ref.setdefault("predicted_peak_error", (without - ref["peak_mib"]) / ref["peak_mib"])


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The arguments ``build_model`` and ``model_inputs`` read (other
    benchmarks build their models here too)."""
    p.add_argument("--model", default="decoder", type=model_choice,
                   help=f"decoder, moe, {', '.join(HF_MODELS)}, or timm:NAME (a timm network, channels last)")
    p.add_argument("--image", type=int, default=224, help="timm:NAME: image size")
    p.add_argument("--ffn", type=int, default=2048, help="moe / hf_*: (per-expert) ffn size")
    p.add_argument("--vocab", type=int, default=8192, help="hf_*: vocabulary size")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.add_argument("--mark", default="all")
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument(
        "--warmup", type=int, default=128,
        help="steps before the timed ones: 128 covers the measured calls 40-42 of a graph, its re-plan at call 43, "
        "the re-planned graph's measured calls (steps 82-84), a second re-plan at step 85 (mode=budget, a "
        "measured peak over the budget, or mode=auto, measured stalls over max_overhead) and its measured "
        "calls (steps 124-126, checked at 127)",
    )
    p.add_argument("--steps", type=int, default=10)
    p.add_argument(
        "--variants",
        default="inductor,offload_pass",
        help="comma-separated: inductor, offload_pass, or offload_pass(knob=value;knob=value) "
        "with OffloadConfig knobs",
    )
    p.add_argument("--profile", action="store_true", help="profile one step of each variant")
    p.add_argument("--trace-dir", default=None, help="with --profile: keep each chrome trace there (gzip)")
    p.add_argument(
        "--interleave", type=int, default=0, metavar="ROUNDS",
        help="after every variant is compiled and warmed up, time them again round-robin: ROUNDS rounds of "
        "--steps synchronized steps each (the headline step times then come from these rounds; the device's "
        "drift over the run falls on every variant alike). Keeps every variant's model alive.",
    )
    p.add_argument(
        "--paired", action="store_true",
        help="with --interleave: time the first variant (plain Inductor) before and after every block of "
        "another, and report each variant's slowdown against the two reference blocks around it "
        "(paired_slowdown, paired_unsynced_slowdown; medians over its blocks). A second inductor row "
        "among the variants is the control: its paired slowdown is the method's noise.",
    )
    p.add_argument(
        "--settle", type=int, default=10,
        help="with --paired: synchronized steps each block runs untimed first (its first steps run at the "
        "clock the block before left)",
    )
    p.add_argument(
        "--host-profile", default=None, metavar="DIR",
        help="after each variant's timed steps, where the host's time to issue the forward goes "
        "(cProfile and torch.profiler, DIR/host_<variant>.txt); the variants after the first then run in a "
        "process the profiler has run in",
    )
    p.add_argument(
        "--log", default=None, choices=["info", "debug"],
        help="offload_pass's log to stderr at this level, each line stamped with the milliseconds since the start "
        "(mode=budget logs every recompute level it partitions, and how long it took)",
    )
    p.add_argument(
        "--deadline", type=float, default=None, metavar="SECONDS",
        help="finish within this many seconds of the start (give a few less than the call's time limit): a "
        "variant is begun only where the longest one so far and the --interleave rounds still fit after it "
        "(the others are listed as skipped), and the rounds are cut to those that fit; the table and JSON then "
        "hold what ran, where a time limit would have cut the run off before its rounds",
    )
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.deadline is not None and args.deadline <= 0:
        p.error(f"--deadline must be a positive number of seconds, got {args.deadline:g}")
    if args.log:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(relativeCreated)7.0f ms] %(message)s"))
        logger = logging.getLogger("offload_pass")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO if args.log == "info" else logging.DEBUG)
    variants = args.variants.split(",")
    if args.paired and (not args.interleave or variants[0] != "inductor" or len(variants) < 2):
        p.error(
            "--paired times every variant against the first, which must be inductor, and needs --interleave "
            f"ROUNDS and another variant: got --interleave {args.interleave}, variants {variants}"
        )
    # PyTorch's pass is driven by joint_custom_pre_pass, which the compile
    # caches do not key on: no variant may be served another's graph. The
    # kernels are cached (a hit is the binary a build would give), in a
    # directory new to this process.
    graph_caches_off(tempfile.mkdtemp(prefix="bench_offload_kernels_"))
    if not torch.cuda.is_available():
        raise SystemExit("bench_offload.py needs a CUDA device")

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    x = model_inputs(args, dtype)
    bandwidth = measure_bandwidth()
    # The device profile the step simulator uses, before any compile: a graph
    # with nothing to copy does not measure it, and would go unpredicted.
    device_profile(torch.device("cuda"))
    results = []
    kept: Optional[list] = [] if args.interleave else None
    if kept is not None:
        # Every variant's graphs stay compiled side by side (no reset between them).
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 512)
    skipped: list[str] = []

    def left_s() -> float:
        return args.deadline - (time.perf_counter() - _STARTED)

    for k, variant in enumerate(variants):
        if args.deadline is not None and not next_variant_fits(
            left_s(), [r["wall_s"] for r in results], [r["iteration_ms"] for r, _, _ in kept or []], args
        ):
            skipped = variants[k:]
            print(
                f"--deadline: {left_s():.0f} s left, less than the longest variant so far "
                f"({max(r['wall_s'] for r in results):.0f} s) and the rounds after it: not run: {', '.join(skipped)}",
                file=sys.stderr, flush=True,
            )
            break
        began = time.perf_counter()
        results.append(run_variant(variant, args, x, kept))
        r = results[-1]
        r["wall_s"] = time.perf_counter() - began  # compile, warm-up and the measured steps
        print(
            f"[{time.perf_counter() - began:.0f} s] {variant}: "
            + (r.get("error") or f"{r['step_ms']:.1f} ms, peak {r['peak_mib']:.0f} MiB"),
            file=sys.stderr,
            flush=True,
        )
        if args.json:  # partial results survive a time limit
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "bandwidth_gbps": bandwidth, "results": results}, f, indent=2)
    rounds = args.interleave
    if kept and args.deadline is not None:
        rounds = rounds_that_fit(left_s(), [r["iteration_ms"] for r, _, _ in kept], args)
        if rounds < args.interleave:
            print(
                f"--deadline: {left_s():.0f} s left: {rounds} of the {args.interleave} rounds of --interleave fit",
                file=sys.stderr, flush=True,
            )
    if kept and rounds and len(kept) < 2:
        # The others failed or were not begun (--deadline): nothing to time it against.
        print("--interleave: one variant ran, nothing to time it against: no rounds", file=sys.stderr, flush=True)
        rounds = 0
    if kept and rounds:
        began = time.perf_counter()
        # A reference that failed (its row holds the error) leaves nothing to pair with.
        paired = args.paired and kept[0][0]["variant"] == "inductor"
        if args.paired and not paired:
            print("--paired: plain Inductor did not run, timed round-robin instead", file=sys.stderr, flush=True)
        if paired:
            interleave_paired(kept, rounds, args.steps, args.settle)
        else:
            interleave(kept, rounds, args.steps)
        print(
            f"[{time.perf_counter() - began:.0f} s] interleaved{' paired' if paired else ''}: "
            f"{rounds} rounds",
            file=sys.stderr,
            flush=True,
        )
    derive(results, bandwidth)
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "args": vars(args),
        "bandwidth_gbps": bandwidth,
        "results": results,
        # --deadline: the variants not begun, and the rounds of --interleave run.
        "skipped_variants": skipped,
        "interleave_rounds": rounds if kept else 0,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(f"{report['device']}  torch {report['torch']}  d2h {bandwidth['d2h']:.1f} GB/s  h2d {bandwidth['h2d']:.1f} GB/s")
    for r in results:
        if r.get("offloaded_mib_by_role"):
            print(f"{r['variant']}: offloaded MiB by role {r['offloaded_mib_by_role']}")
    if skipped:
        print(f"not run (--deadline {args.deadline:g} s): {', '.join(skipped)}")
    for r in results:
        if "error" in r:
            print(f"{r['variant']}: FAILED {r['error']}")
        if r.get("profile"):
            print(f"{r['variant']}: profile {json.dumps(r['profile'])}")
    cols = [
        "variant", "step_ms", "forward_ms", "host_forward_ms", "peak_mib", "boundary_mib", "offloaded_mib",
        "peak_reduction_mib", "R", "R_boundary", "slowdown", "unsynced_slowdown", "floor_ms", "vs_floor", "floor2_ms", "vs_floor2", "unsynced_vs_floor2",
    ]
    if any(r.get("paired_slowdown") for r in results):
        cols += ["paired_slowdown", "paired_unsynced_slowdown"]
    if any(r.get("predicted_step_ms") for r in results):
        cols += ["freed_vs_window", "predicted_slowdown", "predicted_step_error", "predicted_peak_error"]
    if any(r.get("predicted_step_as_run_ms") for r in results):
        cols += ["outside_ms", "iteration_ms", "as_run_error"]
    print("| " + " | ".join(cols) + " |")
    for r in results:
        print("| " + " | ".join(
            f"{r.get(c):.3f}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols
        ) + " |")


if __name__ == "__main__":
    main()
