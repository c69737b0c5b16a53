"""Which calls of a compiled graph the feedback loop measures, by number.

Takes: nothing. Gives: the call numbers as named constants and the
functions that derive the turns from them. Call 1 warms up (autotuning,
host pools, the lazy backward compile). The plan's calls are measured from
``FIRST_MEASURED_CALL`` on: after a compile's idle the device runs at its
highest clock, and under sustained load its power cap lowers the clock
within about a second, so earlier calls read the step a user sees too fast.

mode="auto" also measures plain Inductor's graph of the same Dynamo graph:
compiled (and warmed up) at ``PLAIN_COMPILE_CALL``, then run in blocks of
``TURN_BLOCK_CALLS`` calls by turns with the plan's (plain, plan, plan,
plain, repeated, ``TURN_BLOCKS`` blocks ending at the plan's last measured
call), the first ``SETTLING_CALLS`` of each block not measured: a call right
after the other graph's runs at the clock that one left, and each graph's
blocks sit at the same mean call, so a clock still drifting favours neither.
docs/benchmarks.md gives the measurements behind these numbers.
"""

from __future__ import annotations

from typing import Sequence

__all__ = [
    "FIRST_MEASURED_CALL", "MEASURED_CALLS", "PLAIN_COMPILE_CALL", "SETTLING_CALLS", "TURN_BLOCKS", "TURN_BLOCK_CALLS",
    "call_ranges", "first_plain_call", "measured_in_turn", "measured_in_turns", "plain_calls", "plain_measured_calls",
    "plan_measured_calls", "runs_plain_in_turn", "turn_calls",
]

# The plan's first measured call, and how many are measured (40, 41, 42
# where a step calls the graph once); the check is made against their median.
FIRST_MEASURED_CALL = 40
MEASURED_CALLS = 3
# mode="auto": the call that compiles plain Inductor's graph and runs it (a warm-up).
PLAIN_COMPILE_CALL = 2
# mode="auto": the turns' blocks, how many calls of each settle unmeasured, how many blocks.
TURN_BLOCK_CALLS = 4
SETTLING_CALLS = 2
TURN_BLOCKS = 8


def turn_calls() -> int:
    """How many calls the turns take (32: calls 11-42)."""
    return TURN_BLOCKS * TURN_BLOCK_CALLS


def measured_in_turns() -> int:
    """How many calls of each graph the turns measure (8)."""
    return TURN_BLOCKS // 2 * (TURN_BLOCK_CALLS - SETTLING_CALLS)


def first_plain_call() -> int:
    """Plain Inductor's first call of the turns (11), where they start."""
    return FIRST_MEASURED_CALL + MEASURED_CALLS - turn_calls()


def runs_plain_in_turn(turn: int) -> bool:
    """Whether call ``first_plain_call() + turn`` of the turns runs plain
    Inductor's graph (blocks plain, plan, plan, plain, repeated)."""
    return (turn // TURN_BLOCK_CALLS) % 4 in (0, 3)


def measured_in_turn(turn: int) -> bool:
    """Whether call ``first_plain_call() + turn`` of the turns is measured:
    not among the first ``SETTLING_CALLS`` of its block."""
    return 0 <= turn < turn_calls() and turn % TURN_BLOCK_CALLS >= SETTLING_CALLS


def plain_measured_calls() -> list[int]:
    """The calls plain Inductor's graph runs measured on (13, 14, 25, 26, 29, 30, 41, 42)."""
    return [first_plain_call() + t for t in range(turn_calls()) if runs_plain_in_turn(t) and measured_in_turn(t)]


def plan_measured_calls() -> list[int]:
    """The plan's calls measured in the turns (17, 18, 21, 22, 33, 34, 37, 38)."""
    return [
        first_plain_call() + t for t in range(turn_calls()) if not runs_plain_in_turn(t) and measured_in_turn(t)
    ]


def plain_calls() -> list[int]:
    """Every call of the turns that runs plain Inductor's graph (11-14, 23-30, 39-42)."""
    return [first_plain_call() + t for t in range(turn_calls()) if runs_plain_in_turn(t)]


def call_ranges(calls: Sequence[int]) -> str:
    """Calls as ranges: "11-14, 23-30, 39-42"."""
    runs: list[list[int]] = []
    for call in calls:
        if runs and call == runs[-1][-1] + 1:
            runs[-1].append(call)
        else:
            runs.append([call])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
