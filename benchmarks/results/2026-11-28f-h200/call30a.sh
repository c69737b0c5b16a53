#!/usr/bin/env bash
# Thirtieth session, call A: offload reads a dense layout Inductor fixed (channels-last convolution outputs) as it
# is. The CUDA tests of eight files; the convnets of the zoo against float64; ResNet-18 everything marked
# (temporaries before: 9 of 16 copies, 2026-11-28e call D).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
timeout 240 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_reliability.py tests/test_runtime_ops.py tests/test_random_views.py tests/test_numerics.py tests/test_host_pool.py tests/test_grouped_mlp.py tests/test_exotic_saves.py tests/test_subclass.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error" $OUT/gpu_tests.txt | head -20
timeout 150 python benchmarks/results/2026-11-28f-h200/convnet_memory.py > $OUT/resnet.txt 2> $OUT/resnet.err; echo "resnet: exit $?"
tail -3 $OUT/resnet.err
timeout 180 python benchmarks/model_zoo.py --device cuda --models resnet18,convnet --json $OUT/zoo.json > $OUT/zoo.txt 2> $OUT/zoo.err
echo "zoo: exit $?"
gzip -f $OUT/zoo.err $OUT/resnet.err
tail -4 $OUT/zoo.txt
cat $OUT/resnet.txt
