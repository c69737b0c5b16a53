#!/usr/bin/env bash
# Twenty-third session, call C: HF Llama with attention and MLP marked: the allocator's history over one step (after the calibration settled) against the simulated timeline, to see whether the reloads that wait for room had it on the device.
set -uo pipefail
export PYTHONPATH=$PWD:$PWD/benchmarks
timeout 400 python benchmarks/memory_at_peak.py --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1 --mark all --out $OUT/mem > $OUT/mem.txt 2> $OUT/mem.err; echo "mem: exit $?"
tail -3 $OUT/mem.err
grep -n "max_memory_allocated\|peak over the step\|sixteenth\|below the step" $OUT/mem.txt | head
gzip $OUT/mem/events.json $OUT/mem/simulated.json 2>/dev/null; ls -la $OUT/mem | head -20
