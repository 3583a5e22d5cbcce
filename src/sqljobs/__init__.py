"""sqljobs: durable background jobs and periodic schedules in your SQL database."""

from ._version import __version__ as __version__
from .app import App
from .context import AsyncTransaction, JobContext
from .dependencies import Group
from .effects import perform_once
from .errors import (
    BackendError,
    ConfigurationError,
    Discard,
    DrainIncomplete,
    EffectUncertain,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobSignal,
    LeaseLost,
    PayloadError,
    PayloadTooLarge,
    ResultTimeout,
    RetryLater,
    ScheduleNotFound,
    SqljobsError,
    StepFailed,
    UnknownTask,
    WorkflowChanged,
)
from .handles import JobHandle
from .hooks import AttemptInfo, EnqueueInfo, JobEvent, WorkerLifecycle
from .idempotency import idempotent
from .jobs import (
    Job,
    JobCount,
    JobFilter,
    JobPage,
    JobState,
    Progress,
    QueueInfo,
    WorkerStatus,
    WorkflowStep,
)
from .retention import Retention
from .retry import Retry
from .rollup import MetricAmount, MinuteCounts
from .schedules import Schedule, ScheduleState
from .stats import Stats
from .tasks import BoundTask, Signature, Task
from .worker import Worker, WorkerConfig
from .workflow_ops import WorkflowRun
from .workflows import Workflow

__all__ = [
    "App",
    "AsyncTransaction",
    "AttemptInfo",
    "BackendError",
    "BoundTask",
    "ConfigurationError",
    "Discard",
    "DrainIncomplete",
    "EffectUncertain",
    "EnqueueInfo",
    "Group",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobCount",
    "JobEvent",
    "JobFailed",
    "JobFilter",
    "JobHandle",
    "JobNotFound",
    "JobPage",
    "JobSignal",
    "JobState",
    "LeaseLost",
    "MetricAmount",
    "MinuteCounts",
    "PayloadError",
    "PayloadTooLarge",
    "Progress",
    "QueueInfo",
    "ResultTimeout",
    "Retention",
    "Retry",
    "RetryLater",
    "Schedule",
    "ScheduleNotFound",
    "ScheduleState",
    "Signature",
    "SqljobsError",
    "Stats",
    "StepFailed",
    "Task",
    "UnknownTask",
    "Worker",
    "WorkerConfig",
    "WorkerLifecycle",
    "WorkerStatus",
    "Workflow",
    "WorkflowChanged",
    "WorkflowRun",
    "WorkflowStep",
    "idempotent",
    "perform_once",
]
