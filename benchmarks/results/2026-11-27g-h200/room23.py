"""Room for the reloads, measured (twenty-third session, call C): for each of
the backward's first reloads (allocator events of ``_reload_buffer``), the
highest memory since the reload before it, plus its bytes, against the
ceiling the schedule used (the step's measured peak + reload_headroom 2 % of
the bytes offloaded), and how many allocator events earlier it could have
been issued under that ceiling. Given the simulated timeline too, the highest
memory between each reload and the one before it as simulated (the plan's
timeline, reload nodes in graph order) against the allocator's.

  python benchmarks/results/2026-11-27g-h200/room23.py benchmarks/results/2026-11-27g-h200/callC_mem_events.json.gz \
      [benchmarks/results/2026-11-27g-h200/callC_mem_simulated.json.gz]
"""
import gzip
import json
import sys

OFFLOADED = 1168 * 2**20  # the plan's bytes offloaded (call B)
events = json.load(gzip.open(sys.argv[1], "rt"))["events"]  # (action, bytes, stream, total after, file, line, function)
peak = max(e[3] for e in events)
ceiling = peak + 0.02 * OFFLOADED
reloads = [i for i, e in enumerate(events) if e[0] == "alloc" and "offload_pass" in e[6]]
backward = next(i for i, e in enumerate(events) if i > 0 and e[4] != events[0][4])
previous = backward
for k, i in enumerate(reloads[:12]):
    size = events[i][1]
    highest = max((e[3] for e in events[previous:i]), default=0)
    j, held = i, 0
    while j > previous and max(held, events[j - 1][3]) + size <= ceiling:
        j -= 1
        held = max(held, events[j][3])
    print(
        f"reload {k}: {size / 2**20:.0f} MiB; highest since the last {highest / 2**20:.0f} MiB, "
        f"+ its bytes {(highest + size) / 2**20:.0f} against the ceiling {ceiling / 2**20:.0f}; "
        f"could go {i - j} of the {i - previous} events earlier"
    )
    previous = i

if len(sys.argv) > 2:
    simulated = json.load(gzip.open(sys.argv[2], "rt"))
    nodes, live, phases = simulated["nodes"], simulated["live"], simulated["phases"]
    backward_nodes = [i for i, p in enumerate(phases) if p != "forward"]
    reload_nodes = [i for i in backward_nodes if nodes[i].endswith("_reload")]
    node_from, event_from = backward_nodes[0], backward
    for k, (i, a) in enumerate(zip(reload_nodes[:12], reloads[:12])):
        sim, measured = max(live[node_from:i]), max(e[3] for e in events[event_from:a])
        print(f"reload {k}: highest since the last, simulated {sim / 2**20:.1f} MiB, measured {measured / 2**20:.1f} ({(sim - measured) / 2**20:+.1f})")
        node_from, event_from = i, a
