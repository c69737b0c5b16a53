#!/usr/bin/env bash
# Thirteenth session, call A: offload's own fallback lowering (temporaries 0, gradients), GPU tests,
# then the decoder's auto sweep and hand sets interleaved (synchronized and back to back).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
T0=$SECONDS
timeout 100 python diag/gradcheck12.py 18 nocache short 2>&1 | grep -E "misses|^    1:|plans|generated" | cut -c1-400
echo "[gradcheck $((SECONDS-T0)) s]"
timeout 240 python -m pytest -q -k "cuda or device or temporary" tests/test_calibration.py tests/test_host_pool.py tests/test_runtime_ops.py tests/test_reliability.py tests/test_numerics.py > $OUT/pytest_gpu.txt 2>&1
echo "pytest rc $?"; tail -1 $OUT/pytest_gpu.txt; grep -n "^E " $OUT/pytest_gpu.txt | head -5 | cut -c1-200
echo "[tests $((SECONDS-T0)) s]"
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
left=$((590 - (SECONDS-T0)))
bench dec_front $left --interleave 5 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:2],offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
tail -2 $OUT/dec_front.err
python diag/summ12.py $OUT/dec_front.json | cut -c1-260
