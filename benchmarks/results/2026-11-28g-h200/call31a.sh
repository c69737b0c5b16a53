#!/usr/bin/env bash
# Thirty-first session, call A: where mode="budget"'s compile time goes on ResNet-50 (timm, bf16, batch 128,
# budget 0.6; did not finish within 400 s in the thirtieth session's call C), logged level by level; beside it the
# CUDA tests of eight files (the storage-copy layout test's CUDA variant never ran on a GPU) and ResNet-18 with
# every module marked after the storage-copy fix. (The call ran a copy of 2026-11-28f-h200/convnet_memory.py in this
# folder, identical to it, since removed.)
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
( bench resnet50_budget 560 --model timm:resnet50 --batch 128 --mark none --log info --variants "inductor,$(B 0.6)" ) &
timeout 300 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_reliability.py tests/test_runtime_ops.py tests/test_random_views.py tests/test_numerics.py tests/test_host_pool.py tests/test_grouped_mlp.py tests/test_exotic_saves.py tests/test_subclass.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error" $OUT/gpu_tests.txt | head -20
timeout 200 python benchmarks/results/2026-11-28f-h200/convnet_memory.py > $OUT/resnet18.txt 2> $OUT/resnet18.err; echo "resnet18: exit $?"
tail -3 $OUT/resnet18.err
wait
grep -h "mode=budget\|\] \|variant" $OUT/resnet50_budget.err | cut -c1-400 | tail -40
gzip -f $OUT/resnet18.err $OUT/resnet50_budget.err
tail -12 $OUT/resnet50_budget.txt
cat $OUT/resnet18.txt
