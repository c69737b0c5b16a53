#!/usr/bin/env bash
# Twenty-seventh session: recompute.levels_to_retry (6fadab5) on the device. A re-plan where no partitioned level
# reaches the budget partitions again the skipped levels that stood lower; expected: a recomputing level instead of
# offload alone at budgets out of reach (HF Llama 0.4: 2.3 x in the twenty-fifth session; Qwen3-MoE 0.6: 2.40 x).
# G: HF Llama, PyTorch's recompute at 0.4 and ours at 0.4 and 0.2 in one process (one variant after the other).
# H: HF Qwen3-MoE, PyTorch's recompute and ours at 0.6; the decoder, PyTorch's recompute and ours at 0.2.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
names=()
if [ "${1:-G}" = G ]; then
  H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
  bench hf_low 585 $H --mark none --variants "inductor,recompute(0.4),$(B 0.4),$(B 0.2)"; names=(hf_low)
else
  Q="--model hf_qwen3_moe --layers 4 --hidden 2048 --heads 16 --ffn 768 --experts 16 --batch 1"
  bench qwen_06 330 $Q --mark none --variants "inductor,recompute(0.6),$(B 0.6)"
  bench decoder_02 240 --mark none --variants "inductor,recompute(0.2),$(B 0.2)"; names=(qwen_06 decoder_02)
fi
for n in "${names[@]}"; do
  tail -1 $OUT/$n.err
  grep -h "planned again\|Traceback\|out of reach\|retr" $OUT/$n.err | cut -c1-260
done
gzip -f $OUT/*.err
for n in "${names[@]}"; do python benchmarks/results/2026-11-28b-h200/table.py $OUT/$n.json; done
