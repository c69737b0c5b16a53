"""The selection's search model: the step time and peak of one set of copies.

Takes: a ``StepWithoutOffload`` and the ``Candidate``s chosen. Gives
``simulate_offload(step, chosen)``, an ``Estimate``. Those estimates only
choose: the plan reports the step simulator's prediction over the rewritten
graphs (``step_model``).

The model: each copy's runtime ops cost what the step simulator charges
them (compute-stream time per op, the host's time to issue them where the
device waits for the host). Copies queue one after the other on the
device->host stream from the end of their producer. Each is released where
the rewrite releases it (``schedules.schedule_releases``, the one rule for
that): once it has landed, or earlier, the compute stream waiting for it,
where the copies still held would lift memory over the peak of the ideal
(every copy off from its last forward use); the forward's clock includes
those waits. A copy's device memory is free from its release until its
reload is issued. Each reload is issued where the rewrite issues it
(``schedules.schedule_reloads`` under ``schedules.reload_ceiling``): as late
as lands it before its consumer, later where memory would rise over the
ideal's peak plus the reload headroom; reloads queue on the host->device
stream and the backward waits at a consumer whose reload has not landed.
The step is forward + backward compute plus those waits and the runtime
ops' time; the peak is the highest point of memory over the step.
"""

from __future__ import annotations

import bisect
import functools
import operator
from typing import Optional, Sequence

import numpy as np

from offload_pass.planning.lifetimes import off_device_points
from offload_pass.planning.release_points import CopyOut, schedule_releases
from offload_pass.planning.reload_points import RELOAD_MARGIN, Reload, reload_ceiling, schedule_reloads
from offload_pass.planning.selection_step import Candidate, Estimate, StepWithoutOffload

__all__ = ["ideal_off", "simulate_offload"]


def _forward_with_ops(step: StepWithoutOffload, order: Sequence[Candidate]) -> float:
    """The forward's end, copy waits aside, with the runtime ops of the
    copies ``order`` (sorted by producer): each copy's ops cost the compute
    stream ``copy_ms`` and delay the host by ``copy_host_ms`` for every
    node after its producer. The device runs a node once it is done with
    the one before and the host has issued it, so the forward ends at the
    latest, over the points k, of the host's issue of k plus the device's
    time from k on (``host_bound``), each moved by the ops before k: their
    host time, less their compute-stream time (which the device had spent
    before k anyway), plus every op's compute-stream time."""
    total = step.fw_end[-1] if step.fw_ms else 0.0
    ops_ms = len(order) * step.copy_ms
    if not step.fw_host_ms:
        return total + ops_ms
    shift = step.copy_host_ms - step.copy_ms
    bound = step.host_bound
    end, start = total, 0
    for count, c in enumerate(order):
        end = max(end, bound(start, c.produced) + count * shift)
        start = c.produced + 1
    end = max(end, bound(start, len(step.fw_ms) - 1) + len(order) * shift)
    return end + ops_ms


