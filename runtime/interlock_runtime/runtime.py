"""Runtime, the client (docs/api.md#client): one object with every call of the client API,
composed of its parts, each a module of one concern:

- client/connection.py  ClientConnection: the connection, its lock and transactions
- client/deployments.py        Deployments: register, deployments, drain_report
- client/results.py            Results: result, result_now (ResultWait: the wait both clients share)
- client/operations.py  WorkflowOperations: describe, claim_history, effects, signal,
                        query, status_record, cancel, migrate, fork (a workflow by its id)
- client/             Client: start, list, handle (a WorkflowHandle, client/handles.py)
- client/authority.py    AuthorityAdmin: grant, approve, revoke
- client/effects.py       EffectAdmin: ambiguous, reconcile, receipt, breakers, reset_breaker,
                        recover_orphans
- client/queues.py        QueueAdmin: queue, queues, describe_queue
- client/schedules.py     ScheduleAdmin: create_schedule, schedules, describe_schedule,
                        pause/resume/delete/trigger_schedule

Each method is defined in exactly one part; Runtime adds none (runtime/tests/
test_client_parts.py checks both). Every method validates its arguments before it reads or
writes anything: a refusal is InvalidInput with a one-line message, an unreachable database
DatabaseUnreachable naming the address. The names other modules import from here stay here.
"""

from __future__ import annotations

from .client import Client
from .client.authority import AuthorityAdmin, approve_in, revoke_in
from .client.connection import (
    MAX_INPUT_BYTES,
    MAX_LIST_LIMIT,
    MAX_SEQ,
    TERMINAL,
    ClientConnection,
    check_id,
)
from .client.deployments import register_deployment
from .client.effects import EffectAdmin
from .client.handles import WorkflowHandle
from .client.operations import cancel_in, signal_in
from .client.queues import QueueAdmin
from .client.results import ResultWait
from .client.schedules import ScheduleAdmin

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
