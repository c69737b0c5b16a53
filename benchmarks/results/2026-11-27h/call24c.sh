#!/usr/bin/env bash
# (diag/sweep.py and diag/codediff.py as they were then: sweep24.py and codediff24.py here, whose docstring says how they differed)
# Twenty-fourth session, call C: Inductor's generated code for OPT and BERT with dropout on CUDA, plain Inductor
# and offload_pass (deterministic mode), to find where the offloaded step's gradients part from plain Inductor's.
set -uo pipefail
export PYTHONPATH=$PWD
mkdir -p $OUT/opt $OUT/bertd
DEVICE=cuda timeout 280 python diag/codediff.py opt $OUT/opt > $OUT/opt/log.txt 2>&1 &
DEVICE=cuda timeout 280 python diag/codediff.py bert_dropout $OUT/bertd > $OUT/bertd/log.txt 2>&1 &
wait
tail -2 $OUT/opt/log.txt $OUT/bertd/log.txt
