"""One lifetime per copy (planning/lifetimes.py), checked against the graphs
it was computed from, and the pure parts on plain numbers."""

from __future__ import annotations

import torch
import torch.nn as nn

import offload_pass
from offload_pass.pipeline import passes as backend_module
from offload_pass.planning.lifetimes import CopyLifetime, copy_lifetimes, ideal_live
from offload_pass.views import storage_root


class Block(nn.Module):
    """Views of one storage saved at different offsets (q, k, v of one
    matmul), a pointwise save and a matmul save, used at different depths."""

    def __init__(self, h=16, heads=4):
        super().__init__()
        self.heads, self.qkv, self.up, self.down = heads, nn.Linear(h, 3 * h), nn.Linear(h, 2 * h), nn.Linear(2 * h, h)

    def forward(self, x):
        b, n, h = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, h // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        a = ((q.sin() @ k.transpose(-1, -2)).softmax(-1) @ v).transpose(1, 2).reshape(b, n, h)
        return self.down(torch.relu(self.up(x + a))).pow(2).mean()


def _compiled_lifetimes():
    captured = []

    def capture(fw_gm, bw_gm, saved, groups):
        lifetimes = copy_lifetimes(fw_gm, bw_gm, saved, groups)
        # Snapshots: the rewrite edits both graphs afterwards.
        snapshot = [[(n, n.op, list(n.all_input_nodes)) for n in gm.graph.nodes] for gm in (fw_gm, bw_gm)]
        captured.append((*snapshot, groups, lifetimes))
        return lifetimes

    torch._dynamo.reset()
    original = backend_module.copy_lifetimes
    backend_module.copy_lifetimes = capture
    try:
        torch.manual_seed(0)
        model = nn.Sequential(Block())
        offload_pass.offload_modules(model, "0")
        torch.compile(model, backend=offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False))(
            torch.randn(2, 8, 16)
        ).backward()
    finally:
        backend_module.copy_lifetimes = original
        torch._dynamo.reset()
    (graphs,) = captured
    return graphs


def test_lifetimes_match_the_graphs_they_come_from():
    fw_nodes, bw_nodes, groups, lifetimes = _compiled_lifetimes()
    assert len(groups) >= 3 and set(lifetimes) == {g.storage for g in groups}
    fw_points = [(n, inputs) for n, op, inputs in fw_nodes if op != "output"]
    bw_points = [(n, inputs) for n, op, inputs in bw_nodes if op != "output"]
    for group in groups:
        lt = lifetimes[group.storage]
        assert (lt.forward_points, lt.backward_points) == (len(fw_points), len(bw_points))
        root = storage_root(next(n for n, _ in fw_points if n.name == group.members[0]))[0]
        assert fw_points[lt.produced][0] is root
        # The last forward point reading any alias of the storage (the output aside).
        readers = [i for i, (n, inputs) in enumerate(fw_points) if any(storage_root(a)[0] is root for a in inputs)]
        assert lt.last_forward_use == max([lt.produced, *readers])
        # The first backward point reading any member.
        members = set(group.members)
        first = [i for i, (n, op, inputs) in enumerate(bw_nodes)
                 if any(a.name in members and a.op == "placeholder" for a in inputs)]
        assert lt.first_backward_use == (min(first) if first else None)
        assert lt.exact and lt.nbytes == group.nbytes > 0


def _lifetime(nbytes, last_forward_use, first_backward_use, forward_points=4, backward_points=4):
    return CopyLifetime("s", nbytes, True, 0, last_forward_use, first_backward_use, forward_points, backward_points)


def test_off_device_runs_from_after_the_last_forward_use_to_the_first_backward_use():
    assert _lifetime(8, 1, 2).off_device == (2, 6)
    assert _lifetime(8, 3, None).off_device == (4, 8)  # never read in backward: to the end
    assert _lifetime(8, 1, 0).off_device == (2, 4)


def test_ideal_live_takes_each_copy_off_over_its_points_only():
    live = [10, 20, 30, 40, 50, 60, 70, 80]
    got = ideal_live(live, [_lifetime(5, 1, 2), _lifetime(1, 3, None)])
    assert got == [10, 20, 25, 35, 44, 54, 69, 79]
    assert live == [10, 20, 30, 40, 50, 60, 70, 80]  # not modified
    # Symbolic sizes (exact=False): counted off nowhere, as the no-gain trim does.
    guess = CopyLifetime("s", 5, False, 0, 1, 2, 4, 4)
    assert ideal_live(live, [guess]) == live


def test_first_use_of_members():
    lt = CopyLifetime("s", 8, True, 0, 1, 2, 4, 4, (("a", 5), ("b", 2), ("c", None)))
    assert lt.first_use_of(["a"]) == 5 and lt.first_use_of(["a", "b"]) == 2 and lt.first_use_of(["c"]) is None
