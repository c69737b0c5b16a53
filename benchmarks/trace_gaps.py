"""Where a profiled step's time goes on the device: a chrome trace of one
step (``bench_offload.py --profile --trace-dir DIR``) read as the host's
latency before the first kernel, the compute stream's idle gaps (the
host's, where the kernel after the gap was launched after the kernel
before it ended; else a wait: on a copy, an event), and each copy
stream's first start, last end and busy time.

  python benchmarks/trace_gaps.py DIR/all_inductor.json.gz DIR/all_offload_pass.json.gz

Times in ms from the step's start on the host (the ``bench_offload.step``
range the benchmark records around the step; in older traces, the host's
first op).
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass

STEP_RANGE = "bench_offload.step"
GAP_US = 20.0  # shorter idle is the launch queue's own rhythm


@dataclass
class StepTimes:
    first_kernel_ms: float  # the device's first work after the step's start on the host
    end_ms: float  # the device's last work
    compute_busy_ms: float
    host_gap_ms: float  # compute stream idle, waiting for the host to launch
    host_gaps: int
    wait_gap_ms: float  # compute stream idle with its next kernel launched: a wait on an event / copy
    wait_gaps: int
    longest: list  # (start ms, idle ms, "host" | "wait", the kernel after it), the longest gaps
    copies: dict  # direction -> (first start ms, last end ms, busy ms)


def _events(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


def step_times(path: str) -> StepTimes:
    events = _events(path)
    starts = [e for e in events if e.get("name") == STEP_RANGE and e.get("cat") != "gpu_user_annotation"]
    # Traces profiled before the range existed: from the host's first op.
    t0 = float(starts[0]["ts"]) if starts else min(float(e["ts"]) for e in events if e.get("cat") == "cpu_op")
    launches = {
        e["args"]["correlation"]: float(e["ts"]) + float(e["dur"])
        for e in events if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not device:
        raise SystemExit(f"trace_gaps: {path} has no device events")
    kernels: dict[object, list[dict]] = {}
    for e in device:
        if e["cat"] == "kernel":
            kernels.setdefault(e["args"].get("stream"), []).append(e)
    compute = max(kernels, key=lambda s: sum(float(k["dur"]) for k in kernels[s]))
    work = sorted((e for e in device if e["args"].get("stream") == compute), key=lambda e: float(e["ts"]))
    host = wait = 0.0
    n_host = n_wait = 0
    gaps = []
    end = float(work[0]["ts"]) + float(work[0]["dur"])
    for e in work[1:]:
        start = float(e["ts"])
        idle = start - end
        if idle > GAP_US:
            launched = launches.get(e["args"].get("correlation"))
            by_host = launched is not None and launched > end
            if by_host:
                host, n_host = host + idle, n_host + 1
            else:
                wait, n_wait = wait + idle, n_wait + 1
            gaps.append(((end - t0) / 1e3, idle / 1e3, "host" if by_host else "wait", e["name"][:60]))
        end = max(end, start + float(e["dur"]))
    copies = {}
    for direction, tag in (("d2h", "DtoH"), ("h2d", "HtoD")):
        spans = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in device if e["cat"] == "gpu_memcpy" and tag in e["name"]]
        if spans:
            copies[direction] = (
                (min(s for s, _ in spans) - t0) / 1e3, (max(e for _, e in spans) - t0) / 1e3,
                sum(e - s for s, e in spans) / 1e3,
            )
    return StepTimes(
        first_kernel_ms=(min(float(e["ts"]) for e in device) - t0) / 1e3,
        end_ms=(max(float(e["ts"]) + float(e["dur"]) for e in device) - t0) / 1e3,
        compute_busy_ms=sum(float(e["dur"]) for e in work) / 1e3,
        host_gap_ms=host / 1e3, host_gaps=n_host, wait_gap_ms=wait / 1e3, wait_gaps=n_wait,
        longest=sorted(gaps, key=lambda g: -g[1])[:8], copies=copies,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    args = p.parse_args()
    print("| trace | first kernel ms | device end ms | compute busy | host gaps ms (n) | wait gaps ms (n) | d2h first-last (busy) | h2d first-last (busy) |")
    print("|---|---|---|---|---|---|---|---|")
    found = [(path, step_times(path)) for path in args.traces]
    for path, t in found:
        copy = {d: f"{a:.2f}-{b:.2f} ({c:.2f})" for d, (a, b, c) in t.copies.items()}
        print(
            f"| {path.rsplit('/', 1)[-1]} | {t.first_kernel_ms:.2f} | {t.end_ms:.2f} | {t.compute_busy_ms:.2f} | "
            f"{t.host_gap_ms:.2f} ({t.host_gaps}) | {t.wait_gap_ms:.2f} ({t.wait_gaps}) | {copy.get('d2h', '-')} | {copy.get('h2d', '-')} |"
        )
    for path, t in found:
        print(f"\n{path.rsplit('/', 1)[-1]}: longest compute-stream gaps (at ms, idle ms, why, next kernel)")
        for at, idle, why, name in t.longest:
            print(f"  {at:8.2f} {idle:6.2f} {why:4s} {name}")


if __name__ == "__main__":
    main()
