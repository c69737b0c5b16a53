"""plan_saved_tensors is a pure function: tested on made-up records."""

import dataclasses

from offload_pass.config import OffloadConfig
import pytest

from offload_pass.enums import Decision, Mode
from offload_pass.planning.plan import PlanEntry, plan_saved_tensors
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.reasons import Reason, detail, sentence
from offload_pass.planning.saved_set import SavedTensor


def record(name, nbytes=1 << 20, storage=None, kind="activation", asked="offload", first_use=0, symbolic=False, op="aten.mm"):
    return SavedTensor(
        name=name, position=0, kind=kind, op=op, module="m", role=None, shape=(nbytes // 4,),
        dtype="float32", nbytes=nbytes, storage=storage or name, storage_nbytes=nbytes,
        is_view=storage is not None, symbolic=symbolic, asked=asked, asked_by="module m" if asked else "",
        backward_first_use=first_use,
    )


def decisions(plan):
    return {e.name: (e.decision, e.code, dict(e.detail)) for e in plan.entries}


BY_M = {"by": "module m"}


def test_kinds_and_asks():
    plan = plan_saved_tensors(
        [
            record("a"),
            record("b", asked=None),
            record("c", asked="keep"),
            record("p", kind="parameter"),
            record("i", kind="input"),
            record("o", kind="output"),
            record("z", nbytes=0),
        ],
        OffloadConfig(min_bytes=0, keep_first_in_backward=0),
    )
    assert decisions(plan) == {
        "a": ("offload", Reason.MARKED, BY_M),
        "b": ("keep", Reason.NOT_MARKED, {}),
        "c": ("keep", Reason.KEPT_BY_MARK, BY_M),
        "p": ("keep", Reason.PARAMETER, {}),
        "i": ("keep", Reason.GRAPH_INPUT, {}),
        "o": ("keep", Reason.MODEL_OUTPUT, {}),
        "z": ("keep", Reason.EMPTY, {}),
    }
    assert plan.offloaded_bytes == 1 << 20


@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.BUDGET])
def test_with_nothing_marked_every_activation_is_a_candidate_of_the_mode_in_force(mode):
    budget = {"memory_budget": 0.5} if mode == Mode.BUDGET else {}
    saved = [record("a", asked=None), record("b", asked=None), record("p", kind="parameter", asked=None)]
    plan = plan_saved_tensors(saved, OffloadConfig(mode=mode, min_bytes=0, keep_first_in_backward=0, **budget))
    assert decisions(plan) == {
        "a": ("offload", Reason.UNMARKED_CANDIDATE, {"mode": mode}),
        "b": ("offload", Reason.UNMARKED_CANDIDATE, {"mode": mode}),
        "p": ("keep", Reason.PARAMETER, {}),
    }
    assert plan.entry("a").reason == f"candidate of mode={mode} (nothing marked)"
    # One marked tensor: only the marked ones are candidates, in any mode.
    saved[0] = record("a")
    plan = plan_saved_tensors(saved, OffloadConfig(mode=mode, min_bytes=0, keep_first_in_backward=0, **budget))
    assert decisions(plan)["a"] == ("offload", Reason.MARKED, BY_M)
    assert decisions(plan)["b"] == ("keep", Reason.NOT_MARKED, {})


def test_shared_storage_moves_together_or_not_at_all():
    views = [record("q", storage="qkv"), record("k", storage="qkv"), record("v", storage="qkv")]
    plan = plan_saved_tensors(views, OffloadConfig(min_bytes=0, keep_first_in_backward=0))
    assert [(g.storage, g.members, g.copy) for g in plan.groups] == [("qkv", ("q", "k", "v"), "storage")]
    # An opt-out on one view keeps the storage alive: the others stay too.
    views[1] = dataclasses.replace(views[1], asked="keep", asked_by="mark_not_offload")
    plan = plan_saved_tensors(views, OffloadConfig(min_bytes=0, keep_first_in_backward=0))
    assert plan.groups == []
    assert decisions(plan)["q"] == (
        "keep", Reason.SHARES_STORAGE,
        {"with": "k", "why": Reason.KEPT_BY_MARK, "why_detail": detail(by="mark_not_offload")},
    )
    # Symbolic views cannot be rebuilt from the storage: copied one by one.
    sym = [dataclasses.replace(v, symbolic=True, asked="offload") for v in views]
    plan = plan_saved_tensors(sym, OffloadConfig(min_bytes=0, keep_first_in_backward=0))
    assert [g.copy for g in plan.groups] == ["each"]


def test_min_bytes_on_the_storage():
    plan = plan_saved_tensors([record("a", nbytes=1000)], OffloadConfig(min_bytes=1001, keep_first_in_backward=0))
    assert decisions(plan)["a"] == ("keep", Reason.BELOW_MIN_BYTES, {"nbytes": 1000, "min_bytes": 1001})
    assert plan.candidates == 0  # nothing a re-plan could copy


