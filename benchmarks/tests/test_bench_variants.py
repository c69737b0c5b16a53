"""The benchmark's variant names (``bench_offload.py --variants``), models and marks: OffloadConfig
knobs in parentheses, Inductor options in braces. Pure Python."""

from __future__ import annotations

import argparse

import pytest
import torch

import offload_pass
from benchmarks.bench_offload import marked_modules, model_choice, parse_overrides, split_inductor_options


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


class _TimmLike(torch.nn.Module):
    """What the bench reads of a timm network: its ``feature_info`` (stem first)."""

    def __init__(self):
        super().__init__()
        self.stem, self.layer1, self.layer2, self.layer3 = (torch.nn.Conv2d(3, 3, 1) for _ in range(4))
        self.feature_info = [{"module": name} for name in ("stem", "layer1", "layer2", "layer3")]


def test_a_timm_network_is_marked_by_its_stages():
    model = _TimmLike()
    assert marked_modules(model, "all") == (["**"], None)
    assert marked_modules(model, "stages:2") == (["layer1", "layer2"], None)
    assert marked_modules(model, "none") == ([], None)
    with pytest.raises(SystemExit, match="unknown --mark 'attn' for a timm network; valid: none, all, stages:K"):
        marked_modules(model, "attn")


def test_models_are_named_from_a_fixed_list_or_as_timm_networks():
    assert model_choice("timm:resnet50") == "timm:resnet50"
    assert model_choice("hf_llama") == "hf_llama"
    for bad in ("timm:", "resnet50"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"unknown model '{bad}'; valid: decoder, moe, hf_llama"):
            model_choice(bad)
