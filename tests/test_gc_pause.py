"""The pipeline holds Python's collector off the objects alive before it (``pipeline.gc_pause``)."""

import gc
import types
import weakref

from offload_pass.pipeline import search
from offload_pass.pipeline.gc_pause import between_attempts, collections_paused


class _Cycle:
    def __init__(self):
        self.me = self


def test_the_pause_freezes_what_lives_frees_each_attempts_garbage_and_restores_the_collector():
    gc.enable()
    before = gc.get_freeze_count()
    with collections_paused():
        assert not gc.isenabled() and gc.get_freeze_count() > before
        with collections_paused():  # a pipeline inside another: the outer pause holds
            assert not gc.isenabled()
        assert not gc.isenabled() and gc.get_freeze_count() > before
        made = _Cycle()
        ref = weakref.ref(made)
        del made
        assert ref() is not None  # no automatic collection
        between_attempts()
        assert ref() is None
    assert gc.isenabled() and gc.get_freeze_count() == before
    made = _Cycle()
    ref = weakref.ref(made)
    del made
    between_attempts()  # outside a pause: nothing collected here
    assert ref() is not None
    gc.collect()


def test_a_collector_the_caller_turned_off_stays_off():
    gc.disable()
    try:
        with collections_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_every_attempt_of_the_pipeline_runs_paused_and_collects_after(monkeypatch):
    seen = []
    monkeypatch.setattr(search, "with_host_limit", lambda ctx: ctx)
    monkeypatch.setattr(search, "run_attempt", lambda ctx: seen.append(("attempt", gc.isenabled())) or "first")
    monkeypatch.setattr(search, "between_attempts", lambda: seen.append(("collected", gc.isenabled())))
    monkeypatch.setattr(search, "run_passes", lambda passes, state, ctx: seen.append(("search", gc.isenabled())) or state)
    gc.enable()
    assert search.run_pipeline(types.SimpleNamespace(graph_id="graph 0")) == "first"
    assert seen == [("attempt", False), ("collected", False), ("search", False)] and gc.isenabled()
