#!/usr/bin/env bash
# Twentieth session, call A: plain Inductor and two hand plans measured steady, in turns (ABBA), in blocks.
set -uo pipefail
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 540 python diag/pairs20.py > $OUT/pairs20.txt 2> $OUT/pairs20.err; echo "exit $?"
tail -3 $OUT/pairs20.err
cat $OUT/pairs20.txt
