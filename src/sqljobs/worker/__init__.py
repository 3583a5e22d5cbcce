"""Workers: the coordinator loop, job execution, and the multi-process supervisor."""

from .config import WorkerConfig
from .events import EventLog, Pass, WorkerEvent
from .worker import Worker

__all__ = ["EventLog", "Pass", "Worker", "WorkerConfig", "WorkerEvent"]
