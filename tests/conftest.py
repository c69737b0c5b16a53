import pytest
import torch
import torch._inductor.config

# No compile caches: a warm cache (from another test, or another run) must
# never decide what a test sees. The environment variable would come too late
# here (torch reads it at import), so set the config itself.
torch._inductor.config.force_disable_caches = True

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
