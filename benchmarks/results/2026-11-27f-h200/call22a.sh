#!/usr/bin/env bash
# Twenty-second session, call A: the CUDA tests on the final code; item 4 (HF Llama, attention and MLP marked) timed paired, one profiled synchronized step of each variant read by trace_gaps.py.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
timeout 260 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_calibration.py tests/test_host_pool.py tests/test_runtime_ops.py tests/test_reliability.py tests/test_numerics.py tests/test_grouped_mlp.py tests/test_kernel_timing.py tests/test_random_views.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error" $OUT/gpu_tests.txt | head -10
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_all 300 $H --mark all --interleave 4 --paired --profile --trace-dir $OUT/traces --variants "inductor,offload_pass,inductor"
tail -2 $OUT/hf_all.err
python benchmarks/trace_gaps.py $OUT/traces/*.json.gz
python - $OUT/hf_all.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| variant | step | unsync | fwd | bwd | host fwd | vs floor2 | unsync vs floor2 | paired | paired unsync | R | offloaded |")
for r in d["results"]:
    g = lambda k: (f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k, "-")))
    print("| " + " | ".join([r["variant"]] + [g(k) for k in ("step_ms", "unsynced_step_ms", "forward_ms", "backward_ms", "host_forward_ms", "vs_floor2", "unsynced_vs_floor2", "paired_slowdown", "paired_unsynced_slowdown", "R", "offloaded_mib")]) + " |")
print("floor2", d["results"][1].get("floor2_ms"), "bandwidth", d["bandwidth_gbps"])
PY
