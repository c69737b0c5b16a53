"""Shared test helpers: compile a model with and without offload and compare."""

from __future__ import annotations

import copy

import torch

import offload_pass


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


def assert_same_training(
    model, mark, inputs, steps=2, atol=1e-6, rtol=1e-5, step=default_step, compile_kwargs=None, **config
):
    """Compile ``model`` with marks + offload backend and an unmarked copy with
    plain inductor; losses and grads must match at every step. Returns the backend."""
    reference = copy.deepcopy(model)
    mark(model)
    backend = offload_pass.make_backend(keep_graphs=True, **({"min_bytes": 0, "keep_if_no_gain": False} | config))
    got = train_steps(model, backend, inputs, steps, step, compile_kwargs)
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
