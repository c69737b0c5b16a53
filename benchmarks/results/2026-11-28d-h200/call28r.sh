#!/usr/bin/env bash
# Twenty-eighth session, call R: the CUDA tests that now share tests/helpers.py's decoder_steps_on_device.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
timeout 400 python -m pytest -q -p no:cacheprovider tests/test_recompute.py tests/test_calibration.py tests/test_bench_variants.py -k "device or bench" > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error\|passed\|skipped" $OUT/gpu_tests.txt | head -10
