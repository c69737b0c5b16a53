"""Reports: the step report over all graphs of a step, and the graph text
that golden tests and ``graph_diff`` compare."""