def test_first_in_backward_kept():
    saved = [record("a", first_use=30), record("b", first_use=10), record("c", first_use=20)]
    plan = plan_saved_tensors(saved, OffloadConfig(min_bytes=0, keep_first_in_backward=1))
    assert plan.offloaded == ["a", "c"]
    assert plan.candidates == 2  # the first in backward is never a candidate
    assert decisions(plan)["b"] == ("keep", Reason.FIRST_IN_BACKWARD, {"keep_first": 1})
    plan = plan_saved_tensors(saved, OffloadConfig(min_bytes=0, keep_first_in_backward=2))
    assert plan.offloaded == ["a"]
    assert plan.candidates == 1


def test_collective_outputs_are_never_offloaded_even_when_marked():
    # Under tensor / sequence parallel the functional collectives are in the
    # graph, and the marked module's saved set can hold their outputs.
    plan = plan_saved_tensors(
        [
            record("wait_tensor", op="_c10d_functional.wait_tensor"),
            record("view_1", storage="wait_tensor", op="_c10d_functional.wait_tensor"),
            record("mm"),
        ],
        OffloadConfig(min_bytes=0, keep_first_in_backward=0),
    )
    assert decisions(plan) == {
        "wait_tensor": ("keep", Reason.COLLECTIVE, {"op": "_c10d_functional.wait_tensor"}),
        "view_1": ("keep", Reason.COLLECTIVE, {"op": "_c10d_functional.wait_tensor"}),
        "mm": ("offload", Reason.MARKED, BY_M),
    }


def test_a_host_tensor_of_an_accelerator_graph_stays_even_when_marked():
    host = dataclasses.replace(record("seed", nbytes=8), on_host=True)
    plan = plan_saved_tensors([host, record("a")], OffloadConfig(min_bytes=0))
    assert decisions(plan) == {
        "seed": ("keep", Reason.ON_HOST, {}),
        "a": ("offload", Reason.MARKED, BY_M),
    }


def test_views_of_another_dtype_are_copied_one_by_one():
    # view_as_real halves of one complex storage: as_strided of the complex
    # owner cannot rebuild a float view, so each member is its own copy.
    same = [record("q", 64, storage="s"), record("k", 64, storage="s")]
    other = [dataclasses.replace(r, storage="t", reinterpreted=True) for r in same]
    other = [dataclasses.replace(r, name=r.name + "2") for r in other]
    plan = plan_saved_tensors(same + other, OffloadConfig(min_bytes=0, keep_first_in_backward=0))
    assert {g.storage: g.copy for g in plan.groups} == {"s": "storage", "t": "each"}


def test_lazy_bit_views_are_kept_with_a_reason():
    conj = dataclasses.replace(record("c"), lazy_bit=True)
    plan = plan_saved_tensors([conj], OffloadConfig(min_bytes=0, keep_first_in_backward=0))
    assert decisions(plan) == {
        "c": ("keep", Reason.LAZY_BIT, {})
    }


def test_a_lone_view_over_its_whole_storage_is_copied_as_its_owner():
    # Same bytes either way; copying the owner lets Inductor compute it in its
    # own layout (random draw 3991: a reshape copied as itself moved a
    # pointwise kernel to the reshaped loop, one ulp off).
    whole = dataclasses.replace(record("v", 64, storage="s"), is_view=True, spans_storage=True)
    part = dataclasses.replace(record("w", 32, storage="t"), is_view=True)
    plan = plan_saved_tensors([whole, part], OffloadConfig(min_bytes=0, keep_first_in_backward=0))
    assert {g.storage: (g.copy, g.members, g.nbytes) for g in plan.groups} == {
        "s": ("storage", ("v",), 64),
        "t": ("tensor", ("w",), 32),
    }


def test_plain_inductors_plan_keeps_everything_and_says_why():
    from offload_pass.planning.plan import plain_inductor_plan
    from offload_pass.planning.step_model import StepPrediction

    plan = plan_saved_tensors(
        [record("a"), record("b", asked=None), record("q", storage="qkv"), record("k", storage="qkv")],
        OffloadConfig(min_bytes=0, keep_first_in_backward=0),
    )
    assert plan.offloaded == ["a", "q", "k"]
    without = StepPrediction(30.0, 5 << 20, 10.0, 20.0, 0.0, 0.0, "estimated")
    plan = dataclasses.replace(plan, graph_id="graph 3", baseline=without)
    plain = plain_inductor_plan(plan, "graph 4", "why")
    assert plain.graph_id == "graph 4" and plain.offloaded == [] and plain.groups == [] and plain.offloaded_bytes == 0
    assert decisions(plain) == {
        "a": ("keep", Reason.PLAIN_FALLBACK, {}),
        "b": ("keep", Reason.NOT_MARKED, {}),
        "q": ("keep", Reason.PLAIN_FALLBACK, {}),
        "k": ("keep", Reason.PLAIN_FALLBACK, {}),
    }
    assert plain.prediction == plain.baseline == without
    assert plain.selection == "mode=auto fell back from graph 3, why"
    # What was measured of it, and what ran instead, are its compile record's (test_calibration).
    assert not any(hasattr(plain, f) for f in ("measured", "calibration", "replan_reason", "fallback"))
    assert str(plain).startswith("offload plan graph 4\n")  # not "(rewrite disabled)"
    assert "mode=auto fell back from graph 3, why" in str(plain)


