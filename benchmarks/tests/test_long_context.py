"""The long-context benchmark (``benchmarks/long_context.py``) on its tiny
shape (hidden 64, 2 layers, vocab 256, seq 64, fp32, CPU): a row of plain
ours has every field and a positive throughput; ours and its budget mode give plain Inductor's loss and adapter
gradients bit for bit (``--grad-check --tiny``); the plot is drawn."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import long_context as lc
from offload_pass.compile_caches import graph_caches_off

# The HF model compiles once per variant: keep these tests on one worker, sharing its kernels.
pytestmark = pytest.mark.xdist_group("long_context")

FIELDS = (
    "variant", "seq", "layers", "tokens_per_s", "step_s", "median_step_s", "peak_bytes", "pinned_host_peak_bytes",
    "oom", "error", "compile_and_first_step_s", "torch", "transformers", "device_name", "loss", "shape",
)


@pytest.fixture(scope="module", autouse=True)
def _kernels(tmp_path_factory):
    # No compiled graph served from a cache (as the package's tests); the kernels shared by this module's compiles.
    graph_caches_off(str(tmp_path_factory.mktemp("long_context_kernels")))


# Ours only: each variant is a compile of its own (~20 s of CPU); the
# baselines' rows are the same code with another model setup.
@pytest.mark.parametrize("variant", ["ours_marked"])
def test_a_tiny_row_has_every_field_and_a_positive_throughput(variant):
    row = lc.run_row(lc.parse_args(["--tiny", "--variant", variant, "--steps", "3", "--warmup", "1"]))
    assert row["error"] is None and row["oom"] is False, row.get("error")
    assert [f for f in FIELDS if f not in row] == []
    assert (row["variant"], row["seq"], row["layers"], row["device_name"]) == (variant, 64, 2, "cpu")
    assert len(row["step_s"]) == 2 and row["tokens_per_s"] > 0
    assert row["dynamo_graphs"] == 1  # the step is one graph: nothing broke it
    assert row["loss"].startswith("chunked cross-entropy: logits of 32 tokens at a time")
    json.dumps(row)  # the row is what --out writes
    if variant == "ours_marked":
        assert row["offloaded_bytes"] > 0 and row["host_pool_bytes"] > 0
        assert row["predicted_step_ms"]["with"] > 0 and row["predicted_peak_bytes"]["with"] > 0


def test_tiny_loss_and_adapter_gradients_equal_plain_inductors():
    verdict = lc.grad_check(lc.parse_args(["--tiny", "--grad-check"]))
    assert set(verdict["variants"]) == {"ours_marked", "ours_budget"}
    assert verdict["variants"]["ours_marked"]["offloaded_bytes"] > 0
    # Two steps: the loss and the 8 adapter gradients (q and v, a and b, 2 layers) of each.
    assert verdict["variants"]["ours_marked"]["compared"] == 2 * (1 + 8)
    assert verdict["equal"], json.dumps(verdict["variants"])
    assert not torch.are_deterministic_algorithms_enabled()  # restored for whatever runs next


def test_a_grad_reference_that_is_no_variant_is_refused_naming_the_valid_ones():
    with pytest.raises(SystemExit, match="--grad-reference plain: valid are inductor, ours_marked, ours_budget"):
        lc.grad_check(lc.parse_args(["--tiny", "--grad-check", "--grad-reference", "plain"]))


def test_paired_throughput_divides_out_each_rows_control_and_the_plot_marks_oom(tmp_path):
    rows = [
        {"variant": "inductor", "seq": 8192, "layers": 32, "tokens_per_s": 100.0, "control_step_s": [1.0, 1.0]},
        {"variant": "inductor", "seq": 16384, "layers": 32, "tokens_per_s": None, "oom": True},
        {"variant": "ours_marked", "seq": 8192, "layers": 32, "tokens_per_s": 80.0, "control_step_s": [1.1, 1.1]},
        {"variant": "ours_marked", "seq": 16384, "layers": 32, "tokens_per_s": 60.0, "control_step_s": [0.9, 0.9]},
    ]
    lc.add_paired(rows)
    # The median control is 1.0: a row whose control ran 10 % slow ran on a slow device.
    assert [r.get("tokens_per_s_paired") for r in rows] == pytest.approx([100.0, None, 88.0, 54.0])
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    lc.main(["--plot", str(tmp_path / "rows.json"), str(tmp_path / "rows.png")])
    assert (tmp_path / "rows.png").stat().st_size > 0
