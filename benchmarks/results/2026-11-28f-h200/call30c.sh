#!/usr/bin/env bash
# Thirtieth session, call C: a convolutional network we did not write in the bench (timm ResNet-50, bf16, batch
# 128, 224 x 224, channels last): plain Inductor, the first two stages marked, mode="auto" (max_overhead 2 %),
# mode="budget" at 0.6. Partial JSON survives the time limit.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench resnet50 570 --model timm:resnet50 --batch 128 --mark none --variants "inductor,offload_pass[stages:2],offload_pass[none](mode=auto),$(B 0.6)"
tail -3 $OUT/resnet50.err
gzip -f $OUT/resnet50.err
cat $OUT/resnet50.txt | tail -30
