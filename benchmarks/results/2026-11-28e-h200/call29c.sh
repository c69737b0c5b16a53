#!/usr/bin/env bash
# Twenty-ninth session, call C: call A's models again where it could not compare (float64 references: grouped_mm
# experts run as the per-expert loop there, ResNet's input cast) and those it did not reach (Mamba's scan at 128
# positions took 480 s: now 32).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
timeout 560 python benchmarks/model_zoo.py --device cuda --models resnet18,convnet,gpt_oss,deepseek_v3,gemma3,mixtral,olmo2,phi3,gemma2 --json $OUT/zoo.json > $OUT/zoo.txt 2> $OUT/zoo.err
echo "zoo: exit $?"
tail -12 $OUT/zoo.txt
grep -h "Error" $OUT/zoo.err | sort | uniq -c | sort -rn | head -8
gzip -f $OUT/zoo.err
