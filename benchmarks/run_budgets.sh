#!/usr/bin/env bash
# Budgets reached by offload plus recompute (mode="budget") against PyTorch's
# recompute-only activation_memory_budget, same process, one GPU:
#   bash benchmarks/run_budgets.sh OUT_DIR [decoder|hf_llama ...]
# Writes OUT_DIR/budgets_<model>.json (+ .txt, .err) and OUT_DIR/budgets.png
# (peak against step time, both planners, every model). Nothing is marked:
# mode="budget" may offload any eligible activation.
set -uo pipefail
out=${1:?usage: run_budgets.sh OUT_DIR [decoder|hf_llama ...]}
shift
models=${*:-decoder hf_llama}
out=$(realpath -m "$out")
source "$(dirname "$0")/bench_lib.sh"
variants="inductor"
for b in 0.8 0.6 0.4 0.2; do
  variants="$variants,recompute($b),offload_pass[none](mode=budget;memory_budget=$b)"
done
for model in $models; do
  case $model in
    decoder) bench budgets_decoder 290 --mark none --variants "$variants" ;;
    hf_llama) bench budgets_hf_llama 560 --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1 \
      --mark none --variants "$variants" ;;
    *) echo "unknown model $model (valid: decoder hf_llama)"; exit 2 ;;
  esac
done
python benchmarks/plot_budgets.py "$out"/budgets_*.json -o "$out/budgets.png"
