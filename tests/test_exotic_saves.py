"""Saved tensors that are not plain: conjugate views of complex parameters,
views of another dtype than their storage. Each is offloaded exactly or kept
with a reason; gradients match plain Inductor bit for bit."""

import re
import warnings

import pytest

import torch
import torch.nn as nn

import offload_pass
from offload_pass.planning.reasons import Reason, detail

from helpers import assert_same_training


class ComplexWeight(nn.Module):
    """Autograd saves ``aten._conj`` views for the complex matmul, and a
    ``view_as_real`` select (float32 view of a complex storage)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8, dtype=torch.complex64))
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        y = x.to(torch.complex64) @ self.w
        return self.out((y * y.conj()).real).pow(2).mean()


def test_complex_parameter_fully_marked():
    torch.manual_seed(0)
    backend = assert_same_training(
        ComplexWeight(), lambda m: offload_pass.offload_modules(m, m), (torch.randn(4, 8),), atol=0, rtol=0
    )
    plan = backend.plans[-1]
    decisions = {e.name: (e.decision, e.code, e.detail) for e in plan.entries if e.op != "placeholder"}
    root = detail(by="module <root>")
    assert decisions == {
        "_conj": ("keep", Reason.LAZY_BIT, ()),
        "_conj_4": ("keep", Reason.LAZY_BIT, ()),
        "select": ("offload", Reason.MARKED, root),
        "addmm": ("offload", Reason.MARKED, root),
    }, plan


class RealView(nn.Module):
    """``view_as_real`` of a complex product saved for backward: a float32
    view of a complex storage (copied as itself, never rebuilt from the owner)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        # complex * complex tensor (torch 2.11's Inductor cannot lower a complex scalar)
        parts = torch.view_as_real(torch.complex(a, b) * torch.complex(b, a))
        return (parts[..., 0].sigmoid() * parts[..., 1].tanh()).sum()


def test_view_of_another_dtype_offloaded_exactly():
    torch.manual_seed(0)
    backend = assert_same_training(
        RealView(), lambda m: offload_pass.offload_modules(m, m), (torch.randn(4, 8),), atol=0, rtol=0
    )
    plan = backend.plans[-1]
    assert plan.offloaded == ["view_as_real"], plan
    assert plan.entry("view_as_real").dtype == "float32" and plan.entry("view_as_real").op == "aten.mul"


class OffsetView(nn.Module):
    """A view one element into its storage, saved and offloaded alone: its
    reload starts one element into a fresh storage too, so kernels that read
    it see the same address alignment as without offload (MKL and vectorized
    loops may round otherwise: a gradient one ulp off, found by
    test_random_views.py, seed 488)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 9)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        tail = offload_pass.mark_offload(self.a(x)[:, 1:])
        return (tail @ self.b.weight).pow(2).sum()  # the weight gradient needs the view itself


def test_reload_keeps_the_alignment_of_a_view():
    torch.manual_seed(0)
    backend = assert_same_training(OffsetView(), lambda m: None, (torch.randn(4, 8),), atol=0, rtol=0)
    backward = backend.records[-1].graphs.backward
    assert re.search(r"= offload_pass\.reload\(\w+, cpu, 1\)", backward), backward


class ExpandedKeys(nn.Module):
    """Grouped-query attention: one key/value head expanded (stride 0) to the
    query heads and handed to SDPA, which saves the expanded keys themselves
    (the shape of test_random_views.py's seed 3096, block 2)."""

    def __init__(self, hidden=8, heads=2):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, self.head_dim)
        self.v = nn.Linear(hidden, self.head_dim)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = (t.view(b, n, 1, self.head_dim).transpose(1, 2) for t in (self.k(x), self.v(x)))
        k = k * torch.sigmoid(k)
        k, v = (t[:, :, None].expand(b, 1, self.heads, n, self.head_dim).reshape(b, self.heads, n, self.head_dim)
                for t in (k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).tanh().sum()


def test_expanded_view_offloaded_exactly():
    # The copy ops cannot write a tensor whose elements share memory element
    # by element: each copy of an expanded view moves its extent as one block
    # (test_random_views.py, seed 3096, failed with "more than one element of
    # the written-to tensor refers to a single memory location").
    torch.manual_seed(0)
    backend = assert_same_training(
        ExpandedKeys(), lambda m: offload_pass.offload_modules(m, m), (torch.randn(1, 5, 8),), atol=0, rtol=0
    )
    plan = backend.plans[-1]
    assert sorted(plan.offloaded) == ["addmm_1", "addmm_2", "getitem", "getitem_1", "permute_1", "view_9"], plan
    assert plan.entry("view_9").shape == (1, 2, 5, 4) and plan.entry("view_9").op == "aten.mul", plan


def test_runtime_copies_keep_an_expanded_layout():
    from offload_pass import runtime

    base = torch.randn(3, 1, 4)
    x = base.expand(3, 5, 4)
    host = runtime.offload(x, pin_memory=False)
    back = runtime.reload(host, x.device)
    assert host.stride() == back.stride() == x.stride() and torch.equal(back, x)
    kept = runtime.ops._stay_on_device(x, "test")
    assert kept.stride() == x.stride() and torch.equal(kept, x)


def test_release_refuses_a_host_tensor_no_offload_returned():
    # Inductor once copied a host copy between offload and release (a source
    # laid out otherwise than its fake value): on a GPU the release would not
    # wait for the copy-out, and a CPU kernel could read the host buffer early.
    from offload_pass import runtime

    x = torch.randn(4, 4)
    host = runtime.offload(x, pin_memory=False)
    with pytest.raises(RuntimeError, match="no offload call returned"):
        runtime.release(x, host.clone())
    runtime.release(x, host)  # the tensor offload returned: accepted once
    with pytest.raises(RuntimeError, match="no offload call returned"):
        runtime.release(x, host)


class _SavedIsTheGradient(torch.autograd.Function):
    """Backward returns the saved tensor as the gradient: in the backward
    graph it is read by the output node alone."""

    @staticmethod
    def forward(ctx, x):
        y = x * 2
        ctx.save_for_backward(y)
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y


class _ReturnsSaved(nn.Module):
    def forward(self, x):
        return _SavedIsTheGradient.apply(x.sin()).sum()


def test_a_copy_read_only_by_the_backward_output_is_reloaded():
    # The cost schedule once had no reload point for it (KeyError 'mul_2').
    def grad(backend):
        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(64, 64, requires_grad=True)
        model = nn.Sequential(_ReturnsSaved())
        offload_pass.offload_modules(model, "0")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # marks under plain Inductor: said once, expected here
            torch.compile(model, backend=backend)(x).backward()
        return x.grad

    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    got = grad(backend)
    assert backend.plans[-1].offloaded == ["mul_2"]
    assert list(backend.plans[-1].reload_before.values()) == ["output"]
    assert torch.equal(got, grad("inductor"))
