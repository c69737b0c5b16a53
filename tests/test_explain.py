"""python -m offload_pass.explain prints the plan and the graph diff."""

import subprocess
import sys


def test_explain_default_factory():
    out = subprocess.run(
        [sys.executable, "-m", "offload_pass.explain", "offload_pass.explain:example", "--graphs", "diff"],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "offload plan graph 0" in out.stdout
    assert "offloaded by module layers.0.attn" in out.stdout
    assert "+mm_2_host = offload_pass.offload(mm_2, True, -1)" in out.stdout
    # The last layer's tensors come back first in backward: offloading them
    # would not lower the peak, and the plan says so.
    assert "mm_6_host" not in out.stdout
    assert "would not lower the predicted peak (keep_if_no_gain)" in out.stdout
    assert "+offload_pass.wait_reload(" in out.stdout


def test_explain_bad_factory():
    out = subprocess.run(
        [sys.executable, "-m", "offload_pass.explain", "offload_pass.models"], capture_output=True, text=True
    )
    assert out.returncode != 0 and "expected MODULE:FACTORY" in out.stderr
