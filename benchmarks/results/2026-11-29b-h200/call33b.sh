#!/usr/bin/env bash
# Thirty-third session, call B: ResNet-50 (timm, bf16, batch 128) under mode="budget" at 0.4 and 0.2 after the
# selection's reloads were placed as the rewrite places them (its search had called offload alone out of reach at
# 4.5 GiB where the rewrite holds everything copied to 1.8 GiB), beside PyTorch's recompute(0.2); every budget search
# timed and counted (capture_selection.py, nothing pickled).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
D=benchmarks/results/2026-11-29b-h200
CAPTURE_PICKLE=0 timeout 570 python $D/capture_selection.py --deadline 550 --model timm:resnet50 --batch 128 --mark none \
  --log info --variants "inductor,recompute(0.2),$(B 0.4),$(B 0.2)" --json $OUT/resnet50_low.json \
  > $OUT/resnet50_low.txt 2> $OUT/resnet50_low.err
echo "exit $?"
grep -h "\[capture\]\|mode=budget: offload plus\|^\[[0-9]* s\]\|out of reach\|Traceback\|Error" $OUT/resnet50_low.err | cut -c1-420
gzip -f $OUT/resnet50_low.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/resnet50_low.json
