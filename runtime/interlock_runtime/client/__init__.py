"""The client in parts, composed by runtime.Runtime (docs/api.md#client): connection (one
connection, its lock, the id and size checks), deployments, operations (one workflow by id),
results (waits on a run's end), handles, authority (grants, approvals, revokes), effects
(ambiguous effects, receipts, breakers, orphans), queues and schedules.

This module is the client's workflow side: start workflows, list them, and hand out a
WorkflowHandle per workflow, as Temporal's Client does (start_workflow, list_workflows,
get_workflow_handle); the operations on one workflow are WorkflowOperations' and Results'.

Every method validates its arguments (validate.py: ids, names, finite numbers in range,
bounded JSON) before it reads or writes anything; a refusal is InvalidInput with a one-line
message, and an unreachable database is DatabaseUnreachable naming the address.
"""

from __future__ import annotations

import builtins
import functools
from typing import Any

import psycopg

from .. import codec, db, telemetry, timeouts, validate
from .. import queues as queueing
from ..errors import UnknownWorkflow, WorkflowConflict
from ..vocabulary import WorkflowStatus
from ..workflow import definition
from .connection import MAX_LIST_LIMIT, check_id, input_text
from .handles import WorkflowHandle
from .input_door import InputDoor
from .operations import WorkflowOperations


