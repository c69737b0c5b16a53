import os

import pytest
import torch

from offload_pass.compile_caches import graph_caches_off
from offload_pass.marking.mark_keeping import MARKS
from offload_pass.registry import REGISTRY

# No graph caches: a warm cache (from another test, or another run) must
# never decide what a test sees, so no compiled graph is ever served from one.
# Inductor's kernel cache stays on, in a directory new to this run and shared
# by its xdist workers: a hit is the binary a build would give, and rebuilding
# the same small kernels test after test was most of CI's time
# (offload_pass/compile_caches.py); the workers run the same models.


@pytest.fixture(autouse=True, scope="session")
def _graph_caches_off(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base is popen-gwN inside the run's own root.
    run_root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    graph_caches_off(str(run_root / "inductor_kernels"))
    yield


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
