"""The benchmark's variant names (``bench_offload.py --variants``): OffloadConfig
knobs in parentheses, Inductor options in braces. Pure Python."""

from __future__ import annotations

import offload_pass
from benchmarks.bench_offload import parse_overrides, split_inductor_options


def test_inductor_options_in_braces_are_split_off_with_their_types():
    name, options = split_inductor_options(
        "offload_pass[none](mode=budget;memory_budget=0.8){allow_buffer_reuse=true;reorder_for_peak_memory=false}"
    )
    assert name == "offload_pass[none](mode=budget;memory_budget=0.8)"
    assert options == {"allow_buffer_reuse": True, "reorder_for_peak_memory": False}
    assert parse_overrides(name) == {"mode": "budget", "memory_budget": 0.8}
    assert split_inductor_options("recompute(0.8)") == ("recompute(0.8)", {})


def test_disabled_passes_name_several_passes_joined_by_plus():
    overrides = parse_overrides("offload_pass(disabled_passes=calibrate+recompute;min_bytes=0)")
    assert overrides == {"disabled_passes": ("calibrate", "recompute"), "min_bytes": 0}
    # What the bench hands make_backend is a config it accepts.
    config = offload_pass.make_backend(**overrides).config
    assert [p.value for p in config.disabled_passes] == ["calibrate", "recompute"]
