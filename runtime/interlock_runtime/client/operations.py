"""Operations on one workflow, named by its id, the client's part (docs/api.md#client):
read it (describe, its claims, its effects), signal it, query its status, cancel it, move it
to another version, fork it. Results (client/results.py) waits for its end.

A WorkflowHandle (client/handles.py) is these operations bound to one id. signal_in and cancel_in
are their bodies inside a caller's transaction (the console and the race tests use them).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from .. import codec, db, telemetry, timeouts, validate
from .. import queues as queueing
from ..errors import InvalidInput, WorkflowConflict, WorkflowFinished, WorkflowNotFound
from .connection import MAX_SEQ, TERMINAL, check_id, input_text
from .deployments import Deployments
from .results import Results


class WorkflowOperations(Results, Deployments):
    """Read, signal, query, cancel, migrate and fork a workflow by its id."""

    def describe(self, wf_id: str) -> db.Row:
        """The workflow row, its steps and its claim history. Read only; runs no code.

        With the timeouts (docs/timeouts.md): `execution_timeout`, `execution_deadline`,
        `execution_seconds_left` (negative once past), `step_timers` (each timed step's first
        and last attempt start, attempts, and its deadlines) and `timed_out` (which timeouts
        fired: a step's start_to_close or schedule_to_close, the workflow's execution)."""
        check_id(wf_id)
        row = self._execute(db.query("get_workflow"), {"id": wf_id}).fetchone()
        if row is None:
            raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
        row["steps"] = self._execute(db.query("load_steps"), {"wf": wf_id}).fetchall()
        row["claims"] = self.claim_history(wf_id)
        row["effects"] = self.effects(wf_id)
        with self._lock:
            row.update(timeouts.describe(self._live(), wf_id, row["steps"], row["status"],
                                         row["error"]))  # fmt: skip
        return row

    def claim_history(self, wf_id: str) -> list[db.Row]:
        """Every claim of the workflow, by epoch: the owner, the version it ran, when."""
        check_id(wf_id)
        return self._execute(db.query("claim_history"), {"wf": wf_id}).fetchall()

    def effects(self, wf_id: str) -> list[db.Row]:
        """The effects the workflow proposed: each one's action, target, tier, state and grant."""
        check_id(wf_id)
        return self._execute(db.query("effects_of_workflow"), {"wf": wf_id}).fetchall()

    @telemetry.traced(telemetry.SIGNAL, kind="PRODUCER", attributes=telemetry.signal_attrs)
    def signal(self, wf_id: str, name: str, payload: Any = None, sender: str | None = None) -> int:
        """Deliver a durable signal and wake the workflow (one transaction). Returns its id.

        A typed payload reaches ctx.wait_signal as its type (docs/typed.md). Refused with
        nothing written when the workflow does not exist or has ended."""
        check_id(wf_id)
        validate.name(name, "signal name", max_chars=200)
        if name.startswith("$"):
            raise InvalidInput(f"signal name {validate.shown(name)}: names starting with $ are "
                               "the runtime's own; choose another")  # fmt: skip
        sender = validate.optional_name(sender, "sender")
        value = codec.encode({} if payload is None else payload, "signal payload")
        body = json.loads(input_text(value, "signal payload"))
        with self._transaction() as conn:
            return signal_in(conn, wf_id, name, body, sender)

    def query(self, wf_id: str, default: Any = None, *, raw: bool = False) -> Any:
        """The status the workflow last published with ctx.set_status, or `default` if it set
        none. Read from the committed history in Postgres: no worker needs to run and the
        workflow is not woken. A continued run is followed to its successor. A typed status
        comes back as its type (raw=True: the recorded JSON)."""
        record = self.status_record(wf_id)
        if record["seq"] is None:
            return default
        return record["value"] if raw else codec.decode(record["value"])

    def status_record(self, wf_id: str, *, follow: bool = True) -> db.Row:
        """What rt.query reads, with where it comes from: the run that answered (`id`, after
        following continue-as-new unless follow is false), its workflow status, and the
        status's `seq`, `epoch`, `set_at` and recorded `value` (seq None: no status set).
        WorkflowNotFound if no such workflow."""
        from ..run_state import STATUS_STEP

        check_id(wf_id)
        while True:
            row = self._execute(db.query("workflow_status_object"),
                                {"id": wf_id, "name": STATUS_STEP}).fetchone()  # fmt: skip
            if row is None:
                raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
            if row["status"] != "continued" or not follow:
                break
            wf_id = row["result"]["continued_as"]
        return {"id": row["id"], "workflow_status": row["status"], "seq": row["seq"],
                "epoch": row["epoch"], "set_at": row["set_at"], "value": row["output"]}  # fmt: skip

    def cancel(self, wf_id: str, by: str | None = None) -> None:
        """Request cancellation: the workflow sees Cancelled once, at its next durable call."""
        check_id(wf_id)
        by = validate.optional_name(by, "by")
        with self._transaction() as conn:
            cancel_in(conn, wf_id, by)

    def migrate(self, wf_id: str, to_version: str) -> None:
        """Move a pending or sleeping workflow to another deployed version of its name."""
        check_id(wf_id)
        validate.name(to_version, "version")
        row = self.describe(wf_id)
        self._resolve_version(row["name"], to_version)
        if (
            self._execute(db.query("migrate"), {"id": wf_id, "version": to_version}).fetchone()
            is None
        ):
            raise WorkflowConflict(
                f"workflow {wf_id!r} is {self.describe(wf_id)['status']}; only pending or sleeping "
                "workflows can migrate (wait until it suspends)"
            )

    def fork(self, wf_id: str, at_seq: int, new_id: str) -> str:
        """A new workflow that reuses the recorded steps below at_seq and runs the rest.

        Nothing is deleted; effects are keyed by request, so a fork never resends one."""
        check_id(wf_id)
        check_id(new_id, "new workflow id")
        if isinstance(at_seq, bool) or not isinstance(at_seq, int) or not 1 <= at_seq <= MAX_SEQ:
            raise InvalidInput(f"at_seq must be an integer >= 1 (and at most {MAX_SEQ}), "
                               f"got {validate.shown(at_seq)}")  # fmt: skip
        with self._transaction() as conn:
            params = {"id": wf_id, "new_id": new_id, "at_seq": at_seq}
            try:
                inserted = conn.execute(db.query("insert_fork"), params).rowcount
            except psycopg.errors.UniqueViolation:
                raise WorkflowConflict(f"workflow id {new_id!r} already exists") from None
            if inserted == 0:
                row = conn.execute(db.query("get_workflow"), {"id": wf_id}).fetchone()
                if row is None:
                    raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
                raise WorkflowConflict(
                    f"workflow {wf_id!r} is {row['status']}: no worker has run it, so it has no "
                    "steps to fork; start a new workflow instead"
                )
            conn.execute(db.query("copy_steps_for_fork"), params)
            conn.execute(db.query("notify_ready"), {"id": new_id})
        return new_id


