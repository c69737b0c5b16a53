"""Thirty-third session: run benchmarks/bench_offload.py with every call of the budget search
(scheduling.choose_for_budget) timed, its simulations counted by the search phase that asked for them, and its
problem (StepWithoutOffload, candidates, budget in bytes) pickled to $OUT/problem_N.pkl for study on the CPU
(CAPTURE_PICKLE=0: timed and counted only). Run: python capture_selection.py BENCH_ARGS..."""
import collections, os, pickle, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from offload_pass.planning import scheduling, selection  # noqa: E402

OUT = os.environ.get("OUT", ".")
counts: collections.Counter = collections.Counter()
_simulate = selection.simulate_offload


def _counted(step, chosen):
    counts[sys._getframe(1).f_code.co_name] += 1
    return _simulate(step, chosen)


_choose = scheduling.choose_for_budget
calls = [0]


def _captured(step, pool, budget):
    calls[0] += 1
    if os.environ.get("CAPTURE_PICKLE", "1") != "0":
        with open(f"{OUT}/problem_{calls[0]}.pkl", "wb") as f:
            pickle.dump((step, list(pool), budget), f)
    counts.clear()
    selection.simulate_offload = _counted
    start = time.time()
    try:
        chosen, est = _choose(step, pool, budget)
    finally:
        selection.simulate_offload = _simulate
    print(
        f"[capture] problem {calls[0]}: {len(pool)} candidates, {len(step.live)} points, budget "
        f"{budget / 2**20:.0f} MiB: {time.time() - start:.1f} s, chose {len(chosen)}, peak {est.peak / 2**20:.0f} MiB, "
        f"step {est.step_ms:.2f} ms, simulations {dict(counts)}",
        file=sys.stderr, flush=True,
    )
    return chosen, est


scheduling.choose_for_budget = _captured
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import bench_offload as bench  # noqa: E402

sys.argv = ["bench_offload.py"] + sys.argv[1:]
bench.main()
