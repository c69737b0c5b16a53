"""Hugging Face ``Trainer`` with a marked model: mark, ``model.compile(backend=...)``
(``nn.Module.compile`` compiles the module in place, so Trainer trains, saves
and unwraps the model it was given), then hand the model to Trainer. Two
steps of a tiny Llama on the CPU: every graph was planned by our backend,
something was offloaded, and each step's loss equals plain Inductor's
(fp32; the optimizer steps between them)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate")

import offload_pass  # noqa: E402
from offload_pass import runtime  # noqa: E402

VOCAB, SEQ = 64, 16


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _dataset():
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(4):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        rows.append({"input_ids": ids, "labels": ids.clone()})
    return rows


def _train(backend, tmp_path) -> list[float]:
    """Two Trainer steps of the tiny Llama compiled with ``backend``: the
    loss logged at each step."""
    from transformers import Trainer, TrainingArguments

    torch._dynamo.reset()
    model = _llama()
    if backend != "inductor":
        offload_pass.offload_modules(model, "model.layers.*.self_attn", "model.layers.*.mlp")
    model.compile(backend=backend)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, learning_rate=1e-3,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0, dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_dataset())
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_trainer_runs_a_marked_model_compiled_with_our_backend(tmp_path):
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    runtime.reset_stats()
    losses = _train(backend, tmp_path / "offload")
    moved = runtime.stats()["offload_calls"]
    want = _train("inductor", tmp_path / "inductor")

    assert backend.plans, "Trainer's steps never reached the offload backend"
    assert any(plan.offloaded for plan in backend.plans), [str(p) for p in backend.plans]
    assert moved > 0
    assert len(losses) == len(want) == 2, (losses, want)
    assert losses == pytest.approx(want, rel=1e-5, abs=1e-6), (losses, want)
