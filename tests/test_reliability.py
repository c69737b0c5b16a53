"""Training conditions that must keep exact gradients, and faults that must
not break training (issue: never a wrong gradient, never a crash from a mark)."""

import functools
import gc
import random
import threading
import warnings

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as cp

import offload_pass
from offload_pass import runtime
from offload_pass.examples.models import make_decoder
from offload_pass.planning.reasons import Reason, detail

from helpers import DEVICES
from helpers import assert_same_training

ATTN_MLP = lambda m: offload_pass.offload_modules(m, "layers.*.attn", "layers.*.mlp")


def decoder(**kw):
    return make_decoder(**({"layers": 2, "hidden": 32, "heads": 4} | kw))


def test_dynamic_shapes_each_shape_its_plan():
    sizes = iter([16, 12, 20, 16, 12, 20])

    def step(compiled, inputs):
        loss = compiled(torch.randn(2, next(sizes), 32, generator=torch.Generator().manual_seed(1)))
        loss.backward()
        return loss

    backend = assert_same_training(decoder(), ATTN_MLP, (None,), steps=3, step=step, compile_kwargs={"dynamic": True})
    assert len(backend.plans) == 1  # one dynamic graph serves every length
    plan = backend.plans[-1]
    assert plan.offloaded and all(e.nbytes == 0 for e in plan.entries if e.decision == "offload")


def test_mark_dynamic_recompile_gets_its_own_plan():
    def step(compiled, inputs):
        total = 0
        for s in (16, 24):
            x = torch.randn(2, s, 32, generator=torch.Generator().manual_seed(s))
            torch._dynamo.mark_dynamic(x, 1)
            loss = compiled(x)
            loss.backward()
            total = total + loss.detach()
        return total

    backend = assert_same_training(decoder(), ATTN_MLP, (None,), steps=2, step=step)
    assert len(backend.plans) == 1


def test_gradient_accumulation_keeps_each_forward_distinct():
    x = torch.randn(2, 16, 32)

    def step(compiled, inputs):
        losses = [compiled(inputs[0] * k) for k in (1.0, 2.0, 3.0)]
        total = sum(losses)
        total.backward()
        return total.detach()

    assert_same_training(decoder(), ATTN_MLP, (x,), step=step)


def test_retain_graph_two_backwards(monkeypatch):
    # Donated buffers (saved tensors whose memory backward may reuse) forbid
    # retain_graph; AOTAutograd says so itself, for offloaded graphs as for
    # any graph whose saved set it can donate. Users who retain turn it off.
    monkeypatch.setattr(torch._functorch.config, "donated_buffer", False)
    x = torch.randn(2, 16, 32)

    def step(compiled, inputs):
        loss = compiled(*inputs)
        loss.backward(retain_graph=True)
        loss.backward()
        return loss.detach()

    assert_same_training(decoder(), ATTN_MLP, (x,), step=step)


def test_forward_without_backward_leaks_nothing():
    model = decoder()
    ATTN_MLP(model)
    compiled = torch.compile(model, backend=offload_pass.make_backend(min_bytes=0))
    x = torch.randn(2, 16, 32)
    held_before = runtime.host_bytes_held()
    for _ in range(3):
        loss = compiled(x)
        del loss
    gc.collect()
    assert runtime.host_bytes_held() == held_before
    assert runtime.pending_events() == (0, 0)


def test_no_grad_and_inference_mode_run_no_offload():
    model = decoder()
    ATTN_MLP(model)
    backend = offload_pass.make_backend(min_bytes=0)
    compiled = torch.compile(model, backend=backend)
    runtime.reset_stats()
    with torch.no_grad():
        compiled(torch.randn(2, 16, 32))
    with torch.inference_mode():
        compiled(torch.randn(2, 16, 32))
    assert runtime.stats()["offload_calls"] == 0 and backend.plans == []


