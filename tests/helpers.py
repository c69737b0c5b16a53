"""Shared test helpers: compile a model with and without offload and compare."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

import offload_pass

# The devices each device-parametrized test runs on.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@contextlib.contextmanager
def same_kernel_configs():
    """Inductor picks some kernels' configs by timing them on the GPU
    (reductions: how the sum is split): on an H100 two compiles of one graph
    gave fp32 losses 1 ulp apart, with and without offload. Deterministic
    mode picks without timing. PyTorch's deterministic algorithms too: some
    kernels add in thread order otherwise (the CPU's index_put with
    accumulate, an embedding's gradient: tests/test_dropout.py)."""
    config = torch._inductor.config
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with config.patch({"deterministic": True} if hasattr(config, "deterministic") else {}):
            yield
    finally:
        torch.use_deterministic_algorithms(before)


def decoder_steps_on_device(backend, steps, layers=2):
    """``steps`` training steps of a small decoder on CUDA (the same weights
    and input every time), compiled with ``backend``: each step's gradients,
    the exact (fp64, eager) gradients, and per step the plans the step
    report counts (or ran plain Inductor for; empty for a plain backend)."""
    from offload_pass.examples.models import make_decoder

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = make_decoder(layers=layers, hidden=256, heads=4).cuda()
    x = torch.randn(4, 512, 256, generator=torch.Generator().manual_seed(1)).cuda()
    exact = copy.deepcopy(model).double()
    exact(x.double()).backward()
    compiled = torch.compile(model, backend=backend)
    grads, ran = [], []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        compiled(x).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        if isinstance(backend, offload_pass.OffloadBackend):
            report = backend.last_step()
            ran.append([plan for plan, _ in (*report.graphs, *report.plain_inductor)])
    return grads, {n: p.grad for n, p in exact.named_parameters()}, ran


def default_step(compiled, inputs):
    loss = compiled(*inputs)
    loss.backward()
    return loss


def train_steps(model, backend, inputs, steps=2, step=default_step, compile_kwargs=None):
    """Run ``steps`` training steps; return losses and gradients of each step."""
    compiled = torch.compile(model, backend=backend, **(compile_kwargs or {}))
    history = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        loss = step(compiled, inputs)
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        history.append((loss.detach().clone(), grads))
    return history


# torch 2.11's meta function of CPU flash attention calls a float64 query's
# logsumexp float32 (the kernel returns float64), and Inductor's backward then
# fails with this message, offload or not (pytorch/pytorch#185539, fixed
# after 2.11). Checked on an H100 machine: plain Inductor fails on exactly the
# draws that failed here.
_PYTORCH_185539 = "expected scalar type Double but found Float"


def _skip_if_plain_inductor_fails_alike(error, reference, inputs, steps, step, compile_kwargs):
    """The offloaded run raised ``error``: if it is PyTorch's known float64
    attention bug and plain Inductor fails on the same model with the same
    message, there is no reference to compare with: skip, saying why."""
    if _PYTORCH_185539 not in str(error):
        return
    torch._dynamo.reset()
    try:
        train_steps(reference, "inductor", inputs, steps, step, compile_kwargs)
    except RuntimeError as reference_error:
        if _PYTORCH_185539 in str(reference_error):
            pytest.skip(
                f"plain Inductor fails on this model too on torch {torch.__version__} "
                f"(pytorch/pytorch#185539: {_PYTORCH_185539})"
            )


def assert_same_training(
    model, mark, inputs, steps=2, atol=1e-6, rtol=1e-5, step=default_step, compile_kwargs=None, **config
):
    """Compile ``model`` with marks + offload backend and an unmarked copy with
    plain inductor; losses and grads must match at every step. Returns the backend."""
    reference = copy.deepcopy(model)
    mark(model)
    backend = offload_pass.make_backend(keep_graphs=True, **({"min_bytes": 0, "keep_if_no_gain": False} | config))
    try:
        got = train_steps(model, backend, inputs, steps, step, compile_kwargs)
    except RuntimeError as error:
        _skip_if_plain_inductor_fails_alike(error, reference, inputs, steps, step, compile_kwargs)
        raise
    torch._dynamo.reset()
    want = train_steps(reference, "inductor", inputs, steps, step, compile_kwargs)
    # A check that cannot fail is no check: the reference gradients must be
    # far above the tolerance (a loss that is constant in the activations
    # would make every gradient ~0 and every comparison pass).
    largest = max((g.abs().max().item() for _, grads in want for g in grads.values()), default=0.0)
    assert largest > 100 * atol, f"reference gradients are all below {100 * atol:g} (largest {largest:g})"
    for step, ((l1, g1), (l2, g2)) in enumerate(zip(got, want)):
        torch.testing.assert_close(l1, l2, atol=atol, rtol=rtol, msg=lambda m: f"loss, step {step}: {m}")
        assert g1.keys() == g2.keys()
        for name in g1:
            torch.testing.assert_close(
                g1[name], g2[name], atol=atol, rtol=rtol, msg=lambda m: f"grad {name}, step {step}: {m}"
            )
    return backend


class TwoBlockNet(torch.nn.Module):
    """A marked-model test's model: a block (``blk``) and a head (``out``), its loss the output's square sum."""

    def __init__(self):
        super().__init__()
        self.blk = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16))
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.out(self.blk(x)).pow(2).sum()
