"""Views rebuilt at the right offset, and the rewrite's invariant check.

The attention below is the case that gave a wrong gradient: Inductor's
pattern matcher turns it into SDPA, whose saved q / k / v are three views of
one ``addmm`` output that its replacement recorded at storage offset 0.
"""

import copy

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass import views as views_module
from offload_pass.pipeline import passes as backend_module
from offload_pass.rewriting.invariants import OffloadInvariantError, check_rewrite
from offload_pass.meta_keys import CHOSEN_KEY, CREATED_BY_KEY, REPLACES_KEY
from offload_pass.runtime import OPS


class Attn(nn.Module):
    def __init__(self, h=16, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)

    def forward(self, x):
        b, n, h = x.shape
        hd = h // self.heads
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, hd).unbind(2)
        q, k, v = offload_pass.mark_offload(q, k, v)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = ((q @ k.transpose(-1, -2)) / hd**0.5).softmax(-1) @ v
        return (x + self.proj(out.transpose(1, 2).reshape(b, n, h))).pow(2).mean()


def _train(backend):
    torch.manual_seed(5006)
    model = Attn()
    torch.manual_seed(1)
    x = torch.randn(2, 8, 16)
    torch._dynamo.reset()
    loss = torch.compile(model, backend=backend)(x)
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters()}


def test_sdpa_views_rebuilt_at_their_offsets():
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    loss, grads = _train(backend)
    want_loss, want = _train("inductor")
    assert torch.equal(loss, want_loss)
    for name in want:
        assert torch.equal(grads[name], want[name]), name
    plan = backend.plans[-1]
    # q, k and v leave as one copy of the addmm they view.
    assert sorted(plan.offloaded) == ["permute_default", "permute_default_1", "permute_default_2"], str(plan)
    assert [g.copy for g in plan.groups] == ["storage"], plan


def test_the_rewritten_modules_generate_their_code_when_first_run_or_read(monkeypatch):
    # mode="budget" rewrites every partition it plans and keeps one: the
    # rewrite leaves the code to the module, which generates it from the
    # rewritten graph when it is run or its code read (the gradients of
    # such modules: the test above).
    captured = {}

    def capture(fw_gm, bw_gm, graph_id="graph"):
        check_rewrite(fw_gm, bw_gm, graph_id)
        captured["graphs"] = (fw_gm, bw_gm)
        captured["pending"] = [type(gm)._needs_recompile() for gm in (fw_gm, bw_gm)]

    monkeypatch.setattr(backend_module, "check_rewrite", capture)
    _train(offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False))
    assert captured["pending"] == [True, True]
    fw, bw = captured["graphs"]
    assert "torch.ops.offload_pass.offload.default(" in fw.code, fw.code
    assert "torch.ops.offload_pass.reload.default(" in bw.code, bw.code
    assert [type(gm)._needs_recompile() for gm in (fw, bw)] == [False, False]


@pytest.fixture(scope="module")
def rewritten():
    """The forward and backward graphs of ``Attn`` as the rewrite left them
    (compiled once; each test edits its own copy)."""
    captured = {}

    def capture(fw_gm, bw_gm, graph_id="graph"):
        check_rewrite(fw_gm, bw_gm, graph_id)
        captured["graphs"] = (copy.deepcopy(fw_gm), copy.deepcopy(bw_gm))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend_module, "check_rewrite", capture)
        _train(offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False))
    return captured["graphs"]


@pytest.fixture
def graphs(rewritten):
    return copy.deepcopy(rewritten)


def test_check_catches_views_rebuilt_from_wrong_fake_values(monkeypatch):
    # Without re-tracing the views, the rebuilt k would start at offset 0.
    monkeypatch.setattr(views_module, "retrace_view_vals", lambda graph: [])
    with pytest.raises(Exception, match=r"permute_default_1_view rebuilds permute_default_1 as .*storage "
                                        r"offset 0.* but it was saved as .*storage offset 16"):
        _train(offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False))


def _one(graph, target):
    (node,) = [n for n in graph.nodes if n.target is target]
    return node


def test_check_catches_a_wrong_view_offset(graphs):
    fw, bw = graphs
    view = next(n for n in bw.graph.nodes if n.meta.get(REPLACES_KEY) == "permute_default_2")
    view.args = (*view.args[:3], 0)
    with pytest.raises(OffloadInvariantError, match="permute_default_2_view rebuilds permute_default_2"):
        check_rewrite(fw, bw)


