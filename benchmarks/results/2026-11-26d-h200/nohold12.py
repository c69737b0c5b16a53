"""The GPU test with the hold disabled: must fail (shows the test can catch the race)."""
import torch, pytest, sys
from offload_pass.runtime.state import STATE

class Forgetful(dict):
    def __setitem__(self, k, v):
        pass

STATE.copy_sources = Forgetful()
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/test_runtime_ops.py", "-k", "temporary_handed"]))
