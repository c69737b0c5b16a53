#!/usr/bin/env bash
# Every benchmark recorded in docs/benchmarks.md, in one go, on one GPU:
#   bash benchmarks/run_h100.sh OUT_DIR
# Writes OUT_DIR/<name>.json (+ .txt table, .err log) per model / marker set
# and OUT_DIR/benchmarks.png. About 8 minutes on an H100.
set -uo pipefail
out=${1:?usage: run_h100.sh OUT_DIR}
out=$(realpath -m "$out")
source "$(dirname "$0")/bench_lib.sh"
# Every attention and MLP marked, against every peer (a peer mode that
# crashes on the installed torch is reported as such).
bench h2048_all 180 --mark all --profile --variants \
  "inductor,offload_pass,offload_pass(schedule=fixed),offload_pass(keep_if_no_gain=false),builtin(sync),builtin(stream),builtin(stream+prefetch),save_on_cpu,save_on_cpu(eager)"
# What the forward can hide: the attention of the first three layers.
bench h2048_attn3 80 --mark attn:3 --profile --variants "inductor,offload_pass,offload_pass(prefetch_bytes=134217728),builtin(sync)"
bench h2048_attn_but_last 60 --mark attn-but-last --variants "inductor,offload_pass"
bench h4096_all 130 --layers 4 --hidden 4096 --heads 32 --mark all --variants "inductor,offload_pass,builtin(sync),save_on_cpu(eager)"
bench moe_all 110 --model moe --layers 4 --hidden 2048 --batch 8 --mark roles=all --variants "inductor,offload_pass,builtin(sync),save_on_cpu(eager)"
python benchmarks/plot_results.py "$out"/h2048_all.json "$out"/h2048_attn3.json "$out"/h2048_attn_but_last.json \
  "$out"/h4096_all.json "$out"/moe_all.json -o "$out/benchmarks.png"
