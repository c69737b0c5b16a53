"""python -m offload_pass.examples.explain prints the plan and the graph diff."""

import re
import subprocess
import sys


def test_explain_default_factory():
    out = subprocess.run(
        [sys.executable, "-m", "offload_pass.examples.explain", "offload_pass.examples.explain:example", "--graphs", "diff"],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "offload plan graph 0" in out.stdout
    assert "offloaded by module layers.0.attn" in out.stdout
    # Copied into its slot of the graph's host pool (28672 bytes, 5 slots).
    assert "+mm_1_host = offload_pass.offload(mm_1, True, -1, 'a1a9ff75ae48', 28672, 20480, 4096)" in out.stdout
    assert "host pool 28.00 KiB per call (5 slots, page-aligned)" in out.stdout
    # The fc1 outputs are the largest copies, and the smaller ones already
    # bring the peak as low as it goes: copying them would not lower it, and
    # the plan says so.
    assert "mm_2_host" not in out.stdout and "mm_6_host" not in out.stdout
    assert "would not lower the predicted peak (keep_if_no_gain)" in out.stdout
    assert "+offload_pass.wait_reload(" in out.stdout
    # One line says how many marked tensors that trim kept, and how to force them.
    assert re.search(r"kept \d+ marked tensors \([\d.]+ KiB\) because offloading them would not lower "
                     r"the predicted peak; make_backend\(keep_if_no_gain=False\) offloads them anyway", out.stdout)
    # The step as a whole, per module.
    assert re.search(r"^step 1: 1 graphs, offloaded \d+ saved tensors", out.stdout, re.M)
    assert re.search(r"^    layers\.0\.attn\.qkv +\d+ tensors", out.stdout, re.M), out.stdout


def test_explain_bad_factory():
    out = subprocess.run(
        [sys.executable, "-m", "offload_pass.examples.explain", "offload_pass.examples.models"], capture_output=True, text=True
    )
    assert out.returncode != 0 and "expected MODULE:FACTORY" in out.stderr
