#!/usr/bin/env bash
# Thirty-first session, call B: mode="budget" on ResNet-50 (timm, bf16, batch 128) after the two fixes: the
# budget selection no longer runs its greedy searches where the lowest peak it finds misses the budget by more than
# 10 % (call A: no level logged within 490 s), and levels PyTorch's partitioner would save a set again at are not
# partitioned. Budgets 0.6 and 0.8, logged level by level; beside it the CUDA tests of the layout test's file.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
( bench resnet50_budget 540 --model timm:resnet50 --batch 128 --mark none --log info --variants "inductor,$(B 0.6),$(B 0.8)" ) &
timeout 200 python -m pytest -q -p no:cacheprovider -k "cuda or device" tests/test_reliability.py tests/test_recompute.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error" $OUT/gpu_tests.txt | head -20
wait
grep -h "mode=budget\|\] \|variant" $OUT/resnet50_budget.err | cut -c1-330 | tail -45
gzip -f $OUT/resnet50_budget.err
tail -14 $OUT/resnet50_budget.txt
