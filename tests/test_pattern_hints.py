"""A pattern that matches nothing names the nearest pattern; marking the
torch.compile wrapper marks the user's model, under the user's names."""

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass.examples.models import make_decoder


class Wrapped(nn.Module):
    """Names as a Hugging Face model has them: model.layers.N.attn."""

    def __init__(self):
        super().__init__()
        self.model = make_decoder(layers=2, hidden=32, heads=4)

    def forward(self, x):
        return self.model(x)


@pytest.mark.parametrize(
    "pattern, nearest",
    [
        ("layers.*.attn", "model.layers.*.attn"),  # the root's name left out
        ("model.layer.*.atn", "model.layers.*.attn"),
        ("model.layers.0.atn", "model.layers.0.attn"),  # a name where the pattern has no wildcard
    ],
)
def test_pattern_matching_nothing_suggests_the_nearest_pattern(pattern, nearest):
    with pytest.raises(ValueError, match=rf"matches no submodule; close names: .*; did you mean '{nearest}'\?$"):
        offload_pass.offload_modules(Wrapped(), pattern)


def test_marking_the_compiled_wrapper_marks_the_model_by_its_own_names():
    model = make_decoder(layers=2, hidden=32, heads=4)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    with pytest.raises(ValueError) as error:
        offload_pass.offload_modules(compiled, "layers.*.atn")
    assert "_orig_mod" not in str(error.value) and "did you mean 'layers.*.attn'?" in str(error.value)
    assert offload_pass.offload_modules(compiled, "layers.*.attn") == ["layers.0.attn", "layers.1.attn"]
    compiled(torch.randn(2, 8, 32)).backward()
    (plan,) = backend.plans
    moved = {plan.entry(name).module for name in plan.offloaded}
    assert {"layers.0.attn", "layers.1.attn"} <= moved and all(".attn" in m for m in moved), plan
    assert offload_pass.clear_marks(compiled) == ["layers.0.attn", "layers.1.attn"]


def test_the_compiled_wrapper_as_a_target_is_the_model():
    compiled = torch.compile(make_decoder(layers=1, hidden=32, heads=4))
    assert offload_pass.keep_modules(compiled, compiled) == [""]
    assert offload_pass.keep_modules(compiled, compiled.layers[0].mlp) == ["layers.0.mlp"]
