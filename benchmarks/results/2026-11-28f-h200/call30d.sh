#!/usr/bin/env bash
# Thirtieth session, call D: timm ResNet-50 (call C's settings) under mode="auto" after the change that runs plain
# Inductor's graph in place of a plan that frees nothing; plain Inductor beside it.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench resnet50_auto 280 --model timm:resnet50 --batch 128 --mark none --variants "inductor,offload_pass[none](mode=auto)"
zcat -f $OUT/resnet50_auto.err | grep -h "not run\|fell back\|frees nothing" | cut -c1-400 | tail -4
gzip -f $OUT/resnet50_auto.err
tail -8 $OUT/resnet50_auto.txt
