"""benchmarks/trace_gaps.py on a hand-made chrome trace: the device's first
work after the step's start, compute-stream gaps told apart by who made them
(the host launching late, or a wait with the kernel already launched), and
each copy direction's span and busy time."""

from __future__ import annotations

import json

import pytest

from benchmarks.trace_gaps import STEP_RANGE, step_times


def _x(name: str, cat: str, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path, events: list[dict]) -> str:
    path = tmp_path / "step.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_gaps_are_the_hosts_where_the_launch_came_after_the_previous_kernel(tmp_path):
    events = [
        _x(STEP_RANGE, "user_annotation", 1000, 900),
        # Compute stream 7: k1 1100-1200; k2 launched at 1150, runs 1300 (a wait);
        # k3 launched at 1450, after k2 ended at 1400: the host's gap.
        _x("cudaLaunchKernel", "cuda_runtime", 1090, 5, correlation=1),
        _x("k1", "kernel", 1100, 100, stream=7, correlation=1),
        _x("cudaLaunchKernel", "cuda_runtime", 1145, 5, correlation=2),
        _x("k2", "kernel", 1300, 100, stream=7, correlation=2),
        _x("cudaLaunchKernel", "cuda_runtime", 1445, 5, correlation=3),
        _x("k3", "kernel", 1460, 300, stream=7, correlation=3),
        # A copy stream: two copies out, one back.
        _x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 1200, 50, stream=9, correlation=4),
        _x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 1300, 50, stream=9, correlation=5),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 1700, 80, stream=11, correlation=6),
        _x("short", "kernel", 1790, 10, stream=11, correlation=7),
    ]
    t = step_times(_trace(tmp_path, events))
    assert t.first_kernel_ms == pytest.approx(0.1)
    assert t.end_ms == pytest.approx(0.8)
    assert t.compute_busy_ms == pytest.approx(0.5)
    assert (t.wait_gap_ms, t.wait_gaps) == (pytest.approx(0.1), 1)
    assert (t.host_gap_ms, t.host_gaps) == (pytest.approx(0.06), 1)
    assert [(why, name) for _, _, why, name in t.longest] == [("wait", "k2"), ("host", "k3")]
    assert t.copies["d2h"] == pytest.approx((0.2, 0.35, 0.1))
    assert t.copies["h2d"] == pytest.approx((0.7, 0.78, 0.08))


def test_a_trace_without_device_work_is_refused_naming_it(tmp_path):
    path = _trace(tmp_path, [_x(STEP_RANGE, "user_annotation", 0, 10), _x("aten::mm", "cpu_op", 1, 2)])
    with pytest.raises(SystemExit, match="has no device events"):
        step_times(path)