def test_autocast_bf16():
    x = torch.randn(2, 16, 32)

    def step(compiled, inputs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = compiled(*inputs)
        loss.backward()
        return loss.detach()

    backend = assert_same_training(decoder(), ATTN_MLP, (x,), step=step, atol=0, rtol=0)
    assert {e.dtype for e in backend.plans[-1].entries if e.decision == "offload"} == {"bfloat16", "float32"}


class Odd(nn.Module):
    """Saves a transposed (non-contiguous) tensor, a channels-last conv
    activation and a size-0 tensor, and returns a saved tensor as an output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.lin = nn.Linear(8, 8)

    def forward(self, x, empty):
        h = torch.tanh(self.conv(x.to(memory_format=torch.channels_last)))
        t = h.flatten(2).transpose(1, 2)  # [B, HW, C], non-contiguous
        y = self.lin(torch.sin(t))
        e = (torch.sin(empty) * 2).sum()
        return (y * y).sum() + e, h


def test_non_contiguous_channels_last_empty_and_outputs():
    x = torch.randn(2, 4, 6, 6)
    empty = torch.randn(0, 5, requires_grad=True)

    def step(compiled, inputs):
        loss, h = compiled(*inputs)
        (loss + h.sum()).backward()
        return loss.detach()

    backend = assert_same_training(Odd(), lambda m: offload_pass.offload_modules(m, m), (x, empty), step=step)
    plan = backend.plans[-1]
    offloaded = [e for e in plan.entries if e.decision == "offload"]
    assert offloaded, plan
    reasons = {e.code for e in plan.entries if e.decision == "keep"}
    assert Reason.MODEL_OUTPUT in reasons, plan


class TwoConvs(nn.Module):
    """A 4-D activation between two convolutions: Inductor's layout
    optimization (on whenever a graph has a convolution on the CPU, and on
    convolution-heavy graphs on the GPU) prefers channels last for the nodes
    between two convolutions, the users of such nodes included."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        h = torch.tanh(self.conv1(x))
        return torch.sin(self.conv2(h)).square().mean()


def _train_channels_last(model: nn.Module, device: str):
    """Two steps of ``model``, everything marked, against plain Inductor, with
    Inductor's layout optimization forced on (the GPU's heuristic leaves
    graphs this small alone) and the copy counters reset first."""
    x = torch.randn(2, 3, 8, 8, device=device)
    runtime.reset_stats()
    with torch._inductor.config.patch(force_layout_optimization=True):
        return assert_same_training(model.to(device), lambda m: offload_pass.offload_modules(m, m), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_a_host_copy_between_convolutions_keeps_its_layout(device):
    # Inductor gives a 4-D graph output among the nodes that prefer channels
    # last that layout, by a copy: the host copy of ``h`` was copied again on
    # the host (a CPU kernel reading it before the device->host copy lands),
    # and the release refused the copy it was handed (Hugging Face Mamba,
    # whose scan saves 4-D tensors between its layers' conv1d).
    backend = _train_channels_last(TwoConvs(), device)
    plan = backend.plans[-1]
    offloaded = {e.name: e.shape for e in plan.entries if e.decision == "offload"}
    # tanh's output (conv2's input), 4-D and before the last convolution, and
    # conv2's output.
    assert offloaded == {"tanh": (2, 8, 8, 8), "convolution_1": (2, 8, 8, 8)}, plan
    # Both are laid out channels last; each copy read that buffer as it is,
    # not a device copy of it made to the traced (contiguous) strides.
    stats = runtime.stats()
    assert stats["offload_calls"] == 2 * 2 and stats["temporary_sources"] == 0, stats


class ConvView(nn.Module):
    """A convolution's output saved as a view of all of it (the linear layer
    saves ``h.view(n, -1)``), and a 4-D activation between two convolutions."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.lin = nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        h = self.conv2(torch.tanh(self.conv1(x)))
        v = h.view(h.shape[0], -1)
        return (self.lin(v) * v[:, :4]).square().mean()


@pytest.mark.parametrize("device", DEVICES)
def test_a_copy_rebuilt_as_views_keeps_the_traced_layout(device):
    # ``offload`` copies a convolution's output in the layout Inductor gave it
    # (channels last) where the host copy stands for that tensor alone. The
    # backward rebuilds the views of a storage copy by their traced strides
    # (``as_strided``), so such a copy must hold the traced layout: copied
    # channels last, conv1's weight gradient came out wrong in every element.
    backend = _train_channels_last(ConvView(), device)
    groups = {g.storage: (g.members, g.copy.value) for g in backend.plans[-1].groups}
    assert groups == {
        "tanh": (("tanh",), "tensor"), "convolution_1": (("view",), "storage"), "addmm": (("addmm",), "tensor")
    }, backend.plans[-1]
    # tanh's output is copied as Inductor laid it out. conv2's output is
    # copied from its traced strides: on the CPU (torch 2.13) Inductor lays
    # it out channels last, so a device copy to the traced strides is made
    # first, each step; on the H200 (torch 2.11, thirty-first session)
    # Inductor lays it out as traced, and no copy is needed. Which layout
    # Inductor picks is its choice; the gradients above are the guard.
    expected = {"cpu": 2, "cuda": 0}[torch.device(device).type]
    assert runtime.stats()["temporary_sources"] == expected, runtime.stats()


def test_only_a_copy_nothing_reads_by_its_traced_strides_may_keep_another_layout():
    # Which host copies ``offload`` may take in the layout Inductor gives
    # their source (copy_source.py): not one the backward rebuilds views from
    # (a storage copy), nor one the backward reads with ``as_strided``.
    from offload_pass.enums import CopyKind
    from offload_pass.planning.plan import OffloadGroup, OffloadPlan
    from offload_pass.rewriting.rewrite import _copies

    backward = torch.fx.Graph()
    a, b, c = (backward.placeholder(name) for name in "abc")
    strided = backward.call_function(torch.ops.aten.as_strided.default, (b, [4], [1], 0))
    backward.output((backward.call_function(torch.ops.aten.add.Tensor, (a, strided)), c))
    plan = OffloadPlan("graph 0", [], [
        OffloadGroup("a", ("a",), CopyKind.TENSOR, 16), OffloadGroup("b", ("b",), CopyKind.TENSOR, 16),
        OffloadGroup("c", ("c",), CopyKind.EACH, 16),
    ])
    copies = _copies(plan, {}, torch.fx.GraphModule(torch.nn.Module(), backward))
    assert {copy.source: copy.layout_free for copy in copies} == {"a": True, "b": False, "c": True}


class BreakInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        h = self.a(x)
        torch._dynamo.graph_break()
        return self.b(torch.tanh(h))


class BreakNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = BreakInside()
        self.head = nn.Linear(16, 16)

    def forward(self, x):
        return self.head(self.block(x)).sum()


def test_graph_break_inside_a_marked_module_keeps_the_marks():
    x = torch.randn(8, 16)
    backend = assert_same_training(BreakNet(), lambda m: offload_pass.offload_modules(m, "block"), (x,))
    marked = [e for p in backend.plans for e in p.entries if e.module.startswith("block")]
    assert marked and all(e.decision == "offload" for e in marked if e.op != "placeholder"), backend.plans


class TanhSub(nn.Module):
    """A user module (not torch.nn's): Dynamo compiles its frame on its own
    when the caller runs eagerly. It saves one internal tensor (the tanh)."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


class RegionWithBreak(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = TanhSub(), TanhSub(), TanhSub()

    def forward(self, x):
        with offload_pass.offload_region():  # REGION_LINE
            h = self.a(x)
            torch._dynamo.graph_break()
            h = self.b(h)
        return self.c(h).sum()


def _region_line():
    import inspect

    lines, start = inspect.getsourcelines(RegionWithBreak.forward)
    return start + next(i for i, line in enumerate(lines) if "REGION_LINE" in line)


def test_graph_break_inside_a_region_warns_and_keeps_the_marks_of_compiled_pieces():
    x = torch.randn(8, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = assert_same_training(RegionWithBreak(), lambda m: None, (x,))
    messages = [str(w.message) for w in caught if "offload_region" in str(w.message)]
    assert messages, [str(w.message) for w in caught]
    assert f"{__file__}:{_region_line()} in forward" in messages[0], messages[0]
    assert "graph break" in messages[0] and "offload_modules" in messages[0]
    # Dynamo ran forward eagerly; a and b (inside the region) were compiled
    # as frames of their own and offload their tanh, c (after it) keeps it.
    tanh = {(e.decision, e.code, e.detail) for p in backend.plans for e in p.entries if e.op == "aten.tanh"}
    where = f"{__file__}:{_region_line()} in forward"
    region = detail(by=f"offload_region(enabled=True) at {where}")
    assert tanh == {("offload", Reason.MARKED, region), ("keep", Reason.NOT_MARKED, ())}, tanh
    model = RegionWithBreak()
    compiled = torch.compile(model, backend=backend)
    compiled(x).backward()
    runtime.reset_stats()
    compiled(x).backward()
    assert runtime.stats()["offload_calls"] == 2, runtime.stats()  # a's and b's tanh, not c's


class ThreeBreakBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([BreakInside() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.sum()


@pytest.mark.parametrize("buckets", [True, False], ids=["cache-buckets", "no-cache-buckets"])
@pytest.mark.parametrize("marked", ["blocks.0", "blocks.2"])
def test_graph_break_in_one_of_several_like_modules_offloads_only_the_marked_one(marked, buckets, monkeypatch):
    # The frames after the graph break are the same code for all three
    # blocks: compiled under one block's mark they must not serve the others
    # (marked first or last; with or without torch's cache buckets).
    monkeypatch.setattr(offload_pass.marking.mark_keeping, "CACHE_BUCKETS", buckets and offload_pass.marking.mark_keeping.CACHE_BUCKETS)
    x = torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        backend = assert_same_training(ThreeBreakBlocks(), lambda m: offload_pass.offload_modules(m, marked), (x,))
    offloaded = {(e.module, e.op) for p in backend.plans for e in p.entries if e.decision == "offload"}
    assert offloaded == {(marked, "aten.tanh")}, backend.plans
    model = ThreeBreakBlocks()
    offload_pass.offload_modules(model, marked)
    compiled = torch.compile(model, backend=backend)
    compiled(x).backward()
    runtime.reset_stats()
    compiled(x).backward()
    assert runtime.stats()["offload_calls"] == 1, runtime.stats()


def sin_of_tanh_then_break(h):
    u = torch.sin(torch.tanh(h))  # saves the tanh, inside this frame
    torch._dynamo.graph_break()
    return u * 2


class HelperBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return self.b(sin_of_tanh_then_break(self.a(x)))


def test_graph_break_in_a_helper_of_marked_and_unmarked_modules_warns():
    # The helper's frames are compiled first for the unmarked blocks, then
    # reused inside the marked one: Dynamo cannot tell the two apart, so the
    # backend must say so rather than silently keep what was marked.
    model = nn.Sequential(HelperBlock(), HelperBlock(), HelperBlock())
    offload_pass.offload_modules(model, "2")
    compiled = torch.compile(model, backend=offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(torch.randn(8, 16)).sum().backward()
    messages = [str(w.message) for w in caught if "cannot keep compiled frames apart" in str(w.message)]
    assert messages, [str(w.message) for w in caught]  # one per reused graph
    assert "compiled after a graph break outside any mark and now runs inside module 2" in messages[0], messages[0]
    assert "Mark every module that runs this code alike" in messages[0]


class LeavesRegionOpen(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = TanhSub()

    def forward(self, x):
        self.region = offload_pass.offload_region()  # OPEN_LINE
        self.region.__enter__()
        return self.inner(x)


def test_region_left_open_past_a_marked_module_is_an_error_naming_it():
    keeping = offload_pass.marking.mark_keeping
    bucket = keeping._get_bucket() if keeping.CACHE_BUCKETS else None
    model = nn.Sequential(LeavesRegionOpen())
    offload_pass.offload_modules(model, "0")
    with pytest.raises(RuntimeError, match=r"module 0 ended while the offload_region opened at .*test_reliability.py:\d+ in forward was still open"):
        model(torch.randn(4, 16))
    assert keeping.active_marks() == ()  # nothing leaks into later calls
    # The region was closed then, not when the garbage collector takes it:
    # its exit would put module 0's annotation (and cache bucket) back into
    # torch's state, and a later, unmarked model would trace under it.
    del model
    gc.collect()
    assert "custom" not in torch.fx.traceback.current_meta, torch.fx.traceback.current_meta
    assert (keeping._get_bucket() if keeping.CACHE_BUCKETS else None) == bucket


class Checkpointed(nn.Module):
    def __init__(self, policy):
        super().__init__()
        self.inner = make_decoder(layers=1, hidden=32, heads=4).layers[0]
        self.policy = policy

    def forward(self, x):
        kwargs = {"use_reentrant": False}
        if self.policy:
            kwargs["context_fn"] = functools.partial(
                cp.create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]
            )
        return cp.checkpoint(self.inner, x, **kwargs).pow(2).mean()


@pytest.mark.parametrize("policy", [False, True], ids=["full", "selective"])
def test_activation_checkpointing_around_marked_modules(policy):
    x = torch.randn(2, 16, 32)
    backend = assert_same_training(
        Checkpointed(policy), lambda m: offload_pass.offload_modules(m, "inner.mlp", "inner.attn"), (x,)
    )
    plan = backend.plans[-1]
    saved_mm = [e for e in plan.entries if e.op == "aten.mm"]
    if policy:  # mm outputs are saved (policy), so they can be offloaded
        assert saved_mm and any(e.decision == "offload" for e in saved_mm), plan
    else:  # everything inside is recomputed: nothing of it is saved
        assert not saved_mm, plan


def test_fullgraph_and_max_autotune_no_cudagraphs():
    x = torch.randn(2, 16, 32)
    assert_same_training(decoder(), ATTN_MLP, (x,), compile_kwargs={"fullgraph": True})
    torch._dynamo.reset()
    assert_same_training(decoder(), ATTN_MLP, (x,), steps=1, compile_kwargs={"mode": "max-autotune-no-cudagraphs"})


def test_reduce_overhead_is_refused_clearly():
    model = decoder()
    ATTN_MLP(model)
    compiled = torch.compile(model, backend=offload_pass.offload_backend, mode="reduce-overhead")
    with pytest.raises(Exception, match="does not support CUDA graphs"):
        compiled(torch.randn(2, 16, 32))


class _BrokenDecoder(nn.Module):
    """The decoder with a graph break after its first layer: two graphs, each planned on its own."""

    def __init__(self, model):
        super().__init__()
        self.layers, self.norm = model.layers, model.norm

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == 0:
                torch._dynamo.graph_break()
        return self.norm(x).float().pow(2).mean()


def test_host_memory_cap_keeps_on_device_with_one_warning():
    # Each graph's plan fits the limit (planning cuts a plan to it); the two
    # graphs' copies together do not: the runtime's cap keeps the rest on
    # the device, with one warning, and training is unchanged.
    x = torch.randn(2, 16, 32)
    free = assert_same_training(_BrokenDecoder(decoder()), ATTN_MLP, (x,), steps=1)
    per_graph = [p.offloaded_bytes for p in free.plans]
    assert len(per_graph) == 2 and all(per_graph), per_graph
    limit = max(per_graph)
    torch._dynamo.reset()
    runtime.reset_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capped = assert_same_training(_BrokenDecoder(decoder()), ATTN_MLP, (x,), steps=2, host_memory_limit=limit)
    assert [p.offloaded_bytes for p in capped.plans] == per_graph  # no plan was cut
    stats = runtime.stats()
    assert stats["fallback_calls"] > 0 and stats["offload_calls"] > 0
    messages = [str(w.message) for w in caught if "host memory cap" in str(w.message)]
    assert messages == [f"offload_pass: host memory cap reached (host_memory_limit={limit} bytes); "
                        "the tensor stays on device (training continues)"]


def test_pinned_allocation_failure_falls_back(monkeypatch):
    real = runtime.host_pool._host_like

    def failing(x, pin):
        raise RuntimeError("CUDA error: out of memory (simulated)")

    monkeypatch.setattr(runtime.host_pool, "_host_like", failing)
    monkeypatch.setattr(runtime.host_pool, "_page_locked", lambda nbytes, pin, device: failing(None, pin))
    # A host-pool buffer an earlier test left would still serve the copies.
    runtime.clear_host_pools()
    runtime.reset_stats()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert_same_training(decoder(), ATTN_MLP, (torch.randn(2, 16, 32),), steps=1)
    assert runtime.stats()["offload_calls"] == 0 and runtime.stats()["fallback_calls"] > 0
    monkeypatch.setattr(runtime.host_pool, "_host_like", real)
    runtime.clear_host_pools()  # forget the pool marked unavailable here


def random_case(seed):
    rng = random.Random(seed)
    layers = rng.randint(1, 3)
    heads = rng.choice([1, 2, 4])
    hidden = heads * rng.choice([4, 8])
    seq = rng.choice([3, 8, 13])
    dtype = rng.choice([torch.float32, torch.float64])
    names = [f"layers.{i}.{part}" for i in range(layers) for part in ("attn", "mlp", "attn_norm", "mlp_norm")]
    offload = rng.sample(names, rng.randint(1, len(names)))
    keep = rng.sample(names, rng.randint(0, 2))
    config = {"prefetch": rng.randint(0, 3), "max_inflight": rng.randint(1, 3)}
    return layers, heads, hidden, seq, dtype, offload, keep, config


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("OFFLOAD_PASS_RANDOM_DRAWS", "6"))))
def test_randomized_models_and_marks(seed):
    layers, heads, hidden, seq, dtype, offload, keep, config = random_case(seed)
    model = make_decoder(layers=layers, hidden=hidden, heads=heads, dtype=dtype, seed=seed)
    x = torch.randn(2, seq, hidden, dtype=dtype, generator=torch.Generator().manual_seed(seed))

    def mark(m):
        offload_pass.offload_modules(m, *offload)
        if keep:
            offload_pass.keep_modules(m, *keep)

    backend = assert_same_training(model, mark, (x,), **config)
    plan = backend.plans[-1]
    for e in plan.entries:
        inside_keep = any(e.module == k or e.module.startswith(k + ".") for k in keep)
        if inside_keep and e.decision == "offload":
            pytest.fail(f"seed {seed}: {e.name} of kept {e.module} was offloaded\n{plan}")


class WaitsInside(nn.Module):
    """Holds its forward open until told: another thread runs meanwhile."""

    def __init__(self, entered, leave):
        super().__init__()
        self.entered, self.leave = entered, leave

    def forward(self, x):
        self.entered.set()
        assert self.leave.wait(30)
        return torch.tanh(x)


def test_marks_of_one_thread_never_reach_another():
    # The mark stack and torch's annotation state are process-wide: a marked
    # module running in one thread must neither lend its mark to a graph
    # compiled in another (which would offload what that thread never
    # marked, or keep what it marked) nor let the other thread's marks in.
    keeping = offload_pass.marking.mark_keeping
    entered, leave = threading.Event(), threading.Event()
    model = nn.Sequential(WaitsInside(entered, leave))
    offload_pass.offload_modules(model, "0")
    errors = []

    def run():
        try:
            model(torch.randn(4, 16))
        except Exception as error:  # reported by the main thread
            errors.append(error)

    worker = threading.Thread(target=run, name="marked-worker")
    worker.start()
    try:
        assert entered.wait(30)
        assert keeping.active_marks() == () and keeping.active_mark_key() == ""
        annotation = repr(torch.fx.traceback.current_meta)  # the worker's module 0
        with pytest.raises(RuntimeError, match=r"the offload_region at .* started in thread 'MainThread' while module 0 runs in another thread.*one thread at a time"):
            with offload_pass.offload_region():
                pass
        other = nn.Sequential(TanhSub())
        offload_pass.offload_modules(other, "0")
        with pytest.raises(RuntimeError, match=r"the forward of module 0 started in thread 'MainThread' while module 0 runs"):
            other(torch.randn(4, 16))
        # Refused before annotating: the worker's annotation is untouched.
        assert repr(torch.fx.traceback.current_meta) == annotation
    finally:
        leave.set()
        worker.join(30)
    assert not errors, errors
    assert keeping.MARKS.owner is None and keeping.active_marks() == ()
    # Free again: this thread's marks run as before.
    with offload_pass.offload_region():
        assert [m.source.split("(")[0] for m in keeping.active_marks()] == ["offload_region"]


def test_the_pipeline_runner_skips_a_disabled_pass_by_name_and_logs_each_pass(caplog):
    # The one place that reads disabled_passes for the pipeline: a pass named
    # there is skipped (or its stand-in runs), a pass requiring it is
    # skipped too, and each pass that runs is logged at DEBUG with its
    # op-count change; the state names the passes that changed the graphs.
    import dataclasses

    import torch.fx as fx

    from offload_pass.config import OffloadConfig
    from offload_pass.pipeline.passes import Pass, PassContext, PassState, run_passes

    def graph(ops):
        g = fx.Graph()
        x = g.placeholder("x")
        for _ in range(ops):
            x = g.call_function(torch.relu, (x,))
        g.output(x)
        return fx.GraphModule({}, g)

    ran = []

    def make(state, ctx):
        ran.append("make")
        return dataclasses.replace(state, fw_gm=graph(1), bw_gm=graph(1))

    def grow(state, ctx):
        ran.append("grow")
        return dataclasses.replace(state, fw_gm=graph(3))

    def check(state, ctx):
        ran.append("check")
        return state

    def stand_in(state, ctx):
        ran.append("stand_in")
        return state

    def widen(state, ctx):
        # In place: the same graph objects, one op more in the backward.
        ran.append("widen")
        out = state.bw_gm.graph.output_node()
        with state.bw_gm.graph.inserting_before(out):
            out.args = (state.bw_gm.graph.call_function(torch.relu, out.args),)
        return state

    passes = (
        Pass("make", make), Pass("offload", grow, when_disabled=stand_in),
        Pass("invariants", check, requires=("offload",)), Pass("widen", widen), Pass("recompute", check),
    )
    ctx = PassContext(OffloadConfig(), None, (), {}, "graph 0", "", None, False)
    with caplog.at_level("DEBUG", logger="offload_pass"):
        state = run_passes(passes, PassState(), ctx)
    assert ran == ["make", "grow", "check", "widen", "check"] and state.changed_by == ("make", "offload", "widen")
    assert "graph 0 pass offload: " in caplog.text and "forward +2 <built-in method relu" in caplog.text
    assert "graph 0 pass widen: " in caplog.text
    assert "forward unchanged, backward +1 <built-in method relu" in caplog.text
    assert "graph 0 pass recompute: " in caplog.text and caplog.text.count("forward unchanged, backward unchanged") == 2
    ran.clear()
    off = dataclasses.replace(ctx, config=OffloadConfig(disabled_passes=("offload", "recompute")))
    state = run_passes(passes, PassState(), off)
    assert ran == ["make", "stand_in", "widen"] and state.changed_by == ("make", "widen")
