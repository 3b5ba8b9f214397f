"""Interlock Runtime: durable workflows for AI agents on Postgres alone.

from interlock_runtime import Runtime, Worker, workflow, RetryPolicy

@workflow(name="refund", version="1")
def refund(ctx, case):
    amount = ctx.step("pick", pick_amount, case)
    ...

rt = Runtime(dsn)                      # applies the schema
rt.start(refund, "case-4471", {...})   # idempotent on the id
Worker(dsn, [refund]).run()            # or: interlock worker --module my_flows
"""

from .context import RetryPolicy, WorkflowContext
from .errors import (
    Cancelled,
    CodeChanged,
    Fenced,
    InterlockError,
    InvalidInput,
    NonDeterminism,
    StepFailed,
    Suspend,
    TargetRejected,
    UnknownWorkflow,
    WorkflowConflict,
    WorkflowFailed,
    WorkflowNotFound,
)
from .runtime import Runtime
from .worker import Worker
from .workflow import workflow

__all__ = [
    "Cancelled",
    "CodeChanged",
    "Fenced",
    "InterlockError",
    "InvalidInput",
    "NonDeterminism",
    "RetryPolicy",
    "Runtime",
    "StepFailed",
    "Suspend",
    "TargetRejected",
    "UnknownWorkflow",
    "Worker",
    "WorkflowConflict",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowNotFound",
    "workflow",
]
