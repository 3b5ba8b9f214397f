"""Interlock Runtime: durable workflows for AI agents on Postgres alone.

from interlock_runtime import Runtime, Worker, workflow, RetryPolicy

@workflow(name="invoice_mail", version="1")
def invoice_mail(ctx, inv):
    message = ctx.step("compose", compose, inv)
    ...

rt = Runtime(dsn)                          # creates the schema in an empty database
rt.start(invoice_mail, "inv-1001", {...})  # idempotent on the id
rt.handle("inv-1001").result()             # its handle: result, signal, query, cancel, ...
Worker(dsn, [invoice_mail]).run()          # or: interlock worker --module my_flows
"""

from __future__ import annotations

from .aio.client import AsyncRuntime, AsyncWorkflowHandle
from .client.handles import WorkflowHandle
from .context import WorkflowContext
from .effects import EffectRefused, EffectResult
from .effects.targets import AsyncHttpTarget, EffectTarget, HttpTarget
from .errors import (
    Cancelled,
    CodeChanged,
    ConnectionLost,
    DatabaseConflict,
    DatabaseMissing,
    DatabaseUnreachable,
    Fenced,
    InterlockError,
    InvalidInput,
    NonDeterminism,
    NotRecordable,
    PermissionDenied,
    RecordedTypeError,
    SchemaMismatch,
    StepFailed,
    StepTimedOut,
    Suspend,
    TargetRejected,
    UnknownWorkflow,
    UnsafeDatabase,
    WorkflowConflict,
    WorkflowFailed,
    WorkflowFinished,
    WorkflowNotFound,
    WorkflowTimedOut,
)
from .run_state import Decision, RetryPolicy
from .runtime import Runtime
from .worker import Worker
from .workflow import workflow

__all__ = [
    "AsyncHttpTarget",
    "AsyncRuntime",
    "AsyncWorkflowHandle",
    "Cancelled",
    "Decision",
    "CodeChanged",
    "ConnectionLost",
    "DatabaseConflict",
    "DatabaseMissing",
    "DatabaseUnreachable",
    "EffectRefused",
    "EffectResult",
    "EffectTarget",
    "Fenced",
    "HttpTarget",
    "InterlockError",
    "InvalidInput",
    "NonDeterminism",
    "NotRecordable",
    "PermissionDenied",
    "RecordedTypeError",
    "RetryPolicy",
    "Runtime",
    "SchemaMismatch",
    "StepFailed",
    "StepTimedOut",
    "Suspend",
    "TargetRejected",
    "UnknownWorkflow",
    "UnsafeDatabase",
    "Worker",
    "WorkflowConflict",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowFinished",
    "WorkflowHandle",
    "WorkflowNotFound",
    "WorkflowTimedOut",
    "workflow",
]
