"""tasks-core: models, errors, the ``TaskStore`` protocol, authority, the plugin registry,
and the runtime (``App``, ``Worker``, ``TaskContext``, the ``tasks`` CLI).

The public API is what ``__all__`` lists; modules starting with ``_`` are private.
"""

from __future__ import annotations

from tasks_core._json import parse_json
from tasks_core._registry import available_stores, find_store, open_store
from tasks_core.authority import (
    Access,
    Authority,
    Owner,
    System,
    owner_of,
    require_authority,
    scoped_task_key,
)
from tasks_core.cancel import CancelToken, RunCancelled
from tasks_core.clock import Clock, ManualClock, SystemClock
from tasks_core.context import TaskContext
from tasks_core.definitions import Queue, Retry, TaskDef
from tasks_core.errors import (
    AuthorizationError,
    CapabilityNotSupported,
    CapacityExceeded,
    Deferred,
    EventIdReused,
    InvalidInput,
    LeaseLost,
    PluginConflict,
    RevisionConflict,
    SchemaMismatch,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
    TasksError,
    TaskTimeout,
    Unavailable,
    UnknownStore,
)
from tasks_core.events import (
    Cancelled,
    Completed,
    Event,
    EventRecord,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    RetryRequested,
    Transition,
    WatcherAdded,
)
from tasks_core.items import SubmitItem
from tasks_core.models import (
    Claim,
    ClaimInfo,
    ErrorInfo,
    Lease,
    NewTask,
    Progress,
    RetryPolicy,
    Snapshot,
    StoreCapabilities,
    StoreLimits,
    TaskQuery,
    TaskStatus,
    Work,
)
from tasks_core.options import UNSET, SubmitOptions, Unset, WorkerOptions
from tasks_core.plugins import StoreSpec, hookimpl
from tasks_core.policy import Limits, Policy
from tasks_core.random_ids import random_task_id
from tasks_core.reasons import CancelReason
from tasks_core.runtime._sync import SyncApp
from tasks_core.runtime.app import App, Page, Submitted
from tasks_core.runtime.worker import Worker
from tasks_core.store import TaskStore

__version__ = "0.1.0"

__all__ = [
    "UNSET",
    "Access",
    "App",
    "Authority",
    "AuthorizationError",
    "CancelReason",
    "CancelToken",
    "Cancelled",
    "CapabilityNotSupported",
    "CapacityExceeded",
    "Claim",
    "ClaimInfo",
    "Clock",
    "Completed",
    "Deferred",
    "ErrorInfo",
    "Event",
    "EventIdReused",
    "EventRecord",
    "Failed",
    "InputRequested",
    "InputResponsesAccepted",
    "InvalidInput",
    "Lease",
    "LeaseLost",
    "Limits",
    "ManualClock",
    "NewTask",
    "Owner",
    "Page",
    "PluginConflict",
    "Policy",
    "Progress",
    "Queue",
    "Retry",
    "RetryPolicy",
    "RetryRequested",
    "RevisionConflict",
    "RunCancelled",
    "SchemaMismatch",
    "Snapshot",
    "StoreCapabilities",
    "StoreCorrupt",
    "StoreError",
    "StoreLimits",
    "StoreSpec",
    "StoreUnavailable",
    "SubmitItem",
    "SubmitOptions",
    "Submitted",
    "SyncApp",
    "System",
    "SystemClock",
    "TaskContext",
    "TaskDef",
    "TaskExists",
    "TaskNotFound",
    "TaskQuery",
    "TaskStatus",
    "TaskStore",
    "TaskTimeout",
    "TasksError",
    "Transition",
    "Unavailable",
    "UnknownStore",
    "Unset",
    "WatcherAdded",
    "Work",
    "Worker",
    "WorkerOptions",
    "available_stores",
    "find_store",
    "hookimpl",
    "open_store",
    "owner_of",
    "parse_json",
    "random_task_id",
    "require_authority",
    "scoped_task_key",
]
