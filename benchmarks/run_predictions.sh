#!/usr/bin/env bash
# Predicted against measured, every benchmark model (ours and two Hugging
# Face models built from configs), one GPU:
#   bash benchmarks/run_predictions.sh OUT_DIR [PART]
# PART: ours | hf | all (default). Writes OUT_DIR/<name>.json (+ .txt, .err).
# Each table row has predicted_step_error / predicted_peak_error: the step
# simulator's prediction (plan.baseline for plain Inductor, plan.prediction
# for offload_pass) against the measured step and peak. About 4 + 8 minutes
# on an H100.
set -uo pipefail
out=${1:?usage: run_predictions.sh OUT_DIR [ours|hf|all]}
part=${2:-all}
out=$(realpath -m "$out")
source "$(dirname "$0")/bench_lib.sh"
if [[ $part == ours || $part == all ]]; then
  bench h2048_all 160 --mark all --variants "inductor,offload_pass"
  bench h2048_attn3 80 --mark attn:3 --variants "inductor,offload_pass"
  bench moe_all 100 --model moe --layers 4 --hidden 2048 --batch 8 --mark roles=all --variants "inductor,offload_pass"
fi
if [[ $part == hf || $part == all ]]; then
  # The issue's HF Llama: 8 x 2048, ffn 5632, seq 4096, batch 1, bf16.
  bench hf_llama 300 --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1 --mark all \
    --variants "inductor,offload_pass,offload_pass(mode=auto)"
  # HF Qwen3-MoE, grouped_mm experts: 4 layers x 2048, 16 experts top-2.
  bench hf_qwen3_moe 200 --model hf_qwen3_moe --layers 4 --hidden 2048 --heads 16 --ffn 768 --experts 16 --batch 1 \
    --mark roles=all --variants "inductor,offload_pass,offload_pass(keep_if_no_gain=false)"
fi
