"""How good is the keep_if_no_gain trim? Its inputs captured from the benchmark
models, and the exact answer found by search.

The trim keeps on device every marked copy that the lowest peak does not need
(plan.keep_offloads_without_gain). Two questions it cannot answer itself:
does it copy the fewest bytes that reach that peak, and what R
(peak reduction / bytes copied) is possible at all at that peak?

  python benchmarks/trim_optimum.py --capture trim_inputs.json    # on a GPU: compile the three models
  python benchmarks/trim_optimum.py trim_inputs.json              # anywhere: the exact search

The capture compiles (one forward each, no step) the 6-layer hidden-2048 and
4-layer hidden-4096 decoders with every attention and MLP marked and the
4-layer MoE stack with every expert role marked, as bench_offload.py does,
and saves the trim's inputs: the step's memory without offload, each copy's
bytes and the points where it would be off the device. The search is a
branch and bound over the copies (largest first): exact, and quick on
these instances.
"""

from __future__ import annotations

import argparse
import json
import sys


def capture(path: str) -> None:
    import torch

    import offload_pass
    import offload_pass.planning.scheduling as scheduling
    from offload_pass.examples.models import make_decoder, make_moe

    caught = []
    trim = scheduling.keep_offloads_without_gain

    def recording(plan, live, off):
        caught.append({
            "groups": [[g.storage, g.nbytes, list(g.members)] for g in plan.groups],
            "live": [int(v) for v in live],
            "off": {k: list(v) for k, v in off.items()},
        })
        return trim(plan, live, off)

    scheduling.keep_offloads_without_gain = recording
    models = {
        "h2048_all": dict(model="decoder", layers=6, hidden=2048, heads=16, batch=2),
        "h4096_all": dict(model="decoder", layers=4, hidden=4096, heads=32, batch=2),
        "moe_all": dict(model="moe", layers=4, hidden=2048, batch=8),
    }
    result = {}
    for name, c in models.items():
        torch._dynamo.reset()
        if c["model"] == "moe":
            model = make_moe(c["layers"], c["hidden"], 2048, 8, dtype=torch.bfloat16, device="cuda")
            offload_pass.offload_modules(model, *[f"layers.{i}.experts" for i in range(c["layers"])])
        else:
            model = make_decoder(c["layers"], c["hidden"], c["heads"], dtype=torch.bfloat16, device="cuda")
            offload_pass.offload_modules(
                model, *[f"layers.{i}.{m}" for i in range(c["layers"]) for m in ("attn", "mlp")]
            )
        backend = offload_pass.make_backend()
        x = torch.randn(c["batch"], 4096, c["hidden"], device="cuda", dtype=torch.bfloat16)
        caught.clear()
        torch.compile(model, backend=backend)(x)
        plan = backend.plans[-1]
        result[name] = caught[-1] | {
            "predicted": [plan.baseline.peak, plan.prediction.peak],
            "kept_by_trim": [e.name for e in plan.entries if "keep_if_no_gain" in e.reason],
        }
        print(f"{name}: {len(caught[-1]['groups'])} marked copies", flush=True)
        del model, x
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(result, f)


def fewest_bytes(live: list[int], sizes: list[int], spans: list[tuple[int, int]], peak: int) -> tuple[int, list[int]]:
    """The fewest bytes of copies (and which) that keep memory at or below
    ``peak``: copy j takes sizes[j] off every point in spans[j]."""
    need = [max(v - peak, 0) for v in live]
    points = [i for i, n in enumerate(need) if n > 0]
    order = sorted(range(len(sizes)), key=lambda j: -sizes[j])
    covers = {j: [i for i in points if spans[j][0] <= i < spans[j][1]] for j in order}
    # What the copies from position k on could still take off each point.
    left = [dict.fromkeys(points, 0) for _ in range(len(order) + 1)]
    for k in range(len(order) - 1, -1, -1):
        left[k] = dict(left[k + 1])
        for i in covers[order[k]]:
            left[k][i] += sizes[order[k]]
    best = [sum(sizes) + 1, []]

    def search(k: int, chosen: list[int], total: int, short: dict) -> None:
        if total >= best[0]:
            return
        if all(v <= 0 for v in short.values()):
            best[0], best[1] = total, list(chosen)
            return
        if k == len(order) or any(short[i] > left[k][i] for i in points):
            return
        j = order[k]
        taken = dict(short)
        for i in covers[j]:
            taken[i] -= sizes[j]
        search(k + 1, chosen + [j], total + sizes[j], taken)
        search(k + 1, chosen, total, short)

    search(0, [], 0, {i: need[i] for i in points})
    return best[0], best[1]


def analyse(path: str) -> None:
    mib = 2**20
    with open(path) as f:
        data = json.load(f)
    print("| model | marked copies | lowest peak MiB | trim copies MiB | fewest MiB for that peak | "
          "best R at that peak | lowest peak with R >= 0.99 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, c in data.items():
        live = c["live"]
        sizes = [g[1] for g in c["groups"]]
        spans = [tuple(c["off"][g[0]]) for g in c["groups"]]
        off = list(live)
        for size, (a, b) in zip(sizes, spans):
            for i in range(a, b):
                off[i] -= size
        lowest, base = max(off), max(live)
        kept = set(c["kept_by_trim"])
        trimmed = sum(g[1] for g in c["groups"] if not set(g[2]) & kept)
        fewest, _ = fewest_bytes(live, sizes, spans, lowest)
        # The lowest peak at which some choice reaches R >= 0.99, stepping up
        # one MiB at a time from the lowest.
        reach = "-"
        for extra in range(0, (base - lowest) // mib):
            peak = lowest + extra * mib
            nbytes, _ = fewest_bytes(live, sizes, spans, peak)
            if nbytes and (base - peak) / nbytes >= 0.99:
                reach = f"{peak / mib:.1f} (+{extra} MiB, {nbytes / mib:.0f} MiB copied)"
                break
        print(f"| {name} | {len(sizes)} | {lowest / mib:.2f} | {trimmed / mib:.0f} | {fewest / mib:.0f} | "
              f"{(base - lowest) / fewest:.4f} | {reach} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="JSON of captured trim inputs (written with --capture, read without)")
    p.add_argument("--capture", action="store_true", help="compile the benchmark models on the GPU and write PATH")
    args = p.parse_args()
    if args.capture:
        capture(args.path)
    else:
        analyse(args.path)


if __name__ == "__main__":
    sys.exit(main())
