"""Graph-diff regression tests: the rewritten graphs against tests/golden/*.txt.

Regenerate after an intended change with
    OFFLOAD_PASS_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
then read `git diff tests/golden` line by line.

Node names and decompositions are torch's, so the files are for the torch
version named in their first line; on another version the test is skipped.
"""

import os
import pathlib

import pytest
import torch

import offload_pass
from offload_pass.examples.models import make_decoder

GOLDEN = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("OFFLOAD_PASS_UPDATE_GOLDEN") == "1"
TORCH = ".".join(torch.__version__.split("+")[0].split(".")[:2])

CASES = {
    "decoder_mlp": lambda m: offload_pass.offload_modules(m, "layers.0.mlp"),
    "decoder_attn": lambda m: offload_pass.offload_modules(m, "layers.0.attn"),
    "decoder_layer_keep_mlp": lambda m: (
        offload_pass.offload_modules(m, "layers.0"),
        offload_pass.keep_modules(m, "layers.0.mlp"),
    ),
}


def render_case(name):
    model = make_decoder(layers=1, hidden=32, heads=4)
    CASES[name](model)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, keep_graphs=True)
    torch.compile(model, backend=backend)(torch.randn(2, 8, 32)).backward()
    graphs = backend.records[-1].graphs
    return (
        f"# torch {TORCH}; regenerate: OFFLOAD_PASS_UPDATE_GOLDEN=1 pytest tests/test_golden.py\n"
        f"{backend.plans[-1]}\n\n"
        f"## forward (diff against the partitioner's graph)\n"
        f"{offload_pass.graph_diff(graphs.forward_before, graphs.forward, 'forward')}\n"
        f"## backward (diff against the partitioner's graph)\n"
        f"{offload_pass.graph_diff(graphs.backward_before, graphs.backward, 'backward')}\n"
        f"## forward (rewritten)\n{graphs.forward}\n"
        f"## backward (rewritten)\n{graphs.backward}"
    )


def check_golden(name, text):
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing; create it with OFFLOAD_PASS_UPDATE_GOLDEN=1"
    want = path.read_text()
    if not want.startswith(f"# torch {TORCH};"):
        pytest.skip(f"{path.name} was written for {want.splitlines()[0][2:]}, this is torch {TORCH}")
    if text != want:
        import difflib

        diff = "".join(
            difflib.unified_diff(
                want.splitlines(keepends=True), text.splitlines(keepends=True),
                fromfile=f"golden/{name}.txt", tofile="now",
            )
        )
        pytest.fail(
            f"rewritten graphs differ from golden/{name}.txt "
            f"(OFFLOAD_PASS_UPDATE_GOLDEN=1 to accept):\n{diff}",
            pytrace=False,
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_graphs(name):
    check_golden(name, render_case(name))