def test_check_catches_a_consumer_before_the_wait(graphs):
    fw, bw = graphs
    wait = _one(bw.graph, OPS["wait_reload"])
    consumer = max(
        (u for v in _one(bw.graph, OPS["reload"]).users for u in v.users if v is not wait),
        key=list(bw.graph.nodes).index,
    )
    consumer.append(wait)  # the wait now comes after one of the consumers
    with pytest.raises(OffloadInvariantError, match=r"reads addmm_reload before wait_reload"):
        check_rewrite(fw, bw)


def test_check_catches_a_missing_wait(graphs):
    fw, bw = graphs
    bw.graph.erase_node(_one(bw.graph, OPS["wait_reload"]))
    with pytest.raises(OffloadInvariantError, match="reload addmm_reload is never waited on"):
        check_rewrite(fw, bw)


def test_check_catches_a_release_before_the_last_read(graphs):
    fw, bw = graphs
    release = _one(fw.graph, OPS["release"])
    host = _one(fw.graph, OPS["offload"])
    host.append(release)  # right after the copy is issued, before q/k/v are read
    with pytest.raises(OffloadInvariantError, match=r"release_default frees addmm before view_1 reads its storage"):
        check_rewrite(fw, bw)


def test_check_catches_a_release_before_its_copy(graphs):
    fw, bw = graphs
    release = _one(fw.graph, OPS["release"])
    host = _one(fw.graph, OPS["offload"])
    host.prepend(release)
    with pytest.raises(OffloadInvariantError, match="frees addmm before its copy addmm_host is issued"):
        check_rewrite(fw, bw)


def test_check_catches_overlapping_host_slots(graphs):
    fw, bw = graphs
    host = _one(fw.graph, OPS["offload"])
    source = host.args[0]
    # A second copy of the same storage into the same slot, released after
    # the last read like the first.
    with fw.graph.inserting_after(_one(fw.graph, OPS["release"])):
        second = fw.graph.call_function(OPS["offload"], (source, *host.args[1:]))
        second.meta[CREATED_BY_KEY] = "rewrite"
    with fw.graph.inserting_after(second):
        fw.graph.call_function(OPS["release"], (source, second)).meta[CREATED_BY_KEY] = "rewrite"
    with pytest.raises(OffloadInvariantError, match=r"host slots of addmm_host \[0, 4096\) and .* overlap"):
        check_rewrite(fw, bw)


def test_check_catches_a_slot_too_small(graphs):
    fw, bw = graphs
    host = _one(fw.graph, OPS["offload"])
    host.args = (*host.args[:6], 64)
    with pytest.raises(OffloadInvariantError, match=r"addmm_host: host slot \[0, 64\) .* cannot hold 3072 bytes"):
        check_rewrite(fw, bw)


def test_check_catches_a_host_copy_read_directly(graphs):
    fw, bw = graphs
    reload = _one(bw.graph, OPS["reload"])
    view = next(u for u in reload.users if u.meta.get(REPLACES_KEY))
    view.args = (reload.args[0], *view.args[1:])
    with pytest.raises(OffloadInvariantError, match=r"reads the host copy .* instead of its reload"):
        check_rewrite(fw, bw)


def test_check_catches_a_chosen_offload_never_copied(graphs):
    fw, bw = graphs
    offloaded = {n for n in fw.graph.nodes if n.meta.get(CHOSEN_KEY) == "offload"}
    assert offloaded, "the plan offloads nothing: this check would not be exercised"
    check_rewrite(fw, bw)
    host = _one(fw.graph, OPS["offload"])
    loss = next(n for n in reversed(fw.graph.nodes) if n.op == "call_function" and n not in offloaded
                and n.target is not OPS["release"] and n is not host)
    loss.meta[CHOSEN_KEY] = "offload"
    with pytest.raises(OffloadInvariantError, match=f"the plan offloads {loss.name}, but no offload copies"):
        check_rewrite(fw, bw)


def test_check_can_be_disabled_by_name(monkeypatch):
    monkeypatch.setattr(views_module, "retrace_view_vals", lambda graph: [])
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, disabled_passes=("invariants",))
    loss, grads = _train(backend)  # the wrong offsets run unchecked: the gradient differs
    _, want = _train("inductor")
    assert not torch.equal(grads["qkv.weight"], want["qkv.weight"])
