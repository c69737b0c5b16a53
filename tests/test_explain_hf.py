"""python -m offload_pass.examples.explain on a Hugging Face model: the loss
is taken from the ``ModelOutput`` it returns, the inputs passed as keywords."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import offload_pass  # noqa: E402
from offload_pass.examples import explain  # noqa: E402


def build_llama():
    """A tiny Llama with its MLPs marked, and keyword inputs with labels."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, vocab_size=64, max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    offload_pass.offload_modules(model, "model.layers.*.mlp")
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids, "labels": ids}


def test_explain_hf_model(capsys):
    assert explain.main(["test_explain_hf:build_llama", "--graphs", "none"]) == 0
    out = capsys.readouterr().out
    assert "offload plan graph 0" in out
    assert "model.layers.0.mlp" in out, out


def test_loss_of_every_output_shape():
    from transformers.modeling_outputs import CausalLMOutput

    t = torch.ones(2, 3)
    assert explain.loss_of(CausalLMOutput(loss=torch.tensor(2.0), logits=t)).item() == 2.0
    assert explain.loss_of(CausalLMOutput(logits=t)).item() == 6.0  # no loss: the first tensor, summed
    assert explain.loss_of({"logits": t, "aux": 5 * t}).item() == 6.0
    assert explain.loss_of((t, 2 * t, None)).item() == 18.0
    assert explain.loss_of(t).item() == 6.0
    assert explain.loss_of(torch.tensor(3.0)).item() == 3.0
    with pytest.raises(SystemExit, match="no tensor to take a loss from"):
        explain.loss_of({"n": 1})
