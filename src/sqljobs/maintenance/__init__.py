"""Maintenance services every worker runs: reaper (expired leases) and pruner (old jobs).

Each has ``run_once()`` so tests and the lab can drive it directly.
"""

from .pruner import Pruner
from .reaper import Reaper, rescue_decision

__all__ = ["Pruner", "Reaper", "rescue_decision"]
