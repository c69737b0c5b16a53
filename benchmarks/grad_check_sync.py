"""The GPU gradient check with the runtime's copies synchronized: which direction's timing moves the bits.

Takes: ``--sync none|all|d2h|h2d|late``, optionally ``--traffic`` and
``long_context.py``'s own options (``--grad-check --grad-variants
ours_attn --out F``). Runs that gradient check in this process with the
runtime's copies of the chosen direction followed by a device synchronize
as soon as they are queued (``all``: both directions, synchronized before
and after; ``late``: none synchronized, every copy started about a
millisecond late on its stream and every reload's buffer filled with NaN
before its copy, so that a read the events do not order reads NaN or a
source already overwritten), and counts, for every ``wait_reload`` and
``release``, whether it found the event of its copy. ``--traffic``: a
thread copies host to device on a stream of its own all along, so that
every kernel of every run, plain Inductor's included, runs beside copies
as ours do.
Gives: the check's verdict (``--out``) and a ``SYNC`` line with the copies
per direction, the events found and missed, and the runtime's counters.

Where the check differs from plain Inductor asynchronously and is equal
with a direction synchronized, either that direction's copies are read or
written out of order somewhere the runtime's events do not cover, or they
overlap a kernel whose result depends on what else runs (a kernel that is
not deterministic): ``long_context.py``'s strict deterministic mode tells
the two apart.

  python benchmarks/grad_check_sync.py --sync h2d --grad-check --grad-variants ours_attn --out h2d.json
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# ``--sync late``: how long each copy waits on its stream before it starts.
LATE_CYCLES = 2_000_000


def _instrument(sync: str) -> dict:
    import torch

    import offload_pass.runtime.ops as ops
    from offload_pass.runtime.state import STATE

    seen = {"d2h": 0, "h2d": 0, "reload_found": 0, "reload_missed": 0, "release_found": 0, "release_missed": 0}
    copy_on, waits = ops._copy_on, ops._compute_stream_waits

    def synced(streams, stream, dst, src, after):
        if sync == "all":
            torch.cuda.synchronize()
        if sync == "late":
            if stream is streams.h2d and dst.is_floating_point():
                dst.fill_(float("nan"))  # on the compute stream, before the copy's fork
            with torch.cuda.stream(stream):
                torch.cuda._sleep(LATE_CYCLES)
        event = copy_on(streams, stream, dst, src, after)
        direction = "d2h" if stream is streams.d2h else "h2d"
        seen[direction] += 1
        if sync in ("all", direction):
            torch.cuda.synchronize()
        return event

    def counted(x, events, key):
        if x.is_cuda:
            kind = "reload" if events is STATE.reload_events else "release"
            seen[f"{kind}_{'found' if key in events else 'missed'}"] += 1
        return waits(x, events, key)

    ops._copy_on, ops._compute_stream_waits = synced, counted
    return seen


def _traffic() -> dict:
    """A thread copying 64 MiB host to device on a stream of its own until
    ``done["stop"]()`` (which joins it: a thread still in CUDA when the
    interpreter exits aborts the process)."""
    import threading

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--traffic copies host to device beside the check: it needs a GPU")
    done: dict = {"copies": 0}
    stopping = threading.Event()
    src = torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()

    def run():
        while not stopping.is_set():
            with torch.cuda.stream(stream):
                for _ in range(8):
                    dst.copy_(src, non_blocking=True)
            stream.synchronize()
            done["copies"] += 8

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def stop():
        stopping.set()
        thread.join()

    done["stop"] = stop
    return done


def main(argv: list[str]) -> int:
    valid = ("none", "all", "d2h", "h2d", "late")
    if "--sync" not in argv or argv.index("--sync") + 1 >= len(argv):
        raise SystemExit(f"--sync {'|'.join(valid)} is required")
    at = argv.index("--sync")
    sync = argv[at + 1]
    if sync not in valid:
        raise SystemExit(f"--sync {sync}: valid are {', '.join(valid)}")
    rest = argv[:at] + argv[at + 2:]
    traffic = "--traffic" in rest
    rest = [a for a in rest if a != "--traffic"]
    sys.path.insert(0, os.path.dirname(HERE))
    sys.path.insert(0, HERE)
    seen = _instrument(sync)
    moved = _traffic() if traffic else None
    import long_context

    from offload_pass.runtime.state import STATE

    try:
        long_context.main(rest)
    finally:
        if moved is not None:
            moved["stop"]()
    counters = {k: v for k, v in STATE.stats.items() if isinstance(v, int)}
    extra = {} if moved is None else {"traffic_copies_64mib": moved["copies"]}
    print("SYNC", json.dumps({"sync": sync, **seen, **extra, "stats": counters}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
