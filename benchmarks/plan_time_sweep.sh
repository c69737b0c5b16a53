#!/usr/bin/env bash
# Planning time of the Llama-3-8B shape over layer counts and sequence
# lengths, each run its own process pinned to its own CPU, all at once:
#   bash benchmarks/plan_time_sweep.sh OUT LIMIT_S "LAYERS" "SEQS" [--no-recompute]
# e.g. bash benchmarks/plan_time_sweep.sh /tmp/pt 540 "8 16 32" "8192 65536"
# Writes OUT/plan_time_L<layers>_S<seq>[_norec].json (plan_time.py --json)
# and OUT/*.log; a run past LIMIT_S seconds is stopped and left without JSON.
# PLAN_TIME_FIRST_CPU=N pins the runs from CPU N on (two sweeps at once).
set -uo pipefail
out=$1; limit=$2; layers=$3; seqs=$4; shift 4
extra=("$@")
suffix=""
[[ " ${extra[*]:-} " == *" --no-recompute "* ]] && suffix="_norec"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
cpus=$(nproc)
cpu=${PLAN_TIME_FIRST_CPU:-0}
for l in $layers; do
  for s in $seqs; do
    name="plan_time_L${l}_S${s}${suffix}"
    timeout "$limit" python "$here/plan_time.py" --cpu $((cpu % cpus)) --layers "$l" --seqs "$s" \
      --json "$out/$name.json" "${extra[@]}" > "$out/$name.log" 2>&1 &
    cpu=$((cpu + 1))
  done
done
wait