def ideal_off(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> np.ndarray:
    """Bytes of ``chosen`` off the device at each point if every copy left
    right after its last forward use and came back just before its first
    backward use (``lifetimes.ideal_live``'s bound, by its rule)."""
    return np.cumsum(_spans(len(step.live), [
        (*off_device_points(c.free_from, c.consumer, len(step.fw_ms)), c.nbytes) for c in chosen
    ]))[:-1]


def _spans(points: int, spans: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """The differences of ``points`` counters (one more entry, the end) to
    which each ``(a, b, nbytes)`` adds ``nbytes`` over ``[a, b)``: their
    running sum is the bytes at each point. Arrays, as every search step
    sums over the whole step."""
    delta = np.zeros(points + 1, dtype=np.int64)
    if spans:
        a, b, nbytes = (np.array(column, dtype=np.int64) for column in zip(*spans))
        np.add.at(delta, a, nbytes)
        np.add.at(delta, b, -nbytes)
    return delta


def _forward(step: StepWithoutOffload, order: Sequence[Candidate], ideal: np.ndarray) -> tuple[dict[str, int], float]:
    """Where the rewrite releases each chosen copy (``order``: sorted by
    producer) in the forward, and the
    forward's end with the waits those releases cause. The releases are
    placed by ``schedules.schedule_releases``, the rule the rewrite itself
    follows: a copy is released once it has landed, or earlier, with the
    compute stream waiting for it, where the copies still held would lift
    memory over the peak of the ideal (every copy off from its last forward
    use). Copies queue on the device->host stream from the end of their
    producer on the walked clock, waits included. ``ideal``: the device
    bytes at each point with the copies off over their ideal intervals."""
    ceiling = int(ideal.max()) if len(ideal) else 0
    release, forward_end, over_at = _released_as_they_land(step, order, ideal, ceiling)
    if over_at is None:
        return release, forward_end
    return _scheduled(step, order, ideal, ceiling, over_at, {k: i for k, i in release.items() if i < over_at})


def _released_as_they_land(
    step: StepWithoutOffload, order: Sequence[Candidate], ideal: np.ndarray, ceiling: int
) -> tuple[dict[str, int], float, Optional[int]]:
    """``_scheduled``'s result where no release has to come early: each copy
    released after the first node (not before its last forward use) by
    whose end ``schedule_releases`` deems it landed, the forward waiting
    only, at its end, for the copies still running; and None. Where the
    copies held would lift memory over ``ceiling``, the first node where
    they would, instead of None: the walk's releases before it are these,
    and ``schedule_releases`` walks on from there. The common case walk-free,
    the other walked from its first early release on."""
    fw_end = step.fw_end
    n_fw = len(fw_end)
    if not n_fw:
        return {}, 0.0, 0
    stream = landed = 0.0
    margined = 0.0
    release: dict[str, int] = {}
    held = []
    for c in order:
        stream = max(fw_end[c.produced], stream) + c.nbytes / step.d2h_bytes_per_ms
        landed = max(landed, stream)
        # As the walk computes it, to the last bit: the walk resumes from these.
        margined = max(fw_end[c.produced], margined) + RELOAD_MARGIN * c.nbytes / step.d2h_bytes_per_ms
        at = min(bisect.bisect_left(fw_end, margined, c.free_from), n_fw - 1)
        release[c.key] = at
        # Held over the ideal before each node after its last forward use, up to its release.
        held.append((c.free_from + 1, at + 1, c.nbytes))
    extra = np.cumsum(_spans(n_fw, held))[1:n_fw]
    over = np.flatnonzero(ideal[1:n_fw] + extra > ceiling)
    if len(over):
        return release, 0.0, int(over[0]) + 1
    return release, max(fw_end[-1], landed), None


def _scheduled(
    step: StepWithoutOffload, order: Sequence[Candidate], ideal: np.ndarray, ceiling: int, start: int = 0,
    released_before: Optional[dict[str, int]] = None,
) -> tuple[dict[str, int], float]:
    """The releases ``schedule_releases`` places, and the forward walked on
    the copies' real landing times with the waits they cause; both from
    node ``start`` on, where ``released_before`` holds the releases before
    it, each made as its copy landed (no wait before ``start``)."""
    copies = [CopyOut(c.key, c.nbytes, c.produced, c.free_from) for c in order]
    release = schedule_releases(
        step.fw_ms, ideal[: len(step.fw_ms)].tolist(), copies, step.d2h_bytes_per_ms, ceiling,
        start=start, released=released_before,
    )
    # A release the walk placed early goes after the node before the one
    # memory would pass the ceiling at: the walked clock starts at the first
    # release of the walk's own.
    before = released_before or {}
    start = min([start] + [release[c.key] for c in order if c.key not in before])
    issued: dict[int, list[Candidate]] = {}
    released: dict[int, list[Candidate]] = {}
    clock = step.fw_end[start - 1] if start else 0.0
    stream = 0.0
    landed: dict[str, float] = {}
    for c in order:
        if c.produced < start:
            stream = max(step.fw_end[c.produced], stream) + c.nbytes / step.d2h_bytes_per_ms
            landed[c.key] = stream
        else:
            issued.setdefault(c.produced, []).append(c)
        released.setdefault(release[c.key], []).append(c)
    # Node by node, the clock summed in order (as the walk sums it, to the
    # last bit); between the nodes that issue or release, in one reduction.
    fw_ms, walked = step.fw_ms, start
    for k in sorted(k for k in issued.keys() | released.keys() if k >= start):
        clock = functools.reduce(operator.add, fw_ms[walked:k + 1], clock)
        walked = k + 1
        for c in issued.get(k, ()):
            stream = max(clock, stream) + c.nbytes / step.d2h_bytes_per_ms
            landed[c.key] = stream
        for c in released.get(k, ()):
            clock = max(clock, landed[c.key])
    return release, functools.reduce(operator.add, fw_ms[walked:], clock)


def simulate_offload(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> Estimate:
    """Estimated step time and peak with ``chosen`` offloaded."""
    live = step.live_array
    n_fw = len(step.fw_ms)
    fw_total = step.fw_end[-1] if n_fw else 0.0
    bw_total = step.bw_end[-1] if step.bw_ms else 0.0
    order = sorted(chosen, key=lambda c: (c.produced, c.key))
    ideal = live - ideal_off(step, order) if order else live
    release, forward_end = _forward(step, order, ideal) if order else ({}, fw_total)
    forward_wait = max(0.0, forward_end - fw_total)
    # The waits on the device's clock, added to the forward as the host
    # and the ops leave it (both, not the larger: a wait late in the
    # forward does not give back idling early in it).
    forward_ms = _forward_with_ops(step, order)
    issue, backward_wait = _backward(step, order, ideal)
    # Off the device from after the node it is released after to where its reload is issued (or the end).
    after = live - np.cumsum(_spans(len(live), [
        (min(release[c.key] + 1, n_fw), n_fw + issue[c.key] if c.key in issue else len(live), c.nbytes)
        for c in chosen
    ]))[:-1]
    total = forward_ms + bw_total + forward_wait + backward_wait + len(issue) * step.reload_ms
    return Estimate(total, int(after.max()) if len(after) else 0, forward_wait, backward_wait, after)


def _backward(step: StepWithoutOffload, order: Sequence[Candidate], ideal: np.ndarray) -> tuple[dict[str, int], float]:
    """Where the rewrite issues the reload of each chosen copy read in
    backward (``schedules.schedule_reloads`` under
    ``schedules.reload_ceiling``: as late as lands it before its consumer,
    later where memory would rise over the ideal's peak plus the headroom),
    and the backward's waits for them: reloads queue on the host->device
    stream from where they are issued on the backward's clock, and the
    backward waits at a consumer for its reload to land."""
    n_fw, n_bw = len(step.fw_ms), len(step.bw_ms)
    reloads = sorted(
        (Reload(c.key, c.nbytes, c.consumer) for c in order if c.consumer < n_bw), key=lambda r: (r.consumer, r.key)
    )
    if not reloads:
        return {}, 0.0
    ceiling = reload_ceiling(
        int(ideal.max()) if len(ideal) else 0, step.reload_headroom, sum(c.nbytes for c in order), step.reload_target
    )
    issue = schedule_reloads(
        step.bw_ms, ideal[n_fw:], reloads, step.h2d_bytes_per_ms, ceiling, prefetch_bytes=step.prefetch_bytes,
        starts=step.bw_node_starts,
    )
    # Events in the order the backward meets them: before node k, the
    # reloads issued there, then the waits of its consumers.
    events = sorted(
        [(issue[r.key], 0, r) for r in reloads] + [(r.consumer, 1, r) for r in reloads],
        key=lambda e: (e[0], e[1]),
    )
    start = step.bw_start
    wait = stream = 0.0
    landed: dict[str, float] = {}
    for k, is_use, r in events:
        clock = start[k] + wait
        if is_use:
            wait += max(0.0, landed[r.key] - clock)
        else:
            stream = max(clock, stream) + r.nbytes / step.h2d_bytes_per_ms
            landed[r.key] = stream
    return issue, wait
