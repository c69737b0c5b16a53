#!/usr/bin/env bash
# Twenty-eighth session, call S: the whole test suite on torch 2.11 with CUDA (the device's 16 CPUs, 14 workers),
# as far as the call's limit goes; every test's outcome is in $OUT/suite.txt as it runs.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
python -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
timeout 420 python -m pytest -v -rfE -p no:cacheprovider -n 14 --dist loadgroup --durations=25 tests > $OUT/suite.txt 2>&1; echo "suite: exit $?"
grep -c " PASSED " $OUT/suite.txt; grep -c " SKIPPED " $OUT/suite.txt; grep -c " FAILED \| ERROR " $OUT/suite.txt
grep " FAILED \| ERROR " $OUT/suite.txt | head -30
tail -5 $OUT/suite.txt
