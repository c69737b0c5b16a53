"""Roles on Hugging Face's mixture-of-experts experts, fp32 (what a config
gives by default): Qwen3-MoE, Mixtral and DeepSeek-V3 (its experts beside a
shared expert, routed by group-limited top-k) from tiny configs (no download).

In fp32 under torch.compile, transformers' experts call its
``transformers::grouped_mm_fallback`` custom op, whose backward
(``offs.tolist()``) torch.compile cannot trace: Dynamo breaks the graph and
runs both matmul layers eagerly, plain Inductor and the offload backend
alike, and compiles the gating (``act_fn(gate) * up``) as a frame of its own.
No tensor there has an MLP role, so a mark with ``roles=`` keeps what the
experts save in that frame and says so once per module, naming it and why;
the compile never fails. Loss and every gradient equal plain Inductor's.

In bf16 the experts run ``aten._grouped_mm`` inside the graph and the roles
are found (Mixtral here; Qwen3-MoE in test_real_models.py).
"""

from __future__ import annotations

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import offload_pass  # noqa: E402

from helpers import train_steps  # noqa: E402

SEQ, VOCAB = 8, 64
LAYERS = ("model.layers.0.mlp.experts", "model.layers.1.mlp.experts")


def build_qwen3_moe_fp32() -> torch.nn.Module:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
        num_experts_per_tok=2, vocab_size=VOCAB, max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(config)


def build_mixtral_fp32() -> torch.nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, intermediate_size=16, num_local_experts=4, num_experts_per_tok=2,
        vocab_size=VOCAB, max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return MixtralForCausalLM(config)


