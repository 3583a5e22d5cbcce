"""The soak: a long steady run with the pruner on, sampled, to show that what a worker
holds and what the database keeps stay flat (``make soak``; the suite runs a short smoke).

:mod:`soak.tasks` is what the workers run, :mod:`soak.worker` starts one, :mod:`soak.run`
produces the load, samples, judges and plots.
"""

COUNTER_ROWS = 64
"""Rows of the counter the jobs' effects add to (see :mod:`soak.tasks`)."""
