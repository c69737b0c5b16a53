#!/usr/bin/env bash
# Thirtieth session, call B: more convolutional networks we did not write (timm, every module marked) after the
# layout change, against float64, and how many copies read a temporary; as built, and channels last as users train
# them. Three processes at once (compiling is the host's work; 16 cores).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
zoo() {
  local tag=$1; shift
  timeout 540 python benchmarks/model_zoo.py --device cuda --json $OUT/zoo_$tag.json "$@" > $OUT/zoo_$tag.txt 2> $OUT/zoo_$tag.err
  echo "zoo $tag: exit $?"
}
zoo a --models timm:resnet18,timm:convnext_atto,timm:efficientnet_b0 &
zoo b --models timm:mobilenetv3_small_100,timm:densenet121,timm:regnetx_002,timm:vit_tiny_patch16_224 &
zoo cl --channels-last --models convnet,timm:resnet18,timm:convnext_atto,timm:efficientnet_b0 &
wait
for t in a b cl; do grep -h "Error" $OUT/zoo_$t.err | sort | uniq -c | sort -rn | head -4; gzip -f $OUT/zoo_$t.err; done
for t in a b cl; do echo "== $t"; grep -A8 "^model" $OUT/zoo_$t.txt; done
