"""Twenty-ninth session, on this CPU (torch 2.13): Hugging Face models from small configs, every module marked
(offload_modules(model, "**")), 2 steps against plain Inductor, loss and gradients compared bit for bit.
Run from the repository root: python benchmarks/results/2026-11-28e-h200/cpu_bitwise.py [names...]"""
import sys, time, traceback, warnings
sys.path.insert(0, "tests")
import torch, transformers
import offload_pass
from helpers import train_steps
V = 128
def lm(): 
    g = torch.Generator().manual_seed(1); ids = torch.randint(0, V, (2, 8), generator=g)
    return {"input_ids": ids, "labels": ids.clone()}
def step(c, inputs):
    loss = c(**inputs).loss; loss.backward(); return loss
common = dict(vocab_size=V, max_position_embeddings=64)
def cfgs():
    T = transformers
    yield "gemma2", lambda: T.Gemma2ForCausalLM(T.Gemma2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128, **common))
    yield "gemma3", lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128, sliding_window=4, **common))
    yield "phi3", lambda: T.Phi3ForCausalLM(T.Phi3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, pad_token_id=0, **common))
    yield "mixtral", lambda: T.MixtralForCausalLM(T.MixtralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, **common))
    yield "olmo2", lambda: T.Olmo2ForCausalLM(T.Olmo2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, pad_token_id=0, **common))
    yield "t5", lambda: T.T5ForConditionalGeneration(T.T5Config(num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, vocab_size=V, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0))
    yield "mamba", lambda: T.MambaForCausalLM(T.MambaConfig(num_hidden_layers=2, hidden_size=64, state_size=8, vocab_size=V))
    yield "deepseek_v3", lambda: T.DeepseekV3ForCausalLM(T.DeepseekV3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, **common))
    yield "gpt_oss", lambda: T.GptOssForCausalLM(T.GptOssConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, sliding_window=4, layer_types=["sliding_attention","full_attention"], **common))
want = sys.argv[1:] 
for name, build in cfgs():
    if want and name not in want: continue
    t0 = time.time()
    try:
        torch.manual_seed(0); ref_model = build()
        torch._dynamo.reset()
        ref = train_steps(ref_model, "inductor", lm(), 2, step)
        torch.manual_seed(0); model = build()
        marked = offload_pass.offload_modules(model, "**")
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = train_steps(model, backend, lm(), 2, step)
        n_off = sum(1 for p in backend.plans for e in p.entries if str(e.decision).endswith("OFFLOAD") or str(e.decision)=="offload")
        diffs = {}
        for s, ((l1, g1), (l2, g2)) in enumerate(zip(got, ref)):
            if not torch.equal(l1, l2): diffs[f"loss{s}"] = (l1 - l2).abs().item()
            for k in g2:
                if k not in g1: diffs[f"{k}@{s}"] = "missing"
                elif not torch.equal(g1[k], g2[k]): diffs[f"{k}@{s}"] = (g1[k]-g2[k]).abs().max().item()
        ws = sorted({str(w.message)[:150] for w in caught if "offload" in str(w.message).lower()})
        print(f"== {name}: graphs {len(backend.plans)} offloaded {n_off} marked {len(marked)} diffs {len(diffs)} {dict(list(diffs.items())[:4])} {time.time()-t0:.0f}s", flush=True)
        for w in ws: print("   warn:", w)
    except Exception as e:
        print(f"== {name}: ERROR {type(e).__name__}: {str(e)[:1500]}", flush=True)
        traceback.print_exc(limit=8)
