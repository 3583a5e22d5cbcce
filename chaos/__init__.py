"""The chaos run: thousands of jobs whose effects must land exactly once while workers
are SIGKILLed, the PostgreSQL server restarts and producers hammer a SQLite file.

``make chaos`` (``python -m chaos``) runs it in full and prints its figures; the suite runs
a short version (``tests/test_chaos.py``). :mod:`chaos.tasks` is what the workers run,
:mod:`chaos.producer` what the producer processes run, :mod:`chaos.run` the conductor
and its checks.
"""
