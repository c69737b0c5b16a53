"""backend.last_step(): one step over every graph that ran in it."""

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass.examples.models import make_decoder


class Broken(nn.Module):
    """A decoder whose loss is computed after a graph break, as Hugging Face's
    loss functions do: the step runs two graphs, and the last plan alone (the
    loss) offloads nothing."""

    def __init__(self):
        super().__init__()
        self.decoder = make_decoder(layers=2, hidden=32, heads=4)

    def forward(self, x):
        h = x
        for layer in self.decoder.layers:
            h = layer(h)
        torch._dynamo.graph_break()
        return self.decoder.norm(h).pow(2).mean()


def test_last_step_covers_every_graph_of_the_step():
    model = Broken()
    marked = offload_pass.offload_modules(model, "decoder.layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 8, 32)
    assert backend.last_step() is None
    for _ in range(3):
        compiled(x).backward()
    step = backend.last_step()
    assert step.step == 3
    assert len(backend.plans) == 2 and not backend.plans[-1].offloaded  # the loss graph
    assert [(plan.graph_id, calls) for plan, calls in step.graphs] == [("graph 0", 1), ("graph 1", 1)]
    layers = backend.plans[0]
    assert step.offloaded_bytes == layers.offloaded_bytes > 0
    assert step.offloaded_tensors == len(layers.offloaded)
    # Per module, by qualified name from the marked model's root.
    modules = {t.module for t in step.by_module()}
    assert modules and all(any(m.startswith(name) for name in marked) for m in modules), modules
    text = str(step)
    assert text.startswith(f"step 3: 2 graphs, offloaded {step.offloaded_tensors} saved tensors")
    assert "decoder.layers.0.mlp" in text and "per module:" in text


def test_a_graph_called_twice_in_a_step_counts_twice():
    layer = make_decoder(layers=1, hidden=32, heads=4).layers[0]
    offload_pass.offload_modules(layer, "mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(layer, backend=backend)
    x = torch.randn(2, 8, 32)
    (compiled(x).sum() + compiled(x).sum()).backward()  # two micro-batches, one backward
    step = backend.last_step()
    ((plan, calls),) = step.graphs
    assert calls == 2 and step.step == 1
    assert step.offloaded_bytes == 2 * plan.offloaded_bytes > 0


class EagerLoop(nn.Module):
    """Like Hugging Face's default MoE experts: a data-dependent loop
    (``nonzero``, ``tolist``). Dynamo breaks the graph there and compiles
    the loop's body for the rows hit, where the experts save nothing they
    produced (the ``tanh`` after them saves its own output); ``eager`` runs
    outside every compiled graph (``torch._dynamo.disable``)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.eager = Uncompiled()
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        h = self.eager(self.proj(x))
        hit = (h.sum(-1) > 0).nonzero()
        y = torch.zeros_like(h)
        for i in hit[:, 0].tolist():
            y[i] = self.experts[i % 3](h[i]).tanh()
        return self.out(y).pow(2).mean()


class Uncompiled(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    @torch._dynamo.disable
    def forward(self, x):
        return self.linear(x).sigmoid()


def test_a_marked_module_with_nothing_offloaded_is_named_once_with_why(recwarn):
    torch.manual_seed(0)
    model = EagerLoop()
    offload_pass.offload_modules(model, "experts", "eager", "out")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    for _ in range(2):
        compiled(torch.randn(6, 8)).backward()
    messages = sorted(str(w.message) for w in recwarn if "is marked for offload but nothing" in str(w.message))
    prefix = "offload_pass: module {} is marked for offload but nothing it saves was offloaded in step 1: "
    loop_graph = next(p.graph_id for p in backend.plans if "experts.0" in p.modules)
    assert messages == [
        prefix.format("eager") + "no graph of the step saved a tensor it produced, and none ran its ops: Dynamo ran "
        "its forward outside the compiled graphs (graph breaks inside it, such as a data-dependent loop; "
        "TORCH_LOGS=graph_breaks lists them)",
        prefix.format("experts") + f"it ran inside the compiled {loop_graph}, and the partitioner saved nothing it "
        "produced (what its backward reads, if anything, other modules produced)",
    ], messages
    assert not any(m.startswith("eager") for p in backend.plans for m in p.modules)
    # The module that did offload is not named.
    assert any(e.module == "out" and e.decision == "offload" for p in backend.plans for e in p.entries)


def test_a_marked_module_kept_for_a_reason_says_which():
    model = make_decoder(layers=1, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.0.mlp")
    backend = offload_pass.make_backend()  # min_bytes 1 MiB: every tensor is smaller
    with pytest.warns(RuntimeWarning, match=r"module layers\.0\.mlp is marked for offload but nothing it saves "
                                            r"was offloaded in step 1: its \d+ saved tensors were kept: \d+ below min_bytes "
                                            r"\(1048576: lower it with OffloadConfig\(min_bytes=\.\.\.\)\)") as caught:
        torch.compile(model, backend=backend)(torch.randn(2, 8, 32)).backward()
    assert {w.filename for w in caught if "marked for offload" in str(w.message)} == {__file__}  # the user's line


def test_calls_that_ran_plain_inductors_compile_are_reported_apart_with_nothing_offloaded():
    # mode="auto" runs plain Inductor's compile of a graph in place of its
    # plan on some warm-up calls (to measure the plan beside it): those
    # steps offloaded nothing, and the report says what ran.
    from offload_pass.reporting.step_report import StepTracker

    layer = make_decoder(layers=1, hidden=32, heads=4).layers[0]
    offload_pass.offload_modules(layer, "mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    torch.compile(layer, backend=backend)(torch.randn(2, 8, 32)).sum().backward()
    (plan,) = backend.plans
    assert plan.offloaded

    tracker = StepTracker()
    x = torch.randn(3, requires_grad=True)

    def call(plain):
        out = x * 2
        tracker.forward_called(0, out, [plan], plain=plain)
        return out

    call(plain=True).sum().backward()
    step = tracker.report([plan])
    assert step.graphs == () and step.plain_inductor == ((plan, 1),)
    assert step.offloaded_tensors == 0 and step.offloaded_bytes == 0
    assert str(step) == (
        "step 1: 1 graphs, offloaded 0 saved tensors (0 B)\n"
        "  graph 0: ran plain Inductor's compile of its graph, nothing offloaded (mode=auto measures the plan beside it)"
    )
    assert tracker.ran_alone(0)  # its peak is the graph's own (plain Inductor's)
    (call(plain=False).sum() + call(plain=True).sum()).backward()
    step = tracker.report([plan])
    assert step.graphs == ((plan, 1),) and step.plain_inductor == ((plan, 1),)
    assert step.offloaded_tensors == len(plan.offloaded)
    assert str(step).startswith(f"step 2: 1 graphs, offloaded {len(plan.offloaded)} saved tensors")
    assert not tracker.ran_alone(0)
    call(plain=False).sum().backward()
    assert tracker.report([plan]).plain_inductor == () and tracker.ran_alone(0)
