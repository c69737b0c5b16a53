"""The benchmark's account of what else used the host's CPUs over its timed
steps (``benchmarks/host_load.py``): the description it gives from two
snapshots, and that a snapshot on Linux sees a thread of this process that
burns CPU. Pure Python, no device."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from benchmarks.host_load import HostLoad, describe, snapshot


def test_the_description_names_the_busiest_threads_and_processes_and_the_throttling():
    before = HostLoad(10.0, {"python (1)": 1.0, "pt_autograd_0 (2)": 0.5}, {"inductor_worker (7)": 3.0}, 100.0, 0.25)
    after = HostLoad(
        12.0, {"python (1)": 2.5, "pt_autograd_0 (2)": 0.5, "new (3)": 0.2},
        {"inductor_worker (7)": 4.0, "gone_before (8)": 0.0}, 106.0, 0.75,
    )
    assert describe(before, after) == (
        "over 2.00 s: the machine's CPUs busy 3.00 cores on average; threads here: python (1) 1.50 s, "
        "new (3) 0.20 s; other processes: inductor_worker (7) 1.00 s; cgroup throttled 0.500 s"
    )


def test_nothing_used_is_said_so():
    idle = HostLoad(1.0, {"python (1)": 1.0}, {}, 5.0, 0.0)
    assert describe(idle, HostLoad(2.0, {"python (1)": 1.0}, {}, 5.0, 0.0)) == (
        "over 1.00 s: the machine's CPUs busy 0.00 cores on average; threads here: none measurable; "
        "other processes: none measurable; cgroup throttled 0.000 s"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_busy_thread_of_this_process_is_seen():
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    before = snapshot()
    thread = threading.Thread(target=spin, name="spinner")
    thread.start()
    try:
        # Until the spinner used 0.2 s of CPU (10 s at most: a loaded CI machine shares its cores).
        deadline = time.monotonic() + 10
        while True:
            time.sleep(0.1)
            after = snapshot()
            used = {k: after.threads[k] - before.threads.get(k, 0.0) for k in after.threads}
            if max(used.values()) >= 0.2 or time.monotonic() > deadline:
                break
    finally:
        stop.set()
        thread.join()
    assert max(used.values()) >= 0.2, used
    assert after.busy - before.busy >= 0.2
