#!/usr/bin/env bash
# mode=auto / mode=budget against hand-chosen marker sets (issue: automatic,
# bandwidth-aware selection), on one GPU:
#   bash benchmarks/run_auto_h100.sh OUT_DIR [h2048|h4096|moe ...]
# Writes OUT_DIR/auto_<model>.json (+ .txt table, .err log) and
# OUT_DIR/pareto.png (memory saved against overhead, predictions hollow).
# Each model takes 5-7 minutes on an H100; name the models to run a subset.
set -uo pipefail
out=${1:?usage: run_auto_h100.sh OUT_DIR [h2048|h4096|moe ...]}
shift
models=${*:-h2048 h4096 moe}
out=$(realpath -m "$out")
source "$(dirname "$0")/bench_lib.sh"
auto="offload_pass[none](mode=auto;max_overhead=0.01),offload_pass[none](mode=auto),offload_pass[none](mode=auto;max_overhead=0.05),offload_pass[none](mode=auto;max_overhead=0.1),offload_pass[none](mode=auto;max_overhead=0.3)"
budget="offload_pass[none](mode=budget;memory_budget=0.8),offload_pass[none](mode=budget;memory_budget=0.6)"
for model in $models; do
  case $model in
    h2048) bench auto_h2048 560 --mark none --variants \
      "inductor,offload_pass[attn:1],offload_pass[attn:2],offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[mlp:3],offload_pass[layers:2],offload_pass[all],$auto,offload_pass[attn](mode=auto),$budget" ;;
    h4096) bench auto_h4096 560 --layers 4 --hidden 4096 --heads 32 --mark none --variants \
      "inductor,offload_pass[attn:1],offload_pass[attn:2],offload_pass[attn-but-last],offload_pass[all],$auto,$budget" ;;
    moe) bench auto_moe 560 --model moe --layers 4 --hidden 2048 --batch 8 --mark none --variants \
      "inductor,offload_pass[roles=act],offload_pass[roles=fc1+fc2],offload_pass[roles=all],$auto,$budget" ;;
    *) echo "unknown model $model (valid: h2048 h4096 moe)"; exit 2 ;;
  esac
done
python benchmarks/plot_pareto.py "$out"/auto_*.json -o "$out/pareto.png"
