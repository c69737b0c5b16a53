import os

import pytest
import torch

# Fresh compile caches per run: a warm cache must never be what makes a test pass.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
