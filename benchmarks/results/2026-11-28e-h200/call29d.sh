#!/usr/bin/env bash
# Twenty-ninth session, call D: the new test on the GPU by name; timm ResNet-18 with every module marked.
set -uo pipefail
source benchmarks/bench_lib.sh
timeout 120 python -m pytest -q -p no:cacheprovider -rA tests/test_reliability.py -k host_copy_between 2>&1 | grep -E "PASSED|FAILED|passed|failed"
timeout 200 python benchmarks/results/2026-11-28e-h200/convnet_memory.py > $OUT/resnet.txt 2> $OUT/resnet.err; echo "resnet: exit $?"
cat $OUT/resnet.txt; tail -3 $OUT/resnet.err
