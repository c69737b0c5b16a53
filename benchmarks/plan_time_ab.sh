#!/usr/bin/env bash
# Planning time of two checkouts side by side, row by row on one host:
#   bash benchmarks/plan_time_ab.sh A_DIR B_DIR OUT LIMIT_S "LAYERS" "SEQS" "BUDGETS"
# e.g. bash benchmarks/plan_time_ab.sh /tmp/old . /tmp/ab 280 "8 16 32" "8192 65536" "0.5 0.25"
# Each (budget) is one wave: every (layers, seq) row of it runs from both
# checkouts at once, A's and B's run of a row pinned to the two hardware
# threads of one core (sibling CPUs, so a row's two runs share what the
# core gives; on a host without SMT, two CPUs). Writes
# OUT/<a|b>_b<budget>_L<layers>_S<seq>.json (plan_time.py --json) and .log;
# a run past LIMIT_S seconds is stopped and left without JSON.
set -uo pipefail
a=$(cd "$1" && pwd); b=$(cd "$2" && pwd); out=$3; limit=$4; layers=$5; seqs=$6; budgets=$7
mkdir -p "$out"
# One (first, second) CPU pair per core, from the kernel's sibling lists.
mapfile -t pairs < <(
  for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do cat "$f"; done | sort -u -t, -k1,1n |
    awk -F'[,-]' '{ if (NF > 1) print $1, $2; else print $1, "" }'
)
if [[ -z "${pairs[0]#* }" ]]; then  # no SMT: pair CPUs 0-1, 2-3, ...
  mapfile -t pairs < <(seq 0 2 $(( $(nproc) - 2 )) | awk '{ print $1, $1 + 1 }')
fi
echo "cpu pairs: ${pairs[*]}"
for budget in $budgets; do
  i=0
  for l in $layers; do
    for s in $seqs; do
      read -r first second <<< "${pairs[$(( i % ${#pairs[@]} ))]}"
      for side in a b; do
        dir=$a; cpu=$first
        [[ $side == b ]] && dir=$b && cpu=$second
        name="${side}_b${budget}_L${l}_S${s}"
        (cd "$dir" && PYTHONPATH="$dir" timeout "$limit" python benchmarks/plan_time.py --cpu "$cpu" --layers "$l" \
          --seqs "$s" --memory-budget "$budget" --json "$out/$name.json" > "$out/$name.log" 2>&1) &
      done
      i=$((i + 1))
    done
  done
  wait
done
