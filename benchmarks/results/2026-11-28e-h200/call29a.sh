#!/usr/bin/env bash
# Twenty-ninth session, call A: models we did not write, every module marked, on the GPU: gradients against
# plain Inductor's and the exact (fp64) ones (benchmarks/model_zoo.py), after the fix that keeps a host copy's
# layout between convolutions (Inductor's channels-last preference).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
timeout 560 python benchmarks/model_zoo.py --device cuda --models resnet18,mamba,t5,gpt_oss,deepseek_v3,gemma3,mixtral,olmo2,phi3,gemma2 --json $OUT/zoo.json > $OUT/zoo.txt 2> $OUT/zoo.err
echo "zoo: exit $?"
tail -14 $OUT/zoo.txt
grep -h "Error" $OUT/zoo.err | sort | uniq -c | sort -rn | head -8
gzip -f $OUT/zoo.err
