"""Small reference models for the demo, the tests and the benchmarks.

Takes: sizes. Gives: a pre-norm decoder stack (attention through
``scaled_dot_product_attention`` + GELU MLP) whose layers are named
``layers.N.attn`` / ``layers.N.mlp``, the names the markers' examples use;
a mixture-of-experts stack; and ``llama3_8b_shape``, a Hugging Face
``LlamaForCausalLM`` of Llama-3-8B's shape built on the meta device (no
weight allocated: for planning offline, ``offload_pass.offline``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "Attention", "MLP", "DecoderLayer", "Decoder", "make_decoder", "MoEStack", "make_moe", "llama_shape",
    "llama3_8b_shape",
]


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        # q, k, v are views of one qkv buffer: the pass offloads that storage
        # once and rebuilds the three views in backward.
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(out.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn, bias=False)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.mlp_norm = nn.RMSNorm(hidden)
        self.mlp = MLP(hidden, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        # A loss without a vocabulary head keeps the saved set about the layers.
        return self.norm(x).float().pow(2).mean()


def make_decoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    ffn: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> Decoder:
    torch.manual_seed(seed)
    model = Decoder(layers, hidden, heads, ffn or 4 * hidden)
    # The loss is the mean square of the final RMSNorm's output: with that
    # norm's weight at ones it is 1 for any input, and every layer's gradient
    # would be ~1e-9 (from eps alone), too small for a gradient check to see
    # a wrong value. A random weight gives the loss a direction.
    with torch.no_grad():
        model.norm.weight.normal_()
    return model.to(device=device, dtype=dtype)


class MoEStack(nn.Module):
    """Layers of ``grouped_mlp.MoEBlock`` (projection, routing, fused experts)."""

    def __init__(self, layers: int, hidden: int, ffn: int, experts: int, activation: str = "swiglu") -> None:
        super().__init__()
        from offload_pass.examples.grouped_mlp import MoEBlock

        self.layers = nn.ModuleList(MoEBlock(hidden, ffn, experts, activation) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x.float().pow(2).mean()


def make_moe(
    layers: int = 2,
    hidden: int = 32,
    ffn: int = 64,
    experts: int = 4,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> MoEStack:
    torch.manual_seed(seed)
    return MoEStack(layers, hidden, ffn, experts).to(device=device, dtype=dtype)


def llama_shape(
    seq: int, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
):
    """A Hugging Face ``LlamaForCausalLM`` of these sizes on the meta device
    (SDPA attention, no KV cache) and its inputs, ``input_ids`` and
    ``labels`` of ``batch`` x ``seq`` (the loss inside the model):
    ``(model, inputs)``, as ``examples.explain`` takes a factory's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=max(seq, 8192),
        use_cache=False, attn_implementation="sdpa",
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(dtype)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    return model, {"input_ids": ids, "labels": ids}


def llama3_8b_shape(seq: int = 8192, layers: int = 32, batch: int = 1):
    """Llama-3-8B's shape (hidden 4096, 32 query / 8 key-value heads, FFN
    14336, vocabulary 128256, bf16) with ``layers`` layers at ``seq``
    tokens, on the meta device: ``(model, inputs)``. Its 16 GB of weights
    are never allocated; plan it with ``offload_pass.offline.plan_offline``
    or ``python -m offload_pass.examples.explain --device-profile h200
    offload_pass.examples.models:llama3_8b_shape``."""
    return llama_shape(seq, layers, 4096, 32, 8, 14336, 128256, batch)
