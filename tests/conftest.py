import pytest
import torch
import torch._inductor.config

from offload_pass.marking.mark_keeping import MARKS
from offload_pass.registry import REGISTRY

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


@pytest.fixture(autouse=True)
def _reset_offload_state():
    """Each test starts with no warning given and no device profile or
    calibration cached, whatever ran before; a test that leaves a mark running fails here
    (``MarkStack.reset`` refuses while marks are active)."""
    yield
    REGISTRY.reset()
    left_open = [m.where or m.source for m in MARKS.marks]
    if left_open:
        # Emptied before failing, so one leaking test fails alone.
        MARKS._truncate(0)
        pytest.fail(f"marks left running after the test: {left_open}")
    MARKS.reset()
