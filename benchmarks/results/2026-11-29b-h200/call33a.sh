#!/usr/bin/env bash
# Thirty-third session, call A: ResNet-50 (timm, bf16, batch 128) under mode="budget" at 0.8 and 0.6, every budget
# search timed, counted and its problem pickled (capture_selection.py), to study the searches' cost on the CPU.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
D=benchmarks/results/2026-11-29b-h200
timeout 560 python $D/capture_selection.py --deadline 540 --model timm:resnet50 --batch 128 --mark none --log info \
  --variants "inductor,$(B 0.8),$(B 0.6)" --json $OUT/resnet50_capture.json > $OUT/resnet50_capture.txt 2> $OUT/resnet50_capture.err
echo "exit $?"
grep -h "\[capture\]\|mode=budget: offload plus\|^\[[0-9]* s\]" $OUT/resnet50_capture.err | cut -c1-330
gzip -f $OUT/resnet50_capture.err
ls -la $OUT