class Client(WorkflowOperations):
    """Start and list workflows; `handle(wf_id)` for one workflow's operations."""

    @functools.cached_property
    def _door(self) -> InputDoor:
        """The check of start inputs at the door, and the descriptions last read."""
        return InputDoor()

    def handle(self, wf_id: str) -> WorkflowHandle:
        """The handle of workflow `wf_id`: its operations without the id (h.result(),
        h.signal(...), h.cancel(), ...). Reads nothing: a workflow that does not exist is
        WorkflowNotFound at the handle's first call, as it is at the client's."""
        return WorkflowHandle(self, wf_id)

    @telemetry.traced(telemetry.START, kind="PRODUCER")  # the run's trace starts here
    def start(
        self,
        workflow: Any,
        wf_id: str,
        input: Any = None,
        version: str | None = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        queue_key: str | None = None,
        dedup_id: str | None = None,
        wait_for_worker: bool = True,
        execution_timeout: float | None = None,
    ) -> str:
        """Start a workflow, idempotent on wf_id. `workflow` is a name or a decorated function.

        The input is JSON, or typed values (dataclasses, pydantic models, datetimes, ...)
        recorded with their type so the workflow gets the same type (docs/typed.md); anything
        else is refused before anything is written. When the workflow declares its input type
        (a dataclass or a pydantic model), an input that does not fit it is refused too,
        InvalidInput naming the field, nothing written (docs/typed.md#checked-at-the-door). A
        second start with the same id and the same name and input returns the id; a different
        one raises WorkflowConflict.

        `queue` (default: the default queue, which has no limits), `priority` (lower runs
        first, 0 default), `queue_key` (what per-key limits count, e.g. a customer) and
        `dedup_id` (refused with WorkflowConflict while another live run of the queue has it)
        are described in docs/queues.md. A workflow no deployment serves yet is recorded as
        `awaiting_worker` and runs once a worker registers it: a given `version` waits for that
        version, none takes the newest live one at that registration (wait_for_worker=False
        refuses instead, UnknownWorkflow).

        `execution_timeout` (seconds, None: none) bounds the whole workflow, its children and
        its continue-as-new successors, from this start on the database clock; past it the
        run ends `timed_out` wherever it is (docs/timeouts.md). A second start with the same
        id must ask for the same timeout.
        """
        check_id(wf_id)
        execution_timeout = timeouts.check_seconds(execution_timeout, "execution_timeout")
        version = validate.optional_name(version, "version")
        encoded = codec.encode(input, "workflow input")
        text = input_text(encoded)
        # The input's check at the door (docs/typed.md#checked-at-the-door): against the class
        # here, before any round trip, when the function is at hand and its version is the one
        # started; else against the deployment's stored description, in the start's transaction.
        checked = False
        if isinstance(workflow, str):
            name = validate.name(workflow, "workflow name")
        else:
            wf = definition(workflow)
            if version is None or version == wf.version:
                self._door.check_local(wf, wf_id, encoded)
                checked = True
            self.register(wf)
            name, version = wf.name, version or wf.version
        # Queues and starts before a worker exists: docs/queues.md. A name no deployment serves
        # is recorded as awaiting_worker (wait_for_worker=False: refused, UnknownWorkflow).
        opts: dict[str, Any] = {"name": name, "input_text": text, "queue": queueing.optional_queue(queue),
                "priority": queueing.priority(priority),
                "queue_key": validate.optional_name(queue_key, "queue_key"),
                "dedup_id": validate.optional_name(dedup_id, "dedup_id")}  # fmt: skip
        schema_md5 = None if checked else self._door.remembered(name, version, encoded)
        if execution_timeout is None and self._start_served(
            wf_id, name, version, opts, checked, schema_md5
        ):
            return wf_id
        try:
            resolved: str | None = self._resolve_version(name, version)
        except UnknownWorkflow:
            if not wait_for_worker:
                raise
            resolved = None
        with self._transaction() as conn:
            door = None if checked else self._door.in_transaction(name, version, wf_id, encoded)
            inserted, _ = queueing.start_in(conn, wf_id=wf_id, version=resolved,
                                            wanted_version=version, check=door, **opts)  # fmt: skip
            if inserted:
                if execution_timeout is not None:  # same transaction: now() is the start's
                    timeouts.set_deadline(conn, wf_id, execution_timeout)
                telemetry.started(conn, wf_id, name)  # its trace context, stored with it
                return wf_id
            existing = db.one(conn.execute(db.query("get_workflow"), {"id": wf_id}))
            same = queueing.same_start(conn, wf_id, existing, wanted=version, **opts)
            recorded = timeouts.recorded_timeout(conn, wf_id)
            same = (
                same
                and (recorded is None) == (execution_timeout is None)
                and (recorded is None or abs(recorded - (execution_timeout or 0)) < 1e-6)
            )
        if same:
            return wf_id
        raise WorkflowConflict(
            f"workflow id {wf_id!r} already exists as {existing['name']}@"
            f"{existing['version'] or '(no version yet)'} with a different name, version or input, "
            "or other queue options or execution timeout; choose a new id to start another "
            "workflow"
        )

    def _start_served(self, wf_id: str, name: str, version: str | None,
                      opts: dict[str, Any], checked: bool,
                      schema_md5: str | None) -> bool:  # fmt: skip
        """The usual start in one statement and one round trip (queues.start_served). False:
        nothing written, or not known to be; the general form that follows finds out (a start
        is idempotent on its id, so a statement lost with its connection is safe to repeat)."""
        parent = telemetry.traceparent()  # None without a valid span
        try:
            with self._lock:
                inserted = queueing.start_served(self._live(), wf_id=wf_id, wanted_version=version,
                                                 traceparent=parent, input_checked=checked,
                                                 schema_md5=schema_md5, **opts)  # fmt: skip
        except psycopg.OperationalError:
            return False
        if inserted:
            telemetry.start_noted(wf_id, name)
        return inserted

    def list(self, status: str | None = None, name: str | None = None,
             version: str | None = None, limit: int = 1000) -> builtins.list[db.Row]:  # fmt: skip
        """Workflows, newest first, optionally filtered; at most `limit` (1-100000) rows."""
        if status is not None:
            validate.choice(status, "status", WorkflowStatus.values())
        params = {"status": status, "name": validate.optional_name(name, "workflow name"),
                  "version": validate.optional_name(version, "version"),
                  "limit": validate.count(limit, "limit", high=MAX_LIST_LIMIT)}  # fmt: skip
        return self._execute(db.query("list_workflows"), params).fetchall()
