"""The runtime ops as the compiled graphs call them: through the dispatcher,
with no Python wrapper between the call and the kernel."""

from __future__ import annotations

import pytest
import torch

import offload_pass
from offload_pass import runtime
from offload_pass.examples.models import make_decoder
from offload_pass.runtime.state import CopyStreams


@pytest.mark.parametrize("name", sorted(runtime.OPS))
def test_no_python_autograd_wrapper_on_the_launch_path(name):
    # Every copy calls these four ops on the launch path of the forward or
    # the backward. torch.library.custom_op would put its Python autograd
    # and in-place wrappers in front of each call (about 10 us of host time
    # against about 1 us, benchmarks/op_host_cost.py); the ops are defined
    # with one kernel for every backend and nothing on the autograd keys.
    qualified = f"offload_pass::{name}"
    for key in ("Autograd", "AutogradCPU", "AutogradCUDA", "ADInplaceOrView"):
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key), (qualified, key)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeExplicitAutograd")


def test_schemas_declare_what_the_ops_write():
    # Inductor keeps release and wait_reload in the graph, and orders their
    # readers, by the writes the schemas declare (ops.py says why these).
    written = {
        name: [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        for name, op in runtime.OPS.items()
    }
    assert written == {"offload": [], "release": ["host"], "reload": [], "wait_reload": ["x"]}
    # offload's input is laid out by the package's own constraint (one
    # buffer, realized, with its fake value's strides), not by a tag that
    # made Inductor copy a value it had not realized (rewriting/copy_source.py).
    from torch._inductor.lowering import maybe_layout_constraints

    from offload_pass.rewriting.copy_source import offload_input_layout

    assert maybe_layout_constraints(runtime.OPS["offload"]) is offload_input_layout
    assert torch.Tag.needs_exact_strides not in runtime.OPS["offload"].tags
    # ... and still after the op's first lowering: Inductor's implicit
    # fallback for an op without a lowering registered the default
    # constraint over a bare one (torch 2.13).
    model = make_decoder(layers=1, hidden=16, heads=2)
    offload_pass.offload_modules(model, "layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    torch._dynamo.reset()
    torch.compile(model, backend=backend)(torch.randn(2, 8, 16)).sum().backward()
    assert backend.plans[-1].offloaded
    assert maybe_layout_constraints(runtime.OPS["offload"]) is offload_input_layout


def test_round_trip_through_the_dispatcher_with_named_settings():
    x = torch.randn(6, 5)[:, 1:4]  # a gapped view: copied with its strides
    host = runtime.offload(x, pin_memory=False, host_limit=-1)
    assert host.device.type == "cpu" and host.stride() == x.stride()
    runtime.release(x, host)
    back = runtime.reload(host, x.device, align=0)
    runtime.wait_reload(back)
    assert torch.equal(back, x) and back.stride() == x.stride()


class _Fake:
    """A stream or an event: a name and, for a stream, the ids the ops switch by."""

    def __init__(self, name: str, stream_id: int = 0) -> None:
        self.name, self.stream_id, self.device_index, self.device_type = name, stream_id, 0, 1

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def cuda_calls(monkeypatch):
    """The CUDA calls of the ops' copy launch, recorded in order on a machine
    without a GPU, each copy with the stream current when it was queued: what
    a copy is ordered after, and on which stream it runs, is exactly this
    sequence."""
    import offload_pass.runtime.ops as ops

    log: list[tuple] = []
    current = {"device": 0, "stream": 7}
    compute_streams = {7: _Fake("compute", 7), 8: _Fake("other compute", 8)}
    events = iter(_Fake(f"event{i}") for i in range(100))
    monkeypatch.setattr(ops, "_record", lambda e, s: log.append(("record", e, s)))
    monkeypatch.setattr(ops, "_wait", lambda e, s: log.append(("wait", e, s)))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", lambda i: (current["stream"], i, 1), raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current["device"], raising=False)

    def set_stream(stream_id, device_index, device_type):
        log.append(("set stream", stream_id))
        current["stream"] = stream_id

    copy_layout = ops._copy_layout

    def logged_copy(dst, src, non_blocking=False):
        log.append(("copy on", current["stream"]))
        copy_layout(dst, src, non_blocking)

    monkeypatch.setattr(ops, "_copy_layout", logged_copy)
    monkeypatch.setattr(torch._C, "_cuda_setStream", set_stream, raising=False)
    monkeypatch.setattr(torch.cuda, "Stream", lambda stream_id, device_index, device_type: compute_streams[stream_id])
    monkeypatch.setattr(torch.cuda, "Event", lambda **_: next(events))
    streams = CopyStreams(0, _Fake("d2h", 20), _Fake("h2d", 21))
    return ops, streams, log, current


def test_a_copy_is_queued_after_the_compute_stream_and_the_stream_switched_back(cuda_calls):
    ops, streams, log, current = cuda_calls
    src, dst, after = torch.randn(4, 3), torch.empty(4, 3), _Fake("last read")
    event = ops._copy_on(streams, streams.d2h, dst, src, after)
    compute, fork = streams.compute[(7, 0, 1)]
    assert log == [
        ("record", fork, compute),  # once when made: an event exists from its first record
        ("record", fork, compute), ("wait", fork, streams.d2h), ("wait", after, streams.d2h),
        ("set stream", 20), ("copy on", 20), ("record", event, streams.d2h), ("set stream", 7),
    ]
    assert torch.equal(dst, src) and current["stream"] == 7
    # The Stream object and the fork event are made once per compute stream.
    log.clear()
    ops._copy_on(streams, streams.h2d, dst, src, None)
    assert log[:2] == [("record", fork, compute), ("wait", fork, streams.h2d)] and ("copy on", 21) in log
    current["stream"] = 8
    ops._copy_on(streams, streams.h2d, dst, src, None)
    assert len(streams.compute) == 2 and streams.compute[(8, 0, 1)][1] is not fork


def test_a_copy_that_fails_still_switches_the_stream_back(cuda_calls):
    ops, streams, log, current = cuda_calls
    with pytest.raises(RuntimeError):
        ops._copy_on(streams, streams.d2h, torch.empty(5), torch.randn(4, 3), None)
    assert log[-2:] == [("copy on", 20), ("set stream", 7)] and current["stream"] == 7


def test_a_copy_for_another_device_than_the_current_one_restores_both(cuda_calls, monkeypatch):
    # Setting a stream makes its device current: off the current device the
    # context manager, which restores the device too, switches instead.
    ops, streams, log, current = cuda_calls
    current["device"] = 1

    class Context:
        def __init__(self, stream):
            self.stream, self.before = stream, None

        def __enter__(self):
            log.append(("enter", self.stream))
            self.before, current["stream"] = current["stream"], self.stream.stream_id

        def __exit__(self, *exc):
            log.append(("exit", self.stream))
            current["stream"] = self.before

    monkeypatch.setattr(torch.cuda, "stream", Context)
    src, dst = torch.randn(3), torch.empty(3)
    event = ops._copy_on(streams, streams.d2h, dst, src, None)
    assert log[-4:] == [("enter", streams.d2h), ("copy on", 20), ("record", event, streams.d2h), ("exit", streams.d2h)]
    assert not [e for e in log if e[0] == "set stream"] and current["stream"] == 7
    assert torch.equal(dst, src)


@pytest.mark.parametrize("measured", [False, True])
def test_release_and_wait_reload_make_the_compute_stream_wait(cuda_calls, monkeypatch, measured):
    # The stream-side wait that orders the compute stream after a copy (the
    # reuse of a released tensor's memory, the first read of a reload).
    ops, streams, log, current = cuda_calls
    monkeypatch.setitem(runtime.STATE.streams, 0, streams)
    x = torch.empty(3)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    monkeypatch.setattr(torch.Tensor, "get_device", lambda t: 0)
    landed = _Fake("landed")
    timing = [] if measured else None
    monkeypatch.setattr(runtime.STATE, "wait_timing", timing)
    ops._compute_stream_waits(x, {7: landed}, 7)
    compute = streams.compute[(7, 0, 1)][0]
    if measured:
        (before, after), = timing
        assert log[-3:] == [("record", before, compute), ("wait", landed, compute), ("record", after, compute)]
    else:
        assert log[-1] == ("wait", landed, compute)
    log.clear()
    ops._compute_stream_waits(x, {}, 7)  # no event: nothing to wait for
    assert log == []


def _pretend_cuda(monkeypatch, streams):
    # The ops' bookkeeping of this test only: pretend copies leave no event
    # behind for the next test to find pending.
    for name in ("copy_out_events", "reload_events", "copy_sources", "slot_reads"):
        monkeypatch.setattr(runtime.STATE, name, {})
    monkeypatch.setattr(runtime.STATE, "unreleased_hosts", set())
    monkeypatch.setattr(runtime.STATE, "stats", dict.fromkeys(runtime.STATE.stats, 0))
    monkeypatch.setitem(runtime.STATE.streams, 0, streams)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    monkeypatch.setattr(torch.Tensor, "get_device", lambda t: 0)


def test_the_tensor_a_copy_reads_is_held_until_the_compute_stream_waited_for_the_copy(cuda_calls, monkeypatch):
    # Inductor may hand ``offload`` a copy of the saved tensor made for the
    # op's exact strides and free it as soon as the op returns; the
    # asynchronous copy still reads it, and the allocator would give its
    # memory to the next kernel. The op holds it until the release's wait.
    import weakref

    ops, streams, log, current = cuda_calls
    _pretend_cuda(monkeypatch, streams)
    saved = torch.randn(4)
    temporary = saved.clone()
    host = ops._offload(temporary, False)
    held = weakref.ref(temporary)
    del temporary
    assert held() is not None
    copy_out = runtime.STATE.copy_out_events[host.data_ptr()]
    ops._release(saved, host)
    compute = streams.compute[(7, 0, 1)][0]
    assert log[-1] == ("wait", copy_out, compute) and held() is None
    assert runtime.STATE.copy_sources == {} and runtime.stats()["temporary_sources"] == 1
    # The same tensor released as copied: held until the wait, not counted.
    host = ops._offload(saved, False)
    ops._release(saved, host)
    assert runtime.STATE.copy_sources == {} and runtime.stats()["temporary_sources"] == 1
    # A copy whose release never ran: its reload orders the compute stream
    # after the copy-out before the tensor it read goes.
    temporary = saved.clone()
    host = ops._offload(temporary, False)
    held = weakref.ref(temporary)
    del temporary
    copy_out = runtime.STATE.copy_out_events[host.data_ptr()]
    monkeypatch.setattr(ops, "_reload_buffer", lambda h, device, align: torch.empty_like(h))
    log.clear()
    ops._reload(host, torch.device("cuda"))
    assert log[0] == ("wait", copy_out, compute) and held() is None
    assert ("wait", copy_out, streams.h2d) in log  # and the reload's copy after it too
    assert runtime.STATE.copy_sources == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_temporary_handed_to_offload_is_not_reused_before_its_copy_landed():
    # On the device: the copy stream kept busy, so the copy-out of a
    # temporary queues behind; the temporary goes (as Inductor frees it),
    # and the compute stream writes a new tensor of its size at once. Were
    # the temporary's block handed out, the host copy would read 7s.
    d2h, _ = runtime.streams_for(torch.device("cuda"))
    saved = torch.randn(1 << 22, device="cuda")  # 16 MiB
    want = saved.cpu()
    # A first round takes the page-locked host block (its allocation may
    # wait for the device) and the allocator's device blocks.
    for _ in range(2):
        temporary = saved.clone()
        block = temporary.data_ptr()
        if _ == 1:
            with torch.cuda.stream(d2h):
                torch.cuda._sleep(200_000_000)
        host = runtime.offload(temporary, pin_memory=True, host_limit=-1)
        del temporary
        scribble = torch.full_like(saved, 7.0)
        runtime.release(saved, host)
        torch.cuda.synchronize()
        assert torch.equal(host, want), (_, scribble.data_ptr() == block, host[:4], want[:4])
        del host, scribble
