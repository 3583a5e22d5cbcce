"""Maintenance services every worker runs: reaper (expired leases), pruner (old jobs) and
scheduler (periodic ticks).

Each has ``run_once()`` so tests and the lab can drive it directly.
"""

from .pruner import Pruner
from .reaper import Reaper, rescue_decision
from .scheduler import Scheduler

__all__ = ["Pruner", "Reaper", "Scheduler", "rescue_decision"]