def signal_in(conn: db.Conn, wf_id: str, name: str, payload: Any,
              sender: str | None = None) -> int:  # fmt: skip
    """The body of rt.signal, run inside the caller's transaction (race tests hold it open)."""
    lock_live(conn, wf_id, "signalled")
    params = {"wf": wf_id, "name": name, "payload": db.jsonb(payload), "sender": sender}
    signal_id: int = db.one(conn.execute(db.query("insert_signal"), params))["id"]
    conn.execute(db.query("wake"), {"id": wf_id})
    conn.execute(db.query("notify_ready"), {"id": wf_id})
    return signal_id


def cancel_in(conn: db.Conn, wf_id: str, by: str | None = None) -> None:
    """The body of rt.cancel, run inside the caller's transaction."""
    lock_live(conn, wf_id, "cancelled")
    conn.execute(db.query("request_cancel"), {"id": wf_id, "by": by})
    if queueing.cancel_awaiting(conn, wf_id):
        return  # no worker ever served it: cancelled at once, nothing ran to compensate
    conn.execute(db.query("wake"), {"id": wf_id})
    conn.execute(db.query("notify_ready"), {"id": wf_id})


def lock_live(conn: db.Conn, wf_id: str, what: str) -> db.Row:
    """The workflow's row, locked in the caller's transaction; WorkflowNotFound or
    WorkflowFinished (nothing was `what`) when there is no live one."""
    row = conn.execute(db.query("lock_workflow"), {"id": wf_id}).fetchone()
    if row is None:
        raise WorkflowNotFound(f"no workflow with id {wf_id!r}; nothing was {what}")
    if row["status"] in TERMINAL:
        raise WorkflowFinished(f"workflow {wf_id!r} is {row['status']}; nothing was {what}")
    return row
