"""Runtime, the client (docs/api.md#client): one object with every call of the client API,
composed of its parts, each a module of one concern:

- client_connection.py  ClientConnection: the connection, its lock and transactions
- deployments.py        Deployments: register, deployments, drain_report
- results.py            Results: result, result_now (ResultWait: the wait both clients share)
- workflow_operations.py  WorkflowOperations: describe, claim_history, effects, signal,
                        query, status_record, cancel, migrate, fork (a workflow by its id)
- client.py             Client: start, list, handle (a WorkflowHandle, handles.py)
- authority_admin.py    AuthorityAdmin: grant, approve, revoke
- effect_admin.py       EffectAdmin: ambiguous, reconcile, receipt, breakers, reset_breaker,
                        recover_orphans
- queue_admin.py        QueueAdmin: queue, queues, describe_queue
- schedule_admin.py     ScheduleAdmin: create_schedule, schedules, describe_schedule,
                        pause/resume/delete/trigger_schedule

Each method is defined in exactly one part; Runtime adds none (runtime/tests/
test_client_parts.py checks both). Every method validates its arguments before it reads or
writes anything: a refusal is InvalidInput with a one-line message, an unreachable database
DatabaseUnreachable naming the address. The names other modules import from here stay here.
"""

from __future__ import annotations

from .authority_admin import AuthorityAdmin, approve_in, revoke_in
from .client import Client
from .client_connection import (
    MAX_INPUT_BYTES,
    MAX_LIST_LIMIT,
    MAX_SEQ,
    TERMINAL,
    ClientConnection,
    check_id,
)
from .deployments import register_deployment
from .effect_admin import EffectAdmin
from .handles import WorkflowHandle
from .queue_admin import QueueAdmin
from .results import ResultWait
from .schedule_admin import ScheduleAdmin
from .workflow_operations import cancel_in, signal_in

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_LIST_LIMIT",
    "MAX_SEQ",
    "TERMINAL",
    "ClientConnection",
    "ResultWait",
    "Runtime",
    "WorkflowHandle",
    "approve_in",
    "cancel_in",
    "check_id",
    "register_deployment",
    "revoke_in",
    "signal_in",
]


class Runtime(Client, AuthorityAdmin, EffectAdmin, QueueAdmin, ScheduleAdmin):
    """A client of one Interlock database. Thread-safe; cheap to keep for a process's lifetime.

    `Runtime(dsn)` connects (default: the project's own cluster) and checks the schema (an
    empty database gets it unless create_schema=False). Start workflows with `start`, reach
    one with `handle(wf_id)` (or the same calls with the id first: `result(wf_id)`,
    `signal(wf_id, ...)`), and administer grants, effects, queues and schedules."""
