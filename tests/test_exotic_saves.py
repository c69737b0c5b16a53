"""Saved tensors that are not plain: conjugate views of complex parameters,
views of another dtype than their storage. Each is offloaded exactly or kept
with a reason; gradients match plain Inductor bit for bit."""

import torch
import torch.nn as nn

import offload_pass

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
    decisions = {e.name: (e.decision, e.reason) for e in plan.entries if e.op != "placeholder"}
    lazy = "conjugate or negated view (lazy bit): the copy ops cannot take one"
    assert decisions == {
        "_conj": ("keep", lazy),
        "_conj_4": ("keep", lazy),
        "select": ("offload", "offloaded by module <root>"),
        "addmm": ("offload", "offloaded by module <root>"),
    }, plan


class RealView(nn.Module):
    """``view_as_real`` of a complex product saved for backward: a float32
    view of a complex storage (copied as itself, never rebuilt from the owner)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        parts = torch.view_as_real(torch.complex(self.a(x), self.b(x)) * (1 + 2j))
        return (parts[..., 0].sigmoid() * parts[..., 1].tanh()).sum()


def test_view_of_another_dtype_offloaded_exactly():
    torch.manual_seed(0)
    backend = assert_same_training(
        RealView(), lambda m: offload_pass.offload_modules(m, m), (torch.randn(4, 8),), atol=0, rtol=0
    )
    plan = backend.plans[-1]
    assert plan.offloaded == ["view_as_real"], plan
    assert plan.entry("view_as_real").dtype == "float32" and plan.entry("view_as_real").op == "aten.mul"
