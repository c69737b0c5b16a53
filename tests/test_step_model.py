"""The step simulator (planning/step_model.py) on a rewritten decoder: its
step is the compute plus the waits the copies cause, and the waits follow the
copy bandwidth as the runtime ops would make the compute stream wait."""

import copy
import dataclasses

import pytest
import torch

import offload_pass
from offload_pass.pipeline import passes as backend_module
from offload_pass.examples.models import make_decoder
from offload_pass.planning.step_model import RUNTIME_OP_LAUNCHES, node_times, predict_step


@pytest.fixture(scope="module")
def compiled():
    """(plan, calls of predict_step: (fw_gm, bw_gm, timeline, times, profile))."""
    calls = []
    real = backend_module.predict_step

    def capture(fw_gm, bw_gm, timeline, times, profile, peak_offset=0, between_ms=0.0):
        # Copies: the rewrite edits the graphs in place after the first call.
        assert peak_offset == 0 and between_ms == 0.0  # no calibration on the CPU
        calls.append((copy.deepcopy(fw_gm), copy.deepcopy(bw_gm), timeline, times, profile))
        return real(fw_gm, bw_gm, timeline, times, profile, peak_offset, between_ms)

    torch.manual_seed(0)
    model = make_decoder(layers=2, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    torch._dynamo.reset()
    original, backend_module.predict_step = backend_module.predict_step, capture
    try:
        torch.compile(model, backend=backend)(torch.randn(2, 8, 32)).backward()
    finally:
        backend_module.predict_step = original
    return backend.plans[-1], calls


def test_the_plan_quotes_the_simulator_before_and_after_the_rewrite(compiled):
    plan, calls = compiled
    assert plan.groups and len(calls) == 2
    (fw0, bw0, before, times, profile), (fw1, bw1, after, _, _) = calls
    assert plan.baseline == predict_step(fw0, bw0, before, times, profile)
    assert plan.prediction == predict_step(fw1, bw1, after, times, profile)
    assert (plan.baseline.peak, plan.prediction.peak) == (before.peak, after.peak)
    # Without copies the step is the compute of every node, nothing waits.
    estimated = node_times(fw0, bw0, profile)
    assert plan.baseline.step_ms == pytest.approx(sum(estimated.forward.values()) + sum(estimated.backward.values()))
    assert plan.baseline.forward_wait_ms == plan.baseline.backward_wait_ms == 0
    # The rewrite adds no compute: the same nodes, the same times.
    assert plan.prediction.forward_ms == pytest.approx(plan.baseline.forward_ms)
    assert plan.prediction.backward_ms == pytest.approx(plan.baseline.backward_ms)
    assert f"predicted step {plan.baseline.step_ms:.2f} -> {plan.prediction.step_ms:.2f} ms" in str(plan)


def test_slow_copies_make_both_passes_wait_and_fast_ones_do_not(compiled):
    plan, calls = compiled
    fw, bw, after, times, profile = calls[1]
    moved = sum(g.nbytes for g in plan.groups)
    # 1 byte per ms each way: every copy takes longer than the whole step.
    slow = predict_step(fw, bw, after, times, dataclasses.replace(profile, d2h_gbps=1e-6, h2d_gbps=1e-6))
    assert slow.forward_wait_ms > 0.9 * moved and slow.backward_wait_ms > 0
    assert slow.step_ms == pytest.approx(slow.forward_ms + slow.backward_ms + slow.forward_wait_ms + slow.backward_wait_ms)
    fast = predict_step(fw, bw, after, times, dataclasses.replace(profile, d2h_gbps=1e9, h2d_gbps=1e9))
    assert fast.forward_wait_ms == pytest.approx(0, abs=1e-6) and fast.backward_wait_ms == pytest.approx(0, abs=1e-6)
    assert fast.step_ms == pytest.approx(fast.forward_ms + fast.backward_ms)



def _runtime_ops(gm) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in gm.graph.nodes:
        if getattr(n.target, "namespace", None) == "offload_pass":
            counts[n.target._opname] = counts.get(n.target._opname, 0) + 1
    return counts


def test_the_host_clock_idles_the_device_where_the_host_is_behind(compiled):
    plan, calls = compiled
    (fw0, bw0, before, _, profile), (fw1, bw1, after, _, _) = calls
    fast = dataclasses.replace(profile, d2h_gbps=1e9, h2d_gbps=1e9)
    # No host clock (the CPU profile's 0): the step is the device's alone.
    times = node_times(fw0, bw0, profile)
    assert times.launch_forward_ms == times.launch_backward_ms == 0
    assert not times.host_forward and not times.host_backward
    plain = predict_step(fw0, bw0, before, times, fast)
    assert plain.forward_idle_ms == plain.backward_idle_ms == 0 and plain.forward_issue_ms == 0
    # A host far slower than the device (one launch 1000x the step's
    # longest node): the device idles for it before every kernel, and
    # the step is the host's time to issue the kernels, plus the last
    # forward kernel's time (the backward's host starts where the compute
    # stream does) and the last backward kernel's.
    launch_ms = 1000 * max(max(times.forward.values()), max(times.backward.values()))
    slow_host = dataclasses.replace(fast, host_launch_us=launch_ms * 1e3)
    hosted = node_times(fw0, bw0, slow_host)
    kernels = [ms for ms in (*times.forward.values(), *times.backward.values()) if ms > 0]
    assert hosted.launch_forward_ms == hosted.launch_backward_ms == pytest.approx(launch_ms)
    assert sorted(hosted.host_forward) == sorted(k for k, ms in times.forward.items() if ms > 0)
    bound = predict_step(fw0, bw0, before, hosted, slow_host)
    assert bound.forward_issue_ms + bound.backward_issue_ms == pytest.approx(len(kernels) * launch_ms)
    last_forward = [ms for ms in hosted.ordered(fw0, "forward") if ms > 0][-1]
    last_backward = [ms for ms in hosted.ordered(bw0, "backward") if ms > 0][-1]
    assert bound.step_ms == pytest.approx(len(kernels) * launch_ms + last_forward + last_backward, rel=1e-12)
    assert bound.forward_idle_ms > 0 and bound.backward_idle_ms > 0
    assert "for the host" in bound.describe()
    # Each runtime op the rewrite added costs its launches on the host: with
    # copies that never keep the device waiting, the rewritten step is
    # longer by exactly their host time.
    rewritten = predict_step(fw1, bw1, after, hosted, slow_host)
    ops = {**_runtime_ops(fw1), **_runtime_ops(bw1)}
    assert set(ops) == {"offload", "release", "reload", "wait_reload"}
    added = sum(RUNTIME_OP_LAUNCHES[op] * n for op, n in ops.items()) * launch_ms
    assert rewritten.forward_wait_ms == pytest.approx(0, abs=1e-6)
    assert rewritten.step_ms - bound.step_ms == pytest.approx(added, rel=1e-9)


_NODE_TIMES = backend_module.node_times


def _plan_under(monkeypatch, forward_scale: float, backward_scale: float):
    """The plan of a decoder whose step-simulator node times are scaled per
    phase (the roofline estimates alone are untouched), as a calibration or
    measured kernels would scale them."""

    def scaled(fw_gm, bw_gm, profile, measure_kernels=False):
        times = _NODE_TIMES(fw_gm, bw_gm, profile, measure_kernels)
        return dataclasses.replace(
            times,
            forward={k: v * forward_scale for k, v in times.forward.items()},
            backward={k: v * backward_scale for k, v in times.backward.items()},
        )

    monkeypatch.setattr(backend_module, "node_times", scaled)
    torch.manual_seed(0)
    model = make_decoder(layers=3, hidden=32, heads=4)
    offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, bandwidth_gbps=0.05)
    torch._dynamo.reset()
    torch.compile(model, backend=backend)(torch.randn(2, 64, 32)).sum().backward()
    return backend.plans[-1]


