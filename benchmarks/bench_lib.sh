# Sourced by the run_*.sh scripts, with $out set: runs from the repository
# root and defines bench NAME TIME_LIMIT ARGS..., which runs bench_offload.py
# with ARGS and writes $out/NAME.json (+ .txt table, .err log).
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
bench() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python benchmarks/bench_offload.py "$@" --json "$out/$name.json" > "$out/$name.txt" 2> "$out/$name.err"
  echo "$name: exit $?"
}
