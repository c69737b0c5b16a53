"""Swin, every module marked (this CPU): ours and plain Inductor against the float64 gradients. Run from the repository root."""
import sys, copy, warnings
sys.path.insert(0, "benchmarks")
import torch, transformers as T, offload_pass
from model_zoo import worst_ratio
g = torch.Generator().manual_seed(1)
build = lambda: T.SwinForImageClassification(T.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, num_labels=10, drop_path_rate=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
batch = {"pixel_values": torch.randn(2, 3, 32, 32, generator=g), "labels": torch.randint(0, 10, (2,), generator=g)}
def steps(model, runner, b, n):
    out = []
    for _ in range(n):
        model.zero_grad(set_to_none=True); loss = runner(**b).loss; loss.backward()
        out.append((loss.detach().double(), {k: p.grad.double() for k, p in model.named_parameters() if p.grad is not None}))
    return out
torch.manual_seed(0); m = build()
ref, ours, ex = copy.deepcopy(m), copy.deepcopy(m), copy.deepcopy(m).double()
exact = steps(ex, ex, {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}, 1)[0]
torch._dynamo.reset(); plain = steps(ref, torch.compile(ref), batch, 2)
torch._dynamo.reset(); offload_pass.offload_modules(ours, "**")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    got = steps(ours, torch.compile(ours, backend=offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)), batch, 2)
k = "swin.embeddings.patch_embeddings.projection.bias"
print("bias grad max", exact[1][k].abs().max().item(), "plain-exact", (plain[0][1][k]-exact[1][k]).abs().max().item(), "ours-exact", (got[0][1][k]-exact[1][k]).abs().max().item())
print("worst", worst_ratio(got, plain, exact, 1e-6))
