#!/usr/bin/env bash
# Seventeenth session, call B: diag17b.py (two plains taking turns; every measured call; the CUDA test's gradients).
set -uo pipefail
export PYTHONPATH=$PWD
timeout 400 python diag/diag17b.py > $OUT/diag17b.txt 2> $OUT/diag17b.err; echo "exit $?"
grep -v "^    \|^  plan\|^Plan\|^  [a-z]" $OUT/diag17b.txt | head -5
cat $OUT/diag17b.txt | grep -v "^   " | cut -c1-220 | head -120
tail -5 $OUT/diag17b.err
