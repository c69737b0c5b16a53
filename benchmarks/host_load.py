"""What else used the host's CPUs while a benchmark timed its steps (Linux).

``snapshot()`` reads, once, the CPU seconds each thread of this process and
each process of the machine used so far, the machine's busy and idle time
(``/proc/stat``) and the cgroup's CPU throttling (``cpu.stat``);
``describe(before, after)`` says what happened in between: the machine's
busy cores on average, the busiest threads here and processes elsewhere,
and time the cgroup was throttled. A busy thread beside the main one slows
every call the main thread makes (they share the GIL whenever a torch call
releases it); busy processes or a throttled cgroup slow it too. Elsewhere
than on Linux both give nothing.
"""

from __future__ import annotations

import dataclasses
import os
import time

__all__ = ["HostLoad", "snapshot", "describe"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclasses.dataclass
class HostLoad:
    wall: float
    threads: dict[str, float]  # "name (tid)" -> CPU seconds, this process
    processes: dict[str, float]  # "name (pid)" -> CPU seconds, other processes
    busy: float  # the machine's busy CPU seconds (all cores)
    throttled_s: float  # the cgroup's throttled time so far (0 where not known)


def _cpu_seconds(stat_path: str) -> tuple[str, float] | None:
    try:
        with open(stat_path) as f:
            stat = f.read()
    except OSError:  # gone meanwhile
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _entries(directory: str, skip: str = "") -> dict[str, float]:
    out = {}
    if not os.path.isdir(directory):
        return out
    for entry in os.listdir(directory):
        if not entry.isdigit() or entry == skip:
            continue
        read = _cpu_seconds(os.path.join(directory, entry, "stat"))
        if read is not None:
            out[f"{read[0]} ({entry})"] = read[1]
    return out


def _machine_busy() -> float:
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    return (sum(fields[:8]) - idle) / _TICKS


def _throttled() -> float:
    for path, key, scale in (("/sys/fs/cgroup/cpu.stat", "throttled_usec", 1e-6),
                             ("/sys/fs/cgroup/cpu/cpu.stat", "throttled_time", 1e-9)):
        try:
            with open(path) as f:
                for line in f:
                    name, value = line.split()
                    if name == key:
                        return int(value) * scale
        except OSError:
            continue
    return 0.0


def snapshot() -> HostLoad:
    return HostLoad(
        time.perf_counter(), _entries("/proc/self/task"), _entries("/proc", skip=str(os.getpid())),
        _machine_busy(), _throttled(),
    )


def _top(before: dict[str, float], after: dict[str, float], top: int) -> str:
    used = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)[:top]
    return ", ".join(f"{k} {s:.2f} s" for s, k in used if s > 0) or "none measurable"


def describe(before: HostLoad, after: HostLoad, top: int = 4) -> str:
    wall = after.wall - before.wall
    return (
        f"over {wall:.2f} s: the machine's CPUs busy {(after.busy - before.busy) / max(wall, 1e-9):.2f} cores on "
        f"average; threads here: {_top(before.threads, after.threads, top)}; other processes: "
        f"{_top(before.processes, after.processes, top)}; cgroup throttled {after.throttled_s - before.throttled_s:.3f} s"
    )