def build_deepseek_v3_fp32() -> torch.nn.Module:
    """One MoE layer (``first_k_dense_replace=0``): compiling DeepSeek-V3's
    experts in fp32 costs Dynamo a failed backward trace and a retry per
    frame, with plain Inductor too, so one layer keeps the test short."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(
        num_hidden_layers=1, first_k_dense_replace=0, hidden_size=32, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=64, moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1, q_lora_rank=16,
        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, vocab_size=VOCAB,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return DeepseekV3ForCausalLM(config)


def lm_inputs() -> dict:
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids.clone()}


def hf_step(compiled, inputs):
    loss = compiled(**inputs).loss
    loss.backward()
    return loss


@pytest.mark.parametrize(
    "build, layers",
    [
        pytest.param(build_qwen3_moe_fp32, LAYERS, marks=pytest.mark.xdist_group("build_qwen3_moe_fp32")),
        pytest.param(build_mixtral_fp32, LAYERS, marks=pytest.mark.xdist_group("build_mixtral_fp32")),
        pytest.param(build_deepseek_v3_fp32, LAYERS[:1], marks=pytest.mark.xdist_group("build_deepseek_v3_fp32")),
    ],
    ids=["qwen3moe", "mixtral", "deepseekv3"],
)
def test_fp32_experts_with_roles_compile_keep_and_say_why(build, layers):
    model = build()
    assert next(model.parameters()).dtype == torch.float32
    assert offload_pass.offload_modules(model, "model.layers.*.mlp.experts", roles=["act"]) == list(layers)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ((loss, grads),) = train_steps(model, backend, lm_inputs(), 1, hf_step)
    torch._dynamo.reset()
    ((want_loss, want_grads),) = train_steps(build(), "inductor", lm_inputs(), 1, hf_step)

    assert torch.equal(loss, want_loss), (loss.item(), want_loss.item())
    assert grads.keys() == want_grads.keys()
    differ = sorted(n for n in grads if not torch.equal(grads[n], want_grads[n]))
    assert not differ, f"gradients differ from plain Inductor's: {differ}"
    assert any(layers[0] in n for n in grads)  # the experts' weights got gradients

    entries = [e for plan in backend.plans for e in plan.entries]
    assert backend.plans and entries
    # The matmul layers ran eagerly: no tensor has a role, none moves from the experts.
    assert {e.role for e in entries} == {None}
    assert not [e for e in entries if e.decision == "offload" and e.module.startswith(layers)]

    messages = [str(w.message) for w in caught if str(w.message).startswith("offload_pass:")]
    said = [m for m in messages if "asks for roles ['act']" in m]
    assert said and all("ran outside any compiled graph" in m and "grouped_mm_fallback" in m for m in said), messages
    # Each marked module is named by a warning saying why nothing of it moved.
    for module in layers:
        assert any(f"module {module} " in m for m in messages), (module, messages)


# Before torch 2.13, emulate_precision_casts does not make the CPU kernels
# round like eager, so a bf16 rewrite can differ in the last bits.
_EMULATES_CASTS_ON_CPU = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)


@pytest.mark.xdist_group("build_mixtral_fp32")
@pytest.mark.skipif(not _EMULATES_CASTS_ON_CPU, reason="bf16 bit-equality on CPU needs torch >= 2.13")
def test_bf16_experts_roles_move_exactly_the_activation():
    """act: the gate and up halves of the first _grouped_mm's masked output,
    per layer; fc1 (its masked input) and fc2 (act(gate) * up) have their
    roles and stay. Loss and gradients bit-identical to plain Inductor's,
    both rounding at every cast as eager does."""
    def build():
        return build_mixtral_fp32().to(torch.bfloat16)

    model = build()
    offload_pass.offload_modules(model, "model.layers.*.mlp.experts", roles=["act"])
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    with torch._inductor.config.patch(emulate_precision_casts=True):
        ((loss, grads),) = train_steps(model, backend, lm_inputs(), 1, hf_step)
        torch._dynamo.reset()
        ((want_loss, want_grads),) = train_steps(build(), "inductor", lm_inputs(), 1, hf_step)
    assert torch.equal(loss, want_loss) and grads.keys() == want_grads.keys()
    assert all(torch.equal(grads[n], want_grads[n]) for n in grads)
    entries = [e for plan in backend.plans for e in plan.entries]
    tokens = SEQ * 2  # top-2
    for module in LAYERS:
        by_role = sorted((e.role, e.op, e.shape, e.decision) for e in entries if e.module == module and e.role)
        assert by_role == [
            ("act", "aten.where", (tokens, 16), "offload"),
            ("act", "aten.where", (tokens, 16), "offload"),
            ("fc1", "aten.where", (tokens, 32), "keep"),
            ("fc2", "aten.mul", (tokens, 16), "keep"),
        ], by_role
    assert all(e.role == "act" for e in entries if e.decision == "offload")


def test_fallback_op_is_a_matmul_layer_for_roles():
    """Where ``transformers::grouped_mm_fallback`` is in a graph, its input,
    output and the next one's input are fc1, act and fc2, as for
    ``aten._grouped_mm``: found by structure, from the op's qualified name."""
    import transformers.integrations.moe  # noqa: F401  (registers the op)
    from torch.fx.experimental.proxy_tensor import make_fx

    from offload_pass.annotation.annotations import Request
    from offload_pass.annotation.mlp_roles import mlp_roles
    from offload_pass.meta_keys import REQUEST_KEY

    def experts(x, w1, w2, offs):
        h = torch.ops.transformers.grouped_mm_fallback(x, w1, offs)
        return torch.ops.transformers.grouped_mm_fallback(torch.nn.functional.silu(h), w2, offs)

    offs = torch.tensor([3, 8], dtype=torch.int32)
    gm = make_fx(experts)(torch.randn(8, 4), torch.randn(2, 4, 6), torch.randn(2, 6, 4), offs)
    request = Request(offload=("act",), keep=None, source="module experts")
    for node in gm.graph.nodes:
        if node.op != "output":
            node.meta[REQUEST_KEY] = request
    found = mlp_roles(gm.graph)
    roles = {root.name: role for root, (role, _) in found.of_storage.items()}
    mms = [n for n in gm.graph.nodes if "grouped_mm_fallback" in str(n.target)]
    assert len(mms) == 2 and found.sources == {"module experts"} and not found.cut
    assert roles[mms[0].args[0].name] == "fc1" and roles[mms[0].name] == "act"
    assert roles[mms[1].args[0].name] == "fc2"


def test_a_cut_module_is_not_checked_for_roles_it_cannot_show():
    """A module a graph break cut (``MlpRoles.cut``) shows neither its matmul
    layers nor its fused ops here: its roles, MLP or registered, are not
    checked against this graph (mlp_roles warned and its tensors are kept),
    while a module present in the graph still is."""
    import torch.fx as fx

    from offload_pass.annotation.annotations import Request
    from offload_pass.annotation.mlp_roles import MlpRoles
    from offload_pass.meta_keys import REQUEST_KEY
    from offload_pass.planning.saved_set import check_requested_roles

    graph = fx.Graph()
    x = graph.placeholder("x")
    cut_node = graph.call_function(torch.ops.aten.relu.default, (x,))
    cut_node.meta[REQUEST_KEY] = Request(offload=("gate_in",), keep=None, source="module experts", eager=True)
    graph.output(cut_node)
    check_requested_roles(graph, MlpRoles({}, {"module experts"}, frozenset({"module experts"})))
    with pytest.raises(ValueError, match=r"module experts asks for roles \['gate_in'\] but its roles are"):
        check_requested_roles(graph, MlpRoles({}, {"module experts"}))
