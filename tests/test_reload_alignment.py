"""A reloaded tensor is compiled as aligned as the tensor it stands for
(offload_pass/rewriting/reload_alignment.py): Inductor took every reload for
unaligned, its input being a CPU tensor, and compiled the kernels reading it
without their alignment hints (other code, gradients off plain Inductor's).
Read off the generated code, where Inductor asserts an alignment it assumes."""

from __future__ import annotations

import re

import torch
from torch._inductor.utils import run_and_get_code

import offload_pass
from offload_pass.examples.models import make_decoder

RELOAD = "torch.ops.offload_pass.reload.default"


def _reload_alignment(code: str) -> tuple[list[str], list[str], list[str]]:
    """(buffers reloaded, those asserted 16-byte aligned, those assumed unaligned)."""
    reloaded = re.findall(rf"^\s*(\w+) = {re.escape(RELOAD)}\(", code, flags=re.M)
    aligned = re.findall(rf"assert_alignment\((\w+), 16, '{re.escape(RELOAD)}'\)", code)
    unaligned = re.findall(rf"# buffer (\w+) \(op: {re.escape(RELOAD)}\) is assumed to be not aligned", code)
    return reloaded, aligned, unaligned


def test_every_reload_of_the_decoder_is_compiled_aligned():
    torch.manual_seed(0)
    model = make_decoder(2, 32, 4, dtype=torch.float32, device="cpu")
    offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    with torch._inductor.config.patch(force_disable_caches=True):
        _, codes = run_and_get_code(lambda: compiled(torch.randn(2, 16, 32)).sum().backward())
    (backward,) = [c for c in codes if RELOAD in c]
    reloaded, aligned, unaligned = _reload_alignment(backward)
    copies = len(backend.plans[-1].groups)
    assert copies and len(reloaded) == copies, (len(reloaded), copies)
    # Inductor names a fallback's output apart from the call's result
    # (buf1 = reload(...)[...]): the asserts count, one per reload.
    assert unaligned == [] and len(aligned) == copies, (aligned, unaligned)


def test_a_reload_at_an_unaligned_offset_stays_unaligned():
    """``align`` puts a reload where the view it stands for lay: 4 bytes into
    its storage is not 16-byte aligned, and Inductor must not assume it."""

    def reload_twice(host):
        aligned = torch.ops.offload_pass.reload(host, torch.device("cpu"))
        off = torch.ops.offload_pass.reload(host, torch.device("cpu"), 1)
        return aligned * 2 + off

    host = torch.randn(8, 8)
    with torch._inductor.config.patch(force_disable_caches=True):
        result, (code,) = run_and_get_code(torch.compile(reload_twice, backend="inductor"), host)
    torch.testing.assert_close(result, host * 3, rtol=0, atol=0)
    reloaded, aligned, unaligned = _reload_alignment(code)
    assert len(reloaded) == 2 and len(aligned) == 1 and len(unaligned) == 1, code
