"""Dropout: the masks a training forward draws are saved activations like any
other (bool tensors), offloaded with their module and reloaded for the
backward; and where mode="budget" recomputes, the masks must not be drawn
again. Either way the offloaded step must draw the same masks as plain
Inductor and give its loss and gradients bit for bit.

The model is a tiny Hugging Face BERT (transformers' defaults keep dropout
on: 0.1 on the hidden states and the attention probabilities), fp32, on the
CPU and, where there is one, the GPU.

Why deterministic kernels (``helpers.same_kernel_configs``): BERT's
token-type embedding gradient sums every position into one row, and the CPU
kernel that does it (index_put with accumulate) adds in thread order: plain
Inductor differs from itself there by ~3e-8 from run to run (transformers
5.17, torch 2.13). On the GPU, Inductor also picks how some reductions are
split by timing them, so two compiles could add in other orders.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

transformers = pytest.importorskip("transformers")

import offload_pass  # noqa: E402

from offload_pass.enums import Decision  # noqa: E402

from helpers import DEVICES  # noqa: E402
from helpers import same_kernel_configs, train_steps  # noqa: E402

LAYERS, VOCAB = 2, 64
STEPS = 2
SEED = 100
# One batch for both tests, long enough that activations outweigh the
# weights (the budget test needs that), so plain Inductor's reference is
# compiled and run once per device (``reference``); both tests on one xdist
# worker, which holds it.
BATCH, SEQ = 16, 64
pytestmark = pytest.mark.xdist_group("bert_dropout")
# A dropout's mask in the joint graph: rand > p, a bool tensor.
MASK_OP = "aten.gt"
DROPOUTS = sorted(
    ["bert.embeddings.dropout"]
    + [f"bert.encoder.layer.{i}.{m}" for i in range(LAYERS) for m in ("attention.self", "attention.output.dropout", "output.dropout")]
)


@pytest.fixture(autouse=True)
def _deterministic():
    with same_kernel_configs():
        yield


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def build_bert(device: str, dropout: float = 0.1) -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(
        num_hidden_layers=LAYERS, hidden_size=32, num_attention_heads=4, intermediate_size=128,
        vocab_size=VOCAB, max_position_embeddings=64,
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
    )).to(device)


def inputs(batch: int, seq: int, device: str) -> dict:
    ids = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1)).to(device)
    return {"input_ids": ids, "labels": ids.clone()}


def train(model: torch.nn.Module, backend, batch: dict) -> list:
    """``train_steps``' (loss, grads) of each step; step i draws its masks
    from seed SEED + i, in both compiles alike."""
    seeds = itertools.count(SEED)

    def seeded_step(compiled, batch):
        torch.manual_seed(next(seeds))
        loss = compiled(**batch).loss
        loss.backward()
        return loss

    history = train_steps(model, backend, batch, STEPS, seeded_step)
    torch._dynamo.reset()
    return history


_REFERENCES: dict[str, list] = {}


def reference(device: str) -> list:
    """Plain Inductor's steps on the tests' batch: compiled once per device."""
    if device not in _REFERENCES:
        _REFERENCES[device] = train(build_bert(device), "inductor", inputs(BATCH, SEQ, device))
    return _REFERENCES[device]


def assert_same(got: list, want: list) -> None:
    for step, ((l1, g1), (l2, g2)) in enumerate(zip(got, want)):
        assert torch.equal(l1, l2), f"loss, step {step}: {l1.item()} != {l2.item()}"
        differ = {n: (g1[n] - g2[n]).abs().max().item() for n in g2 if not torch.equal(g1[n], g2[n])}
        assert not differ, f"step {step}: gradients not bit-identical (max abs diff per parameter): {differ}"


def test_dropout_masks_are_offloaded_and_drawn_alike(device):
    batch = inputs(BATCH, SEQ, device)
    want = reference(device)
    # Dropout is live: the steps draw other masks, so their losses differ
    # (a comparison of masks that are never drawn would compare nothing).
    assert not torch.equal(want[0][0], want[1][0])

    model = build_bert(device)
    marked = offload_pass.offload_modules(model, "bert.encoder.layer.*.attention", "bert.encoder.layer.*.intermediate")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    got = train(model, backend, batch)
    assert_same(got, want)

    (plan,) = backend.plans
    # Every tensor offloaded is named by a module inside a marked one, those
    # the partitioner moved from the backward into the forward too (the layer
    # norms' rstd / N: named by their forward op's module).
    stray = [
        (e.name, e.module) for e in plan.entries
        if e.decision == Decision.OFFLOAD and not any(e.module == m or e.module.startswith(m + ".") for m in marked)
    ]
    assert not stray, str(plan)
    masks = {e.module: e.decision for e in plan.entries if e.op == MASK_OP}
    # The attention probabilities' mask and the attention output's are the
    # marked modules'; the embeddings' and each layer's output's are not.
    assert masks == {
        **{f"bert.encoder.layer.{i}.attention.self": Decision.OFFLOAD for i in range(LAYERS)},
        **{f"bert.encoder.layer.{i}.attention.output.dropout": Decision.OFFLOAD for i in range(LAYERS)},
        **{f"bert.encoder.layer.{i}.output.dropout": Decision.KEEP for i in range(LAYERS)},
        "bert.embeddings.dropout": Decision.KEEP,
    }, str(plan)


def test_budget_recomputes_around_dropout_without_drawing_masks_again(device):
    # With only the attention's scores marked, offload alone cannot reach
    # half the peak.
    batch = inputs(BATCH, SEQ, device)
    want = reference(device)

    model = build_bert(device)
    offload_pass.offload_modules(model, "bert.encoder.layer.*.attention.self")
    backend = offload_pass.make_backend(min_bytes=0, mode="budget", memory_budget=0.5)
    got = train(model, backend, batch)
    assert_same(got, want)

    (plan,) = backend.plans
    decisions = Counter(e.decision for e in plan.entries)
    assert decisions[Decision.RECOMPUTE] and decisions[Decision.OFFLOAD], str(plan)
    # The partitioner recomputes around the masks, never the draws: every
    # mask is saved (kept or offloaded), one per dropout.
    masks = [e for e in plan.entries if e.op == MASK_OP]
    assert sorted(e.module for e in masks) == DROPOUTS, str(plan)
    assert all(e.decision != Decision.RECOMPUTE for e in masks), str(plan)