# Every reason code, with values, and the sentence the plan table prints for it.
SENTENCES = [
    (Reason.SYMINT, {}, "symbolic int"),
    (Reason.PARAMETER, {}, "parameter or buffer"),
    (Reason.GRAPH_INPUT, {}, "graph input"),
    (Reason.INPUT_VIEW, {}, "view of a graph input"),
    (Reason.MODEL_OUTPUT, {}, "model output (or shares its storage)"),
    (Reason.ON_HOST, {}, "already in host memory"),
    (Reason.LAZY_BIT, {}, "conjugate or negated view (lazy bit): the copy ops cannot take one"),
    (Reason.COLLECTIVE, {"op": "_c10d_functional.wait_tensor"}, "output of a collective (_c10d_functional.wait_tensor)"),
    (Reason.KEPT_BY_MARK, {"by": "module layers.0.mlp"}, "kept by module layers.0.mlp"),
    (Reason.NOT_MARKED, {}, "not marked"),
    (Reason.OTHER_ROLES, {"by": "module m selects roles ['x'], not 'y'"}, "module m selects roles ['x'], not 'y'"),
    (Reason.EMPTY, {}, "empty tensor"),
    (Reason.MARKED, {"by": "module m"}, "offloaded by module m"),
    (Reason.UNMARKED_CANDIDATE, {"mode": Mode.AUTO}, "candidate of mode=auto (nothing marked)"),
    (Reason.UNMARKED_CANDIDATE, {"mode": Mode.BUDGET}, "candidate of mode=budget (nothing marked)"),
    (
        Reason.SHARES_STORAGE, {"with": "k", "why": Reason.KEPT_BY_MARK, "why_detail": detail(by="mark_not_offload")},
        "shares storage with k (kept by mark_not_offload)",
    ),
    (Reason.BELOW_MIN_BYTES, {"nbytes": 1000, "min_bytes": 1001}, "below min_bytes (1000 < 1001)"),
    (
        Reason.FIRST_IN_BACKWARD, {"keep_first": 1},
        "needed first in backward (keep_first_in_backward=1): its reload would start with the backward",
    ),
    (Reason.NO_GAIN, {}, "offloading it would not lower the predicted peak (keep_if_no_gain)"),
    (Reason.AUTO_MEASURED_SET, {}, "not chosen by mode=auto: a set of copies measured within max_overhead runs"),
    (Reason.AUTO_NOT_CHOSEN, {"max_overhead": 0.02}, "not chosen by mode=auto: no gain at the peak within max_overhead=0.02"),
    (Reason.BUDGET_NOT_NEEDED, {}, "not chosen by mode=budget: not needed to reach the budget"),
    (
        Reason.HOST_LIMIT, {"limit": 1 << 30, "source": "given", "available": None, "share": 0.5},
        "kept: the plan's pinned host memory would pass 1.00 GiB (host_memory_limit)",
    ),
    (
        Reason.HOST_LIMIT, {"limit": 1 << 30, "source": "default", "available": 2 << 30, "share": 0.5},
        "kept: the plan's pinned host memory would pass 1.00 GiB, 50% of the 2.00 GiB the host had available "
        "(pinned pages cannot be swapped; set host_memory_limit to change it)",
    ),
    (
        Reason.RECOMPUTED, {"level": 0.6, "peak": 1 << 20},
        "recomputed in backward: partitioned under activation_memory_budget=0.6 to reach the budget "
        "(predicted peak 1.00 MiB)",
    ),
    (
        Reason.BLOCK_RECOMPUTED, {"cut": BlockCut(2, 4), "peak": 1 << 20},
        "recomputed in backward: last 2 of 4 blocks recomputed (all) from their inputs to reach the budget "
        "(predicted peak 1.00 MiB)",
    ),
    (
        Reason.BUDGET_CHOSEN, {"budget": 1 << 30},
        "chosen by mode=budget (nothing marked): among the copies that reach 1.00 GiB in the least predicted step",
    ),
    (Reason.PLAIN_FALLBACK, {}, "kept: the graph runs plain Inductor's compile (mode=auto fell back)"),
]


@pytest.mark.parametrize("code, values, text", SENTENCES, ids=[c.value for c, _, _ in SENTENCES])
def test_each_reason_code_renders_its_sentence(code, values, text):
    assert sentence(code, detail(**values)) == text


def test_every_reason_code_has_a_sentence_and_a_sentence_names_one_code():
    assert {c for c, _, _ in SENTENCES} == set(Reason)
    with pytest.raises(TypeError, match="code must be a planning.reasons.Reason"):
        PlanEntry("t", "aten.mm", "m", None, (4,), "float32", 16, Decision.KEEP, "not marked", "t")
