#!/usr/bin/env bash
# The long run of tests/test_random_views.py, split over processes:
#   benchmarks/random_draws.sh FIRST_SEED DRAWS PROCS [LOG_DIR]
# Process i runs seeds FIRST_SEED + i*DRAWS/PROCS ... (OFFLOAD_PASS_RANDOM_*
# variables other than SEED/DRAWS pass through). Each process is stopped
# after ${RANDOM_DRAWS_LIMIT_S:-540} s; the counts are read from the verbose
# logs, so draws that finished count even when a process was stopped.
set -uo pipefail
first=$1 draws=$2 procs=$3 logs=${4:-/tmp/random_draws}
mkdir -p "$logs"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
per=$(( (draws + procs - 1) / procs ))
for ((i = 0; i < procs; i++)); do
  seed=$(( first + i * per ))
  OFFLOAD_PASS_RANDOM_SEED=$seed OFFLOAD_PASS_RANDOM_DRAWS=$per OFFLOAD_PASS_RANDOM_FOUND=0 OMP_NUM_THREADS=1 \
    timeout "${RANDOM_DRAWS_LIMIT_S:-540}" python -m pytest -v -p no:cacheprovider \
    tests/test_random_views.py > "$logs/seeds_$seed.log" 2>&1 &
done
wait
passed=$(cat "$logs"/seeds_*.log | grep -c "test_random_views_match_inductor\[seed=[0-9]*\] PASSED")
failed=$(cat "$logs"/seeds_*.log | grep -o "test_random_views_match_inductor\[seed=[0-9]*\] FAILED" | grep -o "seed=[0-9]*" | tr '\n' ' ')
vector=$(cat "$logs"/seeds_*.log | grep -o "vectorized C++ rounding alone in draw seed=[0-9]*" | grep -o "seed=[0-9]*" | sort -u | tr '\n' ' ')
echo "random views: $passed passed (of which differing by vectorized C++ rounding alone: ${vector:-none}), failed: ${failed:-none} (seeds $first..$(( first + procs * per - 1 )) asked)"
