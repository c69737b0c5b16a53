"""The feedback loop: what happens to a compiled graph after its compile.

On CUDA, unless ``disabled_passes`` names "calibrate", the backend hands
each compiled graph to ``feedback.loop.calibrated_graph``. The loop measures
some of its calls (``schedule``: which; ``measure``: how), checks the plan's
prediction against their median (``check``), fits a calibration of the step
simulator to them (``fit``), decides whether the graph is planned again or
falls back (``policy``), plans it again through the one callable the backend
gave it (``recompile.Recompile``), and remembers calibrations and measured
sets of copies across compiles of the same graph (``memory``).

Nothing here is imported by the compile pipeline's planning except the data
types a plan is reported with; this package imports no submodule on import,
so a backend without the loop loads none of its state machine.
"""
