# Sourced by the run_*.sh scripts, with $out set: runs from the repository
# root and defines bench NAME TIME_LIMIT ARGS..., which runs bench_offload.py
# with ARGS and writes $out/NAME.json (+ .txt table, .err log), its
# --deadline 20 s under TIME_LIMIT (variants that would not fit are skipped
# and listed, the --interleave rounds cut to those that fit; a --deadline in
# ARGS wins), and
# B BUDGET, the variant name of mode="budget" at that memory_budget with no
# marks. It prints the code it runs as a hash of the package's files: the
# device's copy of the tree carries the working files, whose `git log` may
# name an older commit. Here, `bash benchmarks/bench_lib.sh` prints the
# same hash for the working tree.
mkdir -p "${out:-.}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
code_hash() {
  find offload_pass -name '*.py' | LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-12
}
echo "code: offload_pass $(code_hash)"
bench() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python benchmarks/bench_offload.py --deadline "$((limit - 20))" "$@" --json "$out/$name.json" \
    > "$out/$name.txt" 2> "$out/$name.err"
  echo "$name: exit $?"
}
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