def _moved(a: dict, b: dict) -> list:
    assert a.keys() == b.keys() and a
    return [k for k in a if a[k] != b[k]]


def test_releases_and_reloads_are_placed_by_the_simulators_node_times(monkeypatch):
    # The schedules place each release where its copy has landed and each
    # reload just early enough by the node times the simulator predicts
    # with. Where the backward's nodes take 50x longer, fewer of them must
    # run under a reload: reloads are issued later, and the backward never
    # waits. Where the forward's take 50x longer, copies land sooner after
    # their producers: releases come earlier. With times of their own
    # (roofline estimates) neither would move.
    plain = _plan_under(monkeypatch, 1.0, 1.0)
    slow_backward = _plan_under(monkeypatch, 1.0, 50.0)
    assert _moved(plain.reload_before, slow_backward.reload_before), plain.reload_before
    assert slow_backward.prediction.backward_wait_ms < plain.prediction.backward_wait_ms, (
        plain.prediction.describe(), slow_backward.prediction.describe()
    )
    slow_forward = _plan_under(monkeypatch, 50.0, 1.0)
    assert _moved(plain.release_after, slow_forward.release_after), plain.release_after
    assert slow_forward.prediction.forward_wait_ms < plain.prediction.forward_wait_ms, (
        plain.prediction.describe(), slow_forward.prediction.describe()
    )
