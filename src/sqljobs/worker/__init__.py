"""Workers: the coordinator loop, job execution, and the multi-process supervisor."""

from .config import WorkerConfig
from .worker import Worker

__all__ = ["Worker", "WorkerConfig"]
