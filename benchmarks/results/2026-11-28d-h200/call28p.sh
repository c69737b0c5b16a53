#!/usr/bin/env bash
# Twenty-eighth session, call P: the CUDA tests on this session's code, with the new one for mode="budget"
# (recompute and copies, through the measured calls and re-plans, gradients against plain Inductor's and the
# exact fp64 ones), and the benchmark's new saved_for_recompute_mib on a small decoder.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
timeout 330 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_recompute.py tests/test_calibration.py tests/test_host_pool.py tests/test_runtime_ops.py tests/test_reliability.py tests/test_numerics.py tests/test_grouped_mlp.py tests/test_kernel_timing.py tests/test_random_views.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error\|assert" $OUT/gpu_tests.txt | head -20
bench small_budget 150 --layers 2 --hidden 512 --seq 1024 --batch 2 --steps 5 --mark none --variants "inductor,$(B 0.4)"
tail -1 $OUT/small_budget.err
python - $OUT/small_budget.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(r["variant"], r.get("step_ms"), r.get("peak_mib"), r.get("recompute_level"), r.get("recomputed_mib"), r.get("saved_for_recompute_mib"), r.get("error", ""))
PY
gzip -f $OUT/*.err
