"""Host time of the runtime ops, per call, as the compiled graphs call them.

    python benchmarks/op_host_cost.py [--device cuda] [--calls 2000] [--kib 256] [--repeats 3]

Each op is called through the dispatcher (``torch.ops.offload_pass.*``, as
Inductor's generated code calls it) ``--calls`` times in a row on tensors of
``--kib`` KiB, and the host's wall time per call is printed: offload (into
a host-pool slot, as the rewrite lays copies out), release, reload and
wait_reload, beside an ``aten.add`` of the same size (one ordinary kernel
launch). The same four kernels registered through
``torch.library.custom_op`` (namespace ``offload_pass_custom_op``, what the
ops were defined with before) run alternately with them, so one process
compares the two registrations on one device. On CUDA a second table times
each step of ``offload`` alone (the pool slot, the stream switch, the event,
the copy's launch), through PyTorch's Python wrappers and through the C
methods ``ops.py`` calls instead. The device is synchronized
before each clock starts and not inside the loop: this is the time the host
spends before the next launch, which a forward whose launches are its
critical path pays per copy. Medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import offload_pass.runtime.ops as ops
from offload_pass.runtime.host_pool import clear_host_pools

OP_NAMES = ("offload", "release", "reload", "wait_reload")


def _register_custom_op_twins() -> object:
    """The four kernels behind ``torch.library.custom_op`` wrappers."""

    @torch.library.custom_op("offload_pass_custom_op::offload", mutates_args=())
    def offload(
        x: torch.Tensor, pin_memory: bool = True, host_limit: int = -1, pool: str = "",
        pool_bytes: int = 0, offset: int = 0, slot_bytes: int = 0,
    ) -> torch.Tensor:
        return ops._offload(x, pin_memory, host_limit, pool, pool_bytes, offset, slot_bytes)

    @torch.library.custom_op("offload_pass_custom_op::release", mutates_args=("host",))
    def release(x: torch.Tensor, host: torch.Tensor) -> None:
        ops._release(x, host)

    @torch.library.custom_op("offload_pass_custom_op::reload", mutates_args=())
    def reload(host: torch.Tensor, device: torch.device, align: int = 0) -> torch.Tensor:
        return ops._reload(host, device, align)

    @torch.library.custom_op("offload_pass_custom_op::wait_reload", mutates_args=("x",))
    def wait_reload(x: torch.Tensor) -> None:
        ops._wait_reload(x)

    return torch.ops.offload_pass_custom_op


def _per_call_us(fn, calls: int, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    elapsed = time.perf_counter() - start
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return elapsed / calls * 1e6


def _round(namespace, xs: list, device: torch.device, pool: str) -> tuple[dict[str, float], bool]:
    """One pass of the four ops over ``xs``: us per call, and whether every
    tensor came back equal."""
    calls, slot = len(xs), xs[0].numel() * xs[0].element_size()
    hosts: list = [None] * calls
    back: list = [None] * calls
    us = {
        "offload": _per_call_us(
            lambda i: hosts.__setitem__(
                i, namespace.offload.default(xs[i], True, -1, pool, slot * calls, i * slot, slot)
            ),
            calls, device,
        ),
        "release": _per_call_us(lambda i: namespace.release.default(xs[i], hosts[i]), calls, device),
        "reload": _per_call_us(lambda i: back.__setitem__(i, namespace.reload.default(hosts[i], device, 0)), calls, device),
        "wait_reload": _per_call_us(lambda i: namespace.wait_reload.default(back[i]), calls, device),
    }
    equal = all(torch.equal(a, b) for a, b in zip(xs, back))
    return us, equal


def measure(device: torch.device, calls: int, kib: int, repeats: int) -> dict:
    twins = _register_custom_op_twins()
    xs = [torch.randn(kib * 512, device=device, dtype=torch.bfloat16) for _ in range(calls)]
    styles = {"library": torch.ops.offload_pass, "custom_op": twins}
    samples: dict[str, dict[str, list[float]]] = {s: {n: [] for n in OP_NAMES} for s in styles}
    add: list[float] = []
    equal = True
    # The first round of each style warms up (streams, the pool page-locked).
    for r in range(repeats + 1):
        add_us = _per_call_us(lambda i: torch.add(xs[i], 1), calls, device)
        for style, namespace in styles.items():
            us, ok = _round(namespace, xs, device, f"op_host_cost_{style}")
            equal = equal and ok
            if r:
                for n in OP_NAMES:
                    samples[style][n].append(us[n])
        if r:
            add.append(add_us)
    clear_host_pools()
    return {
        "aten.add": statistics.median(add),
        **{style: {n: statistics.median(v) for n, v in per.items()} for style, per in samples.items()},
        "round_trip_equal": equal,
    }


def offload_parts(device: torch.device, calls: int, kib: int) -> dict[str, float]:
    """Host us per call of each step ``offload`` takes on CUDA (runtime/ops.py,
    host_pool.py), each timed alone over ``calls`` tensors: where a copy's
    host time goes."""
    from offload_pass.runtime.host_pool import host_buffer

    xs = [torch.randn(kib * 512, device=device, dtype=torch.bfloat16) for _ in range(calls)]
    slot = xs[0].numel() * xs[0].element_size()
    compute = torch.cuda.current_stream(device)
    d2h, _ = ops.streams_for(device)
    streams = ops._device_streams(compute.device_index)
    hosts: list = [None] * calls
    parts: dict[str, float] = {}
    for _ in range(2):  # the first pass page-locks the pool and warms up
        hosts = [None] * calls
        parts["host_buffer (pool slot)"] = _per_call_us(
            lambda i: hosts.__setitem__(i, host_buffer(xs[i], True, "op_host_cost_parts", slot * calls, i * slot, slot)),
            calls, device,
        )
        parts["torch.cuda.current_stream"] = _per_call_us(lambda i: torch.cuda.current_stream(device), calls, device)
        parts["stream.wait_stream(compute)"] = _per_call_us(lambda i: d2h.wait_stream(compute), calls, device)

        def enter_exit(i: int) -> None:
            with torch.cuda.stream(d2h):
                pass

        parts["with torch.cuda.stream(...)"] = _per_call_us(enter_exit, calls, device)
        parts["torch.cuda.Event() + record"] = _per_call_us(lambda i: torch.cuda.Event().record(d2h), calls, device)
        # What ops.py calls instead of the wrappers above.
        parts["ops: _compute_stream (kept Stream)"] = _per_call_us(lambda i: ops._compute_stream(streams), calls, device)

        _, fork_event = ops._compute_stream(streams)

        def fork(i: int) -> None:
            ops._record(fork_event, compute)
            ops._wait(fork_event, d2h)

        parts["ops: fork event record + wait"] = _per_call_us(fork, calls, device)

        def switch(i: int) -> None:
            torch._C._cuda_setStream(d2h.stream_id, d2h.device_index, d2h.device_type)
            torch._C._cuda_setStream(compute.stream_id, compute.device_index, compute.device_type)

        parts["ops: _cuda_setStream there and back"] = _per_call_us(switch, calls, device)
        parts["ops: torch.cuda.Event() + C record"] = _per_call_us(
            lambda i: ops._record(torch.cuda.Event(), d2h), calls, device
        )
        parts["_debug_has_internal_overlap"] = _per_call_us(
            lambda i: torch._debug_has_internal_overlap(hosts[i]), calls, device
        )
        parts["host.copy_(x, non_blocking=True)"] = _per_call_us(
            lambda i: hosts[i].copy_(xs[i], non_blocking=True), calls, device
        )
    del hosts
    torch.cuda.synchronize(device)
    clear_host_pools()
    return parts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--kib", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    device = torch.device(args.device)
    result = measure(device, args.calls, args.kib, args.repeats)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"host time per call (us), median of {args.repeats} x {args.calls} calls of {args.kib} KiB, "
          f"{name}, torch {torch.__version__}; every copy came back equal: {result['round_trip_equal']}")
    print(f"| op | torch.library.Library (ours) | torch.library.custom_op | saved |")
    print("|---|---|---|---|")
    for n in OP_NAMES:
        lib, wrapped = result["library"][n], result["custom_op"][n]
        print(f"| {n} | {lib:.1f} | {wrapped:.1f} | {wrapped - lib:.1f} |")
    lib, wrapped = sum(result["library"].values()), sum(result["custom_op"].values())
    print(f"| one copy (the four ops) | {lib:.1f} | {wrapped:.1f} | {wrapped - lib:.1f} |")
    print(f"| aten.add (one kernel launch) | {result['aten.add']:.1f} | | |")
    if device.type == "cuda":
        parts = offload_parts(device, args.calls, args.kib)
        parts["offload (the op, for the sum)"] = result["library"]["offload"]
        result["offload_parts"] = parts
        print("\nwhere offload's host time goes (us per call, each part timed alone):")
        print("| part | us |\n|---|---|")
        for part, us in parts.items():
            print(f"| {part} | {us:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, **vars(args), "us": result}, f, indent=1)


if __name__ == "__main__":
    main()
