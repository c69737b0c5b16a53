"""Tests of the benchmark tooling (run beside the package's tests:
``python -m pytest benchmarks/tests``). The repository root is on the import
path (pyproject's ``pythonpath``), so ``benchmarks.<tool>`` imports; each test
starts and ends with Dynamo reset."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
