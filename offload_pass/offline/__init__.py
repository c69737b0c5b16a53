"""Planning offline: what the pass would plan on a GPU, on a machine without one.

``plan_offline(model, args, kwargs, config, device_profile="h200")`` traces a
model built on the meta device and returns its ``OfflinePlans``
(``planner``); ``meta_trace`` holds what makes a meta trace look like a GPU's,
``plans`` the result's dataclasses.
"""

from offload_pass.offline.planner import PYTORCH_BUDGET, plan_offline
from offload_pass.offline.plans import GraphPlan, OfflinePlans

__all__ = ["GraphPlan", "OfflinePlans", "PYTORCH_BUDGET", "plan_offline"]
