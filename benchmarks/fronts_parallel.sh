#!/usr/bin/env bash
# The predicted fronts of fronts.py, one process per (sequence length, group
# of budgets), each on its own CPU, all at once; then merged into one file:
#   bash benchmarks/fronts_parallel.sh LAYERS "SEQS" "BUDGET_GROUPS" OUT_JSON LIMIT_S
# e.g. bash benchmarks/fronts_parallel.sh 32 "8192 16384 32768 65536" "0.9,0.5,0.1 0.8,0.4 0.7,0.3 0.6,0.2" f.json 560
# Every process plans the baseline and the two checkpointing points again
# (the merge keeps one of each, the same figures), the first group of each
# sequence length ours at checkpointing's peak too; a process past LIMIT_S
# seconds is stopped, the points it wrote kept. Logs beside OUT_JSON.
set -uo pipefail
layers=$1; seqs=$2; groups=$3; out=$4; limit=$5
parts=$(mktemp -d)
here=$(cd "$(dirname "$0")/.." && pwd)
cpu=0
for s in $seqs; do
  at=yes
  for g in $groups; do
    (cd "$here" && timeout "$limit" taskset -c $(( cpu % $(nproc) )) python benchmarks/fronts.py --layers "$layers" \
      --seqs "$s" --budgets "$g" --at-checkpointing $at --out "$parts/s${s}_b${g}.json" > "$parts/s${s}_b${g}.log" 2>&1) &
    cpu=$((cpu + 1)); at=no
  done
done
wait
cat "$parts"/*.log > "${out%.json}.log"
python "$here/benchmarks/fronts.py" --merge "$parts"/*.json --out "$out"
