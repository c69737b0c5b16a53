#!/usr/bin/env bash
# Twenty-eighth session, call M: which saved set PyTorch's partitioner gives the decoder under activation_memory_budget
# 1.0-0.7, in plain Inductor's compile and in offload_pass's (partition_probe.py, nothing run past the partition).
set -uo pipefail
export PYTHONPATH=$PWD; out=$OUT; source benchmarks/bench_lib.sh
timeout 500 python benchmarks/results/2026-11-28d-h200/partition_probe.py cuda > $OUT/probe.log 2>&1; echo rc $?
grep -v "Warning\|warn" $OUT/probe.log | tail -40
