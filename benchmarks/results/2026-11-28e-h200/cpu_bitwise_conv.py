"""Twenty-ninth session, on this CPU (torch 2.13): Hugging Face audio and vision models with convolutions (Whisper,
Wav2Vec2, Swin; ConvNeXt did not build from this config), every module marked, 2 steps against plain Inductor, bit
for bit. Run from the repository root: python benchmarks/results/2026-11-28e-h200/cpu_bitwise_conv.py [names...]"""
import sys, time, traceback, warnings
sys.path.insert(0, "tests")
import torch, transformers as T
import offload_pass
from helpers import train_steps
def step_loss(c, inputs):
    out = c(**inputs)
    loss = out.loss if getattr(out, "loss", None) is not None else out.logits.float().square().mean()
    loss.backward(); return loss
g = torch.Generator().manual_seed(1)
def cfgs():
    yield "whisper", lambda: T.WhisperForConditionalGeneration(T.WhisperConfig(
        vocab_size=128, num_mel_bins=16, encoder_layers=2, decoder_layers=2, d_model=64, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16, max_target_positions=32,
        decoder_start_token_id=0, pad_token_id=0, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)), \
        {"input_features": torch.randn(2, 16, 32, generator=g), "labels": torch.randint(1, 128, (2, 8), generator=g)}
    yield "convnext", lambda: T.ConvNextForImageClassification(T.ConvNextConfig(
        num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, image_size=32, drop_path_rate=0.0)), \
        {"pixel_values": torch.randn(2, 3, 32, 32, generator=g), "labels": torch.randint(0, 10, (2,), generator=g)}
    yield "wav2vec2", lambda: T.Wav2Vec2ForCTC(T.Wav2Vec2Config(
        vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
        mask_time_prob=0.0, final_dropout=0.0)), \
        {"input_values": torch.randn(2, 800, generator=g), "labels": torch.randint(1, 32, (2, 5), generator=g)}
    yield "swin", lambda: T.SwinForImageClassification(T.SwinConfig(
        image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4,
        num_labels=10, drop_path_rate=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)), \
        {"pixel_values": torch.randn(2, 3, 32, 32, generator=g), "labels": torch.randint(0, 10, (2,), generator=g)}
want = sys.argv[1:]
for name, build, inputs in cfgs():
    if want and name not in want: continue
    t0 = time.time()
    try:
        torch.manual_seed(0); ref_model = build()
        torch._dynamo.reset()
        ref = train_steps(ref_model, "inductor", inputs, 2, step_loss)
        torch.manual_seed(0); model = build()
        marked = offload_pass.offload_modules(model, "**")
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = train_steps(model, backend, inputs, 2, step_loss)
        n_off = sum(1 for p in backend.plans for e in p.entries if e.decision == "offload")
        diffs = {}
        for s, ((l1, g1), (l2, g2)) in enumerate(zip(got, ref)):
            if not torch.equal(l1, l2): diffs[f"loss{s}"] = (l1 - l2).abs().item()
            for k in g2:
                if k not in g1: diffs[f"{k}@{s}"] = "missing"
                elif not torch.equal(g1[k], g2[k]): diffs[f"{k}@{s}"] = (g1[k]-g2[k]).abs().max().item()
        print(f"== {name}: graphs {len(backend.plans)} offloaded {n_off} marked {len(marked)} diffs {len(diffs)} {dict(list(diffs.items())[:4])} {time.time()-t0:.0f}s", flush=True)
    except Exception as e:
        print(f"== {name}: ERROR {type(e).__name__}: {str(e)[:600]}", flush=True)
        traceback.print_exc(limit=6)
