"""Exactness sweep over HF architectures from tiny configs (twenty-fourth session), fp32:
mark every attention and MLP (by name pattern, PATS=... to override), offload_pass
against plain Inductor, 2 steps seeded alike, torch.equal on loss and every gradient.

  [DET=1] [DEVICE=cuda] [SELF=1] [BUDGET=0.5] python sweep24.py mistral qwen2 gemma ...

DET: PyTorch's deterministic algorithms (warn only) and Inductor's deterministic
mode (calls A and B ran an earlier form: strict deterministic algorithms with
CUBLAS_WORKSPACE_CONFIG, Inductor's mode off); SELF: plain Inductor against
itself; BUDGET: mode="budget" at that memory_budget."""
import sys, traceback, warnings, torch, offload_pass, fnmatch
import transformers as T

V = 128
DEV = __import__('os').environ.get('DEVICE', 'cpu')
import os as _os
if _os.environ.get("DET"):
    torch.use_deterministic_algorithms(True, warn_only=True); torch._inductor.config.deterministic = True
def lm(ids_only=False):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (2, 16), generator=g)
    ids = ids.to(DEV)
    return {"input_ids": ids, "labels": ids.clone()}

def build(name):
    torch.manual_seed(0)
    small = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=V, max_position_embeddings=64)
    if name == "mistral":
        return T.MistralForCausalLM(T.MistralConfig(num_hidden_layers=2, num_key_value_heads=2, **small)), lm, ["model.layers.*.self_attn", "model.layers.*.mlp"]
    if name == "qwen2":
        return T.Qwen2ForCausalLM(T.Qwen2Config(num_hidden_layers=2, num_key_value_heads=2, **small)), lm, ["model.layers.*.self_attn", "model.layers.*.mlp"]
    if name == "gemma":
        return T.GemmaForCausalLM(T.GemmaConfig(num_hidden_layers=2, num_key_value_heads=2, head_dim=16, **small)), lm, ["model.layers.*.self_attn", "model.layers.*.mlp"]
    if name == "gemma2":
        return T.Gemma2ForCausalLM(T.Gemma2Config(num_hidden_layers=2, num_key_value_heads=2, head_dim=16, **small)), lm, ["model.layers.*.self_attn", "model.layers.*.mlp"]
    if name == "phi3":
        return T.Phi3ForCausalLM(T.Phi3Config(num_hidden_layers=2, num_key_value_heads=2, pad_token_id=0, **small)), lm, ["model.layers.*.self_attn", "model.layers.*.mlp"]
    if name == "mixtral":
        return T.MixtralForCausalLM(T.MixtralConfig(num_hidden_layers=2, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **small)), lm, ["model.layers.*.self_attn", "model.layers.*.mlp"]
    if name == "opt":
        return T.OPTForCausalLM(T.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128, vocab_size=V, max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.0, attention_dropout=0.0)), lm, ["model.decoder.layers.*.self_attn", "model.decoder.layers.*.fc1"]
    if name == "bert":
        m = T.BertForMaskedLM(T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=V, max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
        return m, lm, ["bert.encoder.layer.*.attention", "bert.encoder.layer.*.intermediate"]
    if name == "t5":
        m = T.T5ForConditionalGeneration(T.T5Config(num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, vocab_size=V, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0))
        return m, lm, ["encoder.block.*.layer.*", "decoder.block.*.layer.*"]
    if name == "falcon":
        return T.FalconForCausalLM(T.FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=V, hidden_dropout=0.0, attention_dropout=0.0)), lm, ["transformer.h.*.self_attention", "transformer.h.*.mlp"]
    if name == "gptneox":
        return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=V, max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)), lm, ["gpt_neox.layers.*.attention", "gpt_neox.layers.*.mlp"]
    if name == "bert_dropout":
        m = T.BertForMaskedLM(T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=V, max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
        return m, lm, ["bert.encoder.layer.*.attention", "bert.encoder.layer.*.intermediate"]
    raise KeyError(name)

def steps(model, backend, inputs, n=2, seed=None):
    c = torch.compile(model, backend=backend)
    out = []
    for i in range(n):
        if seed is not None:
            torch.manual_seed(seed + i)
        model.zero_grad(set_to_none=True)
        loss = c(**inputs).loss
        loss.backward()
        out.append((loss.detach().clone(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}))
    return out

import os
for name in sys.argv[1:]:
    try:
        m, inp, pats = build(name)
        ref_m, _, _ = build(name)
        m, ref_m = m.to(DEV), ref_m.to(DEV)
        pats = os.environ.get("PATS", ",".join(pats)).split(",")
        names = [n for n, _ in m.named_modules() if any(fnmatch.fnmatch(n, p) and n.count(".") == p.count(".") for p in pats)]
        offload_pass.offload_modules(m, *names)
        kw = dict(min_bytes=0, keep_if_no_gain=False)
        if os.environ.get("BUDGET"): kw = dict(min_bytes=0, mode="budget", memory_budget=float(os.environ["BUDGET"]))
        be = offload_pass.make_backend(**kw)

        inputs = inp()
        torch._dynamo.reset()
        want = steps(ref_m, "inductor", inputs, seed=7)
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = steps(m, "inductor" if os.environ.get("SELF") else be, inputs, seed=7)
        off = [(p.graph_id, e.name, e.module) for p in be.plans for e in p.entries if e.decision == "offload"]
        bad = []
        for s, ((l1, g1), (l2, g2)) in enumerate(zip(got, want)):
            if not torch.equal(l1, l2): bad.append(f"loss{s} {l1.item()} {l2.item()}")
            for k in g2:
                if k not in g1 or not torch.equal(g1[k], g2[k]):
                    bad.append(f"s{s} {k} {(g1[k]-g2[k]).abs().max().item() if k in g1 else 'missing'}")
        rec = [(p.graph_id, e.name) for p in be.plans for e in p.entries if str(e.decision).endswith("RECOMPUTE") or str(e.decision)=="recompute"]
        print(f"recomputed {len(rec)}")
        print(f"{name}: graphs {len(be.plans)} marked {len(names)} offloaded {len(off)} mismatches {len(bad)} warnings {len(caught)}", flush=True)
        for b in bad[:6]: print("   ", b)
        for w in {str(w.message)[:200] for w in caught}: print("    warn:", w)
    except Exception as e:
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:400]}", flush=True)
        traceback.print_exc(limit=3)
