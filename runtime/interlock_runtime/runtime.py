"""The client API (docs/api.md): start workflows, read them, wait for results.

Runtime(dsn) applies the schema. Every public method validates its arguments (validate.py:
ids, names, finite numbers in range, bounded JSON) before it reads or writes anything; a
refusal is InvalidInput with a one-line message, and an unreachable database is
DatabaseUnreachable naming the address.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg

from . import (
    authority,
    codec,
    db,
    durability,
    end_notices,
    journal,
    local_postgres,
    migrations,
    receipts,
    stored,
    telemetry,
    timeouts,
    validate,
)
from . import queues as queueing
from . import schedules as sched
from .errors import (
    CodeChanged,
    InvalidInput,
    Suspend,
    UnknownWorkflow,
    WorkflowConflict,
    WorkflowFailed,
    WorkflowFinished,
    WorkflowNotFound,
    is_database_fault,
)
from .vocabulary import TERMINAL_STATUSES, ScheduleOverlap, WorkflowStatus
from .workflow import WorkflowDef, definition

MAX_INPUT_BYTES = stored.MAX_JSON_BYTES
MAX_LIST_LIMIT = 100_000
"""rt.list(limit=...) and `interlock list --limit`: 1 to this many rows."""
MAX_SEQ = 2**31 - 1
TERMINAL = TERMINAL_STATUSES


def check_id(value: Any, what: str = "workflow id") -> str:
    return validate.identifier(value, what)


class Runtime:
    """A client of one Interlock database. Thread-safe; cheap to keep for a process's lifetime."""

    def __init__(self, dsn: str | None = None, *, create_schema: bool = True):
        """Connect to the database at `dsn` (default: the project's own cluster). Its schema
        must be this runtime's (SchemaMismatch says to run `interlock db upgrade` if not); an
        empty database gets the schema unless create_schema is false."""
        self.dsn = dsn or local_postgres.dsn()
        self._lock = threading.Lock()
        self._conn = db.connect_explained(self.dsn)
        self._notices = end_notices.EndNotices(self.dsn)  # listens from the first result() wait
        self._can_mark = True  # false once the role may not mark a run awaited (read only)
        try:
            migrations.ensure(self._conn, create=create_schema)
            durability.check(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._notices.close()
        self._conn.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _live(self) -> psycopg.Connection[db.Row]:
        """The connection, made again when it broke (a server restart, a failover: with a
        multi-host DSN the new one reaches the new primary). Call with self._lock held."""
        if self._conn.closed or self._conn.broken:
            self._conn = db.connect_explained(self.dsn)
        return self._conn

    def _execute(self, sql: str, params: dict[str, Any] | None = None) -> psycopg.Cursor[db.Row]:
        with self._lock:
            return self._live().execute(sql, params)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[db.Row]]:
        """One transaction under the lock. A connection found dead at BEGIN (nothing sent yet)
        is made again once, so a client rides through a restart or a failover; a connection
        lost later raises (the transaction's outcome is the caller's to find out)."""
        with self._lock, ExitStack() as stack:
            try:
                conn = self._live()
                stack.enter_context(conn.transaction())
            except psycopg.OperationalError:
                self._conn.close()
                conn = self._live()
                stack.enter_context(conn.transaction())
            yield conn

    # -- deployments ------------------------------------------------------------------------

    def register(self, *workflows: Any, allow_code_change: bool = False) -> list[WorkflowDef]:
        """Record the (name, version, code hash) of each workflow. A changed hash for a deployed
        pair raises CodeChanged unless allow_code_change."""
        defs = [definition(w) for w in workflows]
        with self._transaction():
            for wf in defs:
                register_deployment(self._conn, wf, allow_code_change)
        return defs

    def deployments(self) -> list[db.Row]:
        return self._execute(db.query("list_deployments")).fetchall()

    # -- workflows --------------------------------------------------------------------------

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
        else is refused before anything is written. A second start with the same id and the
        same name and input returns the id; a different one raises WorkflowConflict.

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
        text = _input_text(codec.encode(input, "workflow input"))
        if isinstance(workflow, str):
            name = validate.name(workflow, "workflow name")
        else:
            wf = definition(workflow)
            self.register(wf)
            name, version = wf.name, version or wf.version
        # Queues and starts before a worker exists: docs/queues.md. A name no deployment serves
        # is recorded as awaiting_worker (wait_for_worker=False: refused, UnknownWorkflow).
        opts: dict[str, Any] = {"name": name, "input_text": text, "queue": queueing.optional_queue(queue),
                "priority": queueing.priority(priority),
                "queue_key": validate.optional_name(queue_key, "queue_key"),
                "dedup_id": validate.optional_name(dedup_id, "dedup_id")}  # fmt: skip
        if execution_timeout is None and self._start_served(wf_id, name, version, opts):
            return wf_id
        try:
            resolved: str | None = self._resolve_version(name, version)
        except UnknownWorkflow:
            if not wait_for_worker:
                raise
            resolved = None
        with self._transaction() as conn:
            inserted, _ = queueing.start_in(conn, wf_id=wf_id, version=resolved,
                                            wanted_version=version, **opts)  # fmt: skip
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
                      opts: dict[str, Any]) -> bool:  # fmt: skip
        """The usual start in one statement and one round trip (queues.start_served). False:
        nothing written, or not known to be; the general form that follows finds out (a start
        is idempotent on its id, so a statement lost with its connection is safe to repeat)."""
        parent = telemetry.traceparent()  # None without a valid span
        try:
            with self._lock:
                inserted = queueing.start_served(self._live(), wf_id=wf_id, wanted_version=version,
                                                 traceparent=parent, **opts)  # fmt: skip
        except psycopg.OperationalError:
            return False
        if inserted:
            telemetry.start_noted(wf_id, name)
        return inserted

    def _resolve_version(self, name: str, version: str | None) -> str:
        if version is not None:
            found = self._execute(db.query("get_deployment"), {"name": name, "version": version})
            if found.fetchone():
                return version
        else:
            row = self._execute(db.query("newest_version"), {"name": name}).fetchone()
            if row:
                newest: str = row["version"]
                return newest
        registered = sorted(f"{d['name']}@{d['version']}" for d in self.deployments())
        wanted = f"{name}@{version}" if version else name
        raise UnknownWorkflow(
            f"no deployment serves workflow {wanted!r}; registered: "
            f"{', '.join(registered) or 'none'}. Start a worker that serves it, or call "
            "rt.register(fn) with the decorated function."
        )

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
        check_id(wf_id)
        return self._execute(db.query("claim_history"), {"wf": wf_id}).fetchall()

    def list(self, status: str | None = None, name: str | None = None,
             version: str | None = None, limit: int = 1000) -> list[db.Row]:  # fmt: skip
        """Workflows, newest first, optionally filtered; at most `limit` (1-100000) rows."""
        if status is not None:
            validate.choice(status, "status", WorkflowStatus.values())
        params = {"status": status, "name": validate.optional_name(name, "workflow name"),
                  "version": validate.optional_name(version, "version"),
                  "limit": validate.count(limit, "limit", high=MAX_LIST_LIMIT)}  # fmt: skip
        return self._execute(db.query("list_workflows"), params).fetchall()

    def result(self, wf_id: str, timeout: float | None = None, poll: float = 1.0, *,
               raw: bool = False) -> Any:  # fmt: skip
        """Wait until the workflow ends; return its result or raise WorkflowFailed.

        The wait wakes when the run's end is announced (LISTEN, docs/api.md#results), so it
        returns within a round trip of the end. `poll` (0.001-60 seconds) is the longest
        pause between two looks at the row while that holds; before the run is claimed, or
        when its end cannot be heard (a lost connection, a role that may not mark it), the
        pauses are at most 0.1 s. A run that continued as new is followed to its successor,
        as Temporal does. `timeout` (seconds, finite, >= 0) None waits for ever. A typed
        result comes back as its type (its class must be imported in this process, else
        RecordedTypeError says so); raw=True returns the recorded JSON instead."""
        woken = threading.Event()
        with ResultWait(self, wf_id, timeout, poll, woken.set) as wait:
            while True:
                woken.clear()
                ended, value, pause = wait.look(raw)
                if ended:
                    return value
                woken.wait(pause)

    def result_now(self, wf_id: str, *, raw: bool = False) -> tuple[bool, Any, str]:
        """One look at a workflow for result(): (True, its result, status) when it completed,
        else (False, the id to wait on, status): its successor's when it continued as new.
        Raises WorkflowFailed when it ended otherwise, WorkflowNotFound for no such id."""
        ended, value, status, _ = self._look(wf_id, raw=raw, mark=False)
        return ended, value, status

    def _look(self, wf_id: str, *, raw: bool, mark: bool) -> tuple[bool, Any, str, bool]:
        """result_now(), and with `mark` the run marked awaited if it runs (sql: await_end);
        the fourth value is true when its end from now on will be announced."""
        check_id(wf_id)
        row = None
        if mark and self._can_mark:
            try:
                row = self._execute(db.query("await_end"), {"id": wf_id}).fetchone()
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
                self._can_mark = False  # a read-only role or server: result() polls
        if row is None:
            row = self._execute(db.query("workflow_outcome"), {"id": wf_id}).fetchone()
        if row is None:
            raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
        heard = bool(row.get("heard"))
        if row["status"] == "completed":
            return True, row["result"] if raw else codec.decode(row["result"]), row["status"], heard
        if row["status"] == "continued":
            successor: str = row["result"]["continued_as"]
            return False, successor, row["status"], heard
        if row["status"] in TERMINAL:
            raise WorkflowFailed(wf_id, row["status"], row["error"])
        return False, wf_id, row["status"], heard

    # -- queues (queues.py, docs/queues.md) ----------------------------------------------------

    def queue(self, name: str, *, concurrency: int | None = None,
              worker_concurrency: int | None = None, per_key_concurrency: int | None = None,
              rate: Any = None, per_key_rate: Any = None) -> db.Row:  # fmt: skip
        """Declare a queue, or replace all its limits (a limit left out is lifted). Enforced
        by the claim in Postgres, so they hold across every worker: `concurrency` runs at once
        over all workers, `worker_concurrency` in one worker, `per_key_concurrency` per
        queue_key; `rate` and `per_key_rate` as (limit, period_seconds) or {"limit": N,
        "period": seconds}: at most that many first starts in any window of that period.
        Returns the queue with its current use, as queues() lists it."""
        with self._transaction() as conn:
            return queueing.set_queue(conn, name, concurrency=concurrency,
                                      worker_concurrency=worker_concurrency,
                                      per_key_concurrency=per_key_concurrency,
                                      rate_limit=rate, per_key_rate=per_key_rate)  # fmt: skip

    def queues(self) -> builtins.list[db.Row]:
        """Declared queues and the queues live runs name: limits, runs running, ready,
        waiting, awaiting a worker, first starts in the rate window."""
        with self._lock:
            return queueing.list_queues(self._live())

    def describe_queue(self, name: str, keys: int = 20) -> db.Row:
        """One queue as queues() shows it, plus its busiest queue keys (at most `keys`)."""
        with self._lock:
            return queueing.describe_queue(self._live(), name, keys)

    # -- signals, cancel, versions, fork ------------------------------------------------------

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
        body = json.loads(_input_text(value, "signal payload"))
        with self._transaction():
            return signal_in(self._conn, wf_id, name, body, sender)

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
        from .context import STATUS_STEP

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
        with self._transaction():
            cancel_in(self._conn, wf_id, by)

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

    def drain_report(self) -> builtins.list[db.Row]:
        """Workflows counted by name, version and status: what a version still has to drain."""
        return self._execute(db.query("drain_report")).fetchall()

    def fork(self, wf_id: str, at_seq: int, new_id: str) -> str:
        """A new workflow that reuses the recorded steps below at_seq and runs the rest.

        Nothing is deleted; effects are keyed by request, so a fork never resends one."""
        check_id(wf_id)
        check_id(new_id, "new workflow id")
        if isinstance(at_seq, bool) or not isinstance(at_seq, int) or not 1 <= at_seq <= MAX_SEQ:
            raise InvalidInput(f"at_seq must be an integer >= 1 (and at most {MAX_SEQ}), "
                               f"got {validate.shown(at_seq)}")  # fmt: skip
        with self._transaction():
            params = {"id": wf_id, "new_id": new_id, "at_seq": at_seq}
            try:
                inserted = self._conn.execute(db.query("insert_fork"), params).rowcount
            except psycopg.errors.UniqueViolation:
                raise WorkflowConflict(f"workflow id {new_id!r} already exists") from None
            if inserted == 0:
                row = self._conn.execute(db.query("get_workflow"), {"id": wf_id}).fetchone()
                if row is None:
                    raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
                raise WorkflowConflict(
                    f"workflow {wf_id!r} is {row['status']}: no worker has run it, so it has no "
                    "steps to fork; start a new workflow instead"
                )
            self._conn.execute(db.query("copy_steps_for_fork"), params)
            self._conn.execute(db.query("notify_ready"), {"id": new_id})
        return new_id

    # -- schedules (schedules.py, docs/schedules.md) ------------------------------------------

    def create_schedule(self, schedule_id: str, workflow: Any, *, cron: str | None = None,
                        every: int | None = None, offset: int = 0, input: Any = None,
                        version: str | None = None, overlap: str = "skip",
                        catchup_window: float = sched.DEFAULT_CATCHUP_WINDOW,
                        time_zone: str = "UTC", paused: bool = False,
                        note: str | None = None) -> str:  # fmt: skip
        """A durable schedule: start `workflow` on each tick of `cron` (five fields, in
        `time_zone`) or `every` seconds (aligned to the Unix epoch, plus `offset`). Each run
        gets {"schedule_id", "scheduled_at", "started_at", "source", "input"}. `overlap` is
        skip, buffer_one or allow_all; ticks older than `catchup_window` seconds when a worker
        gets to them are dropped (counted as missed). `version` None: the newest deployed
        version at each tick. Idempotent on the id with the same definition; another one
        raises ScheduleConflict."""
        sid = sched.check_id(schedule_id)
        version = validate.optional_name(version, "version")
        spec = sched.make_spec(cron, every, offset, time_zone)
        validate.choice(overlap, "overlap", ScheduleOverlap.values())
        window = validate.number(catchup_window, "catchup_window", low=sched.MIN_CATCHUP_WINDOW,
                                 high=validate.MAX_SECONDS, unit="seconds")  # fmt: skip
        if not isinstance(paused, bool):
            raise InvalidInput("paused must be True or False")
        note = None if note is None else validate.text(note, "note", max_chars=1000)
        value = json.loads(_input_text(input))
        if isinstance(workflow, str):
            name = validate.name(workflow, "workflow name")
        else:
            wf = self.register(workflow)[0]
            name = wf.name
        self._resolve_version(name, version)  # refused now if nothing serves it
        with self._transaction() as conn:
            sched.create_in(conn, sid, name, version, spec, value, overlap,
                                round(window, 6), paused, note, None)  # fmt: skip
        return sid

    def schedules(self, limit: int = 1000) -> builtins.list[db.Row]:
        """Every schedule, by id: its spec, overlap, paused, next fire, last run and status."""
        limit = validate.count(limit, "limit", high=MAX_LIST_LIMIT)
        rows = self._execute(db.query("schedule_list"), {"limit": limit}).fetchall()
        return [sched.shown(r) for r in rows]

    def describe_schedule(self, schedule_id: str, fires: int = 20, upcoming: int = 5) -> db.Row:
        """One schedule: its row, the next `upcoming` tick times, whether its previous run is
        live, and its last `fires` decided ticks (started, skipped, buffered, failed)."""
        sid = sched.check_id(schedule_id)
        fires = validate.count(fires, "fires", low=0, high=MAX_LIST_LIMIT)
        upcoming = validate.count(upcoming, "upcoming", low=0, high=1000)
        with self._transaction() as conn:
            return sched.describe_in(conn, sid, fires, upcoming)

    def pause_schedule(self, schedule_id: str, *, by: str | None = None,
                       note: str | None = None) -> None:  # fmt: skip
        """Stop firing until resume_schedule; runs already started go on."""
        sid = sched.check_id(schedule_id)
        by = validate.optional_name(by, "by")
        note = None if note is None else validate.text(note, "note", max_chars=1000)
        with self._transaction() as conn:
            sched.pause_in(conn, sid, by, note)

    def resume_schedule(self, schedule_id: str, *, note: str | None = None) -> Any:
        """Fire again; returns the next tick time. Ticks that fell while paused are not made up."""
        sid = sched.check_id(schedule_id)
        note = None if note is None else validate.text(note, "note", max_chars=1000)
        with self._transaction() as conn:
            return sched.resume_in(conn, sid, note)

    def delete_schedule(self, schedule_id: str) -> None:
        """Remove a schedule and its fire history; the runs it started are kept."""
        sid = sched.check_id(schedule_id)
        with self._transaction() as conn:
            sched.delete_in(conn, sid)

    def trigger_schedule(self, schedule_id: str, *, overlap: str | None = None) -> db.Row:
        """Start a run now (paused or not), in this transaction, without a worker. overlap
        None: allow_all if the schedule allows all, else skip: while its previous run is live
        nothing starts (outcome "skipped"). Returns {outcome, workflow_id, reason, tick}."""
        sid = sched.check_id(schedule_id)
        if overlap is not None:
            validate.choice(overlap, "overlap", (ScheduleOverlap.SKIP, ScheduleOverlap.ALLOW_ALL))
        with self._transaction() as conn:
            return sched.trigger_in(conn, sid, overlap)

    # -- authority ----------------------------------------------------------------------------

    def grant(self, principal: str, action: str, *, constraints: Any = None,
              expires_in: float | None = None, by: str | None = None,
              grant_id: str | None = None) -> str:  # fmt: skip
        """A policy grant: `principal` may perform `action`, within `constraints` (bounds on
        named payload fields, see authority.py: {"amount": {"max": 5000}}), until it expires
        (`expires_in` seconds; None: until revoked)."""
        if not by:
            raise InvalidInput("grant(by=...) is required: who grants this authority")
        by = validate.name(by, "by")
        if not isinstance(action, str) or not action:
            raise InvalidInput("grant(action=...) must name the action it allows, e.g. 'refund'")
        validate.name(action, "action")
        validate.name(principal, "principal")
        gid = check_id(grant_id or f"grant_{uuid.uuid4().hex[:16]}", "grant id")
        value = None if constraints is None else json.loads(_input_text(constraints, "constraints"))
        _check_numbers(value)
        bounds = authority.validate_constraints(value)
        _check_money(bounds)
        params = {"id": gid, "principal": principal, "action": action,
                  "constraints": None if bounds is None else db.jsonb(bounds),
                  "payload_hash": None, "facts_seen": None, "by": by,
                  "expires_in": _expires_in(expires_in)}  # fmt: skip
        try:
            self._execute(db.query("insert_grant"), params)
        except psycopg.errors.UniqueViolation:
            raise WorkflowConflict(f"grant id {gid!r} already exists") from None
        return gid

    def approve(self, wf_id: str, payload: Any, facts_seen: Any = None, *, by: str,
                expires_in: float | None = None, action: str | None = None,
                principal: str | None = None) -> str:  # fmt: skip
        """A human approval, in one transaction: a grant bound to exactly this payload (its hash)
        and the facts the approver saw, plus the `approve` signal {grant_id, payload,
        facts_seen} that wakes the workflow. `action` None: the grant covers this payload
        whatever the effect's action; name one to narrow it."""
        with self._transaction() as conn:
            return approve_in(conn, wf_id, payload, facts_seen, by=by, expires_in=expires_in,
                              action=action, principal=principal)  # fmt: skip

    def revoke(self, grant_id: str, by: str | None = None) -> builtins.list[str]:
        """Revoke a grant. Returns exactly the effects that may still land: those dispatched
        under it before the revoke committed. No later dispatch or resend can use it."""
        check_id(grant_id, "grant id")
        by = validate.optional_name(by, "by")
        with self._transaction():
            return revoke_in(self._conn, grant_id, by)

    def ambiguous(self) -> builtins.list[db.Row]:
        """Effects whose outcome cannot be known from the target: a human must reconcile."""
        return self._execute(db.query("ambiguous_effects")).fetchall()

    def reconcile(self, effect_id: str, evidence: str, by: str) -> None:
        """Attach a human's attestation to an AMBIGUOUS effect (never written into the journal)."""
        if not by or not evidence:
            raise InvalidInput("reconcile needs evidence and by (who attests)")
        check_id(effect_id, "effect id")
        validate.text(evidence, "evidence")
        validate.name(by, "by")
        value = {
            "evidence": evidence,
            "by": by,
            "at": db.one(self._execute(db.query("db_now")))["now"].isoformat(),
        }
        if self._execute(db.query("reconcile_effect"),
                         {"eid": effect_id, "reconciled": db.jsonb(value)}).fetchone() is None:  # fmt: skip
            raise WorkflowConflict(f"effect {effect_id!r} is not AMBIGUOUS (or does not exist)")

    def receipt(self, effect_id: str, key: bytes | None = None) -> dict[str, Any]:
        """The effect's journal as a verifiable bundle (HMAC-signed when a key is given)."""
        check_id(effect_id, "effect id")
        if key is not None and (not isinstance(key, bytes) or not 1 <= len(key) <= 4096):
            raise InvalidInput("a receipt key must be 1-4096 bytes (or None: unsigned)")
        entries = [json.loads(r["body"]) for r in
                   self._execute(db.query("journal_entries"), {"eid": effect_id})]  # fmt: skip
        if not entries:
            raise WorkflowNotFound(f"no journal for effect {effect_id!r}")
        eff = db.one(self._execute(db.query("get_effect"), {"eid": effect_id}))
        return receipts.bundle(entries, effect_id, key, late_result=eff["late_result"],
                               reconciled=eff["reconciled"])  # fmt: skip

    def breakers(self) -> builtins.list[db.Row]:
        """Every target's circuit breaker: consecutive failures, whether it is open."""
        return self._execute(db.query("breakers")).fetchall()

    def reset_breaker(self, target: str) -> None:
        """Close a target's circuit breaker (after fixing what made it open)."""
        validate.name(target, "target")
        if self._execute(db.query("breaker_reset"), {"target": target}).fetchone() is None:
            known = ", ".join(b["target"] for b in self.breakers()) or "none"
            raise WorkflowNotFound(f"no circuit breaker for target {target!r}; known: {known}")

    def effects(self, wf_id: str) -> builtins.list[db.Row]:
        check_id(wf_id)
        return self._execute(db.query("effects_of_workflow"), {"wf": wf_id}).fetchall()

    def recover_orphans(
        self, targets: dict[str, Any], lease_ttl: float = 30.0
    ) -> builtins.list[db.Row]:
        """Resolve effects left dispatched by stuck, failed or cancelled workflows, under a
        synthetic claim (owner $recovery); journal and effects rows only, then the workflow's
        previous status is restored. `targets` maps target names to target objects."""
        lease_ttl = validate.number(lease_ttl, "lease_ttl", low=0.5, high=86_400, unit="seconds")
        if not isinstance(targets, dict):
            raise InvalidInput("targets must be a dict of target name to target object")
        from .context import Run, WorkflowContext, port_of
        from .effects import resolve_orphan

        done: builtins.list[db.Row] = []
        for orphan in self._execute(db.query("orphaned_effects")).fetchall():
            target = targets.get(orphan["target"])
            if target is None:
                done.append({**orphan, "outcome": "skipped: no target object for this name"})
                continue
            with self._lock:
                conn = self._live()
                claim = conn.execute(db.query("orphan_claim"),
                                     {"wf": orphan["workflow_id"], "ttl": lease_ttl}).fetchone()  # fmt: skip
                if claim is None:
                    continue
                run = Run(claim["id"], claim["name"], claim["version"], claim["input"],
                          claim["epoch"], None, 0, None, lease_ttl, time.monotonic() + lease_ttl)  # fmt: skip
                ctx = WorkflowContext(run, conn, [], "$recovery")
                try:
                    eff = db.one(conn.execute(db.query("get_effect"), {"eid": orphan["effect_id"]}))
                    outcome = resolve_orphan(port_of(ctx), target, eff)
                    status = outcome.status if outcome else "retry later"
                except Suspend:
                    status = "still open: resend outcome unknown, recovery comes back later"
                finally:
                    conn.execute(db.query("orphan_restore"), {"wf": claim["id"],
                                 "epoch": claim["epoch"], "status": claim["prev_status"]})  # fmt: skip
            done.append({**orphan, "outcome": status})
        return done


UNHEARD_POLL = 0.1  # seconds: the longest pause of result() while a run's end cannot be heard
FIRST_PAUSE = 0.002  # seconds: its first pause before then, doubled at each look


class ResultWait:
    """The waiting of result(), without its sleeping, for both clients (the sync one waits on
    a threading.Event, AsyncRuntime on an asyncio.Event; `wake` sets it, from the thread that
    hears the end): the checked timeout and poll, the id waited on (a successor's once the
    run continued as new), its watch on the run's end, and the deadline. Close it (or use
    `with`) to stop watching."""

    def __init__(self, rt: Runtime, wf_id: str, timeout: float | None, poll: float,
                 wake: Callable[[], None]) -> None:  # fmt: skip
        check_id(wf_id)
        self.rt, self.wf_id, self.wake = rt, wf_id, wake
        self.timeout = validate.seconds(timeout, "timeout")
        self.poll = validate.number(poll, "poll", low=0.001, high=60, unit="seconds")
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.watched: str | None = None
        self.marked = False  # wf_id's row is marked awaited: its end is announced
        self.unheard_pause = FIRST_PAUSE
        self.fault_pause = FIRST_PAUSE  # between looks the database did not answer

    def look(self, raw: bool) -> tuple[bool, Any, float]:
        """One look (it queries, in the caller's thread): (True, the result, 0) when the run
        ended, else (False, None, seconds to wait for a wake before the next look: 0 to look
        again at once). Raises WorkflowFailed, WorkflowNotFound, and TimeoutError past the
        deadline."""
        if self.watched != self.wf_id:  # the first look, or a successor's
            self.close()
            self.rt._notices.watch(self.wf_id, self.wake)
            self.watched, self.marked, self.unheard_pause = self.wf_id, False, FIRST_PAUSE
        # listening before the look: an end committed after it is heard
        listening = self.rt._notices.listening()
        mark = listening and not self.marked
        try:
            ended, value, status, heard = self.rt._look(self.wf_id, raw=raw, mark=mark)
        except Exception as exc:
            if not is_database_fault(exc):
                raise
            return False, None, self._away(exc)
        self.fault_pause = FIRST_PAUSE
        if ended:
            return True, value, 0.0
        if value != self.wf_id:  # continued as new: follow it at once
            self.wf_id = value
            return False, None, 0.0
        if mark:
            if not heard and status == WorkflowStatus.RUNNING and self.rt._can_mark:
                return False, None, 0.0  # it changed under the mark: look again
            self.marked = heard
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError(f"workflow {self.wf_id!r} is still {status} after "
                               f"{self.timeout}s; is a worker running for it? (rt.describe "
                               "shows where it is)")  # fmt: skip
        if self.marked and listening:  # its end will wake this wait
            pause = self.poll
        else:  # not claimed yet, or not heard: look soon, then less often
            pause = min(self.poll, self.unheard_pause)
            self.unheard_pause = min(UNHEARD_POLL, self.unheard_pause * 2)
        if self.deadline is not None:
            pause = min(pause, max(0.0, self.deadline - time.monotonic()))
        return False, None, pause

    def _away(self, fault: BaseException) -> float:
        """The database did not answer the look (a restart, a failover, a killed backend): the
        run goes on, or will once it is back, and so does this wait. Look again after a pause
        that doubles up to a second (the client reconnects at its next statement); past the
        deadline, the fault is raised (docs/api.md#results)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise fault
        self.marked = False  # the mark may be gone with the transaction: mark again
        pause, self.fault_pause = self.fault_pause, min(1.0, self.fault_pause * 2)
        if self.deadline is not None:
            pause = min(pause, max(0.0, self.deadline - time.monotonic()))
        return pause

    def close(self) -> None:
        if self.watched is not None:
            self.rt._notices.unwatch(self.watched, self.wake)
            self.watched = None

    def __enter__(self) -> ResultWait:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def revoke_in(conn: db.Conn, grant_id: str, by: str | None = None) -> list[str]:
    """The body of rt.revoke inside the caller's transaction (race tests hold it open)."""
    if conn.execute(db.query("revoke_grant"), {"grant": grant_id, "by": by}).fetchone() is None:
        raise WorkflowNotFound(f"no grant with id {grant_id!r}; nothing was revoked")
    rows = conn.execute(db.query("effects_still_open_under_grant"), {"grant": grant_id})
    return [r["effect_id"] for r in rows]


def _lock_live(conn: db.Conn, wf_id: str, what: str) -> db.Row:
    row = conn.execute(db.query("lock_workflow"), {"id": wf_id}).fetchone()
    if row is None:
        raise WorkflowNotFound(f"no workflow with id {wf_id!r}; nothing was {what}")
    if row["status"] in TERMINAL:
        raise WorkflowFinished(f"workflow {wf_id!r} is {row['status']}; nothing was {what}")
    return row


def approve_in(conn: db.Conn, wf_id: str, payload: Any, facts_seen: Any = None, *, by: str,
               expires_in: float | None = None, action: str | None = None,
               principal: str | None = None, once: bool = False) -> str:  # fmt: skip
    """The body of rt.approve inside the caller's transaction (the console adds its audit row
    to the same one). once: refuse (WorkflowConflict) when an approval of this workflow is
    already waiting to be picked up, instead of a second grant."""
    check_id(wf_id)
    if not by:
        raise InvalidInput("approve(by=...) is required: who approves")
    by = validate.name(by, "by")
    if action is not None and (not isinstance(action, str) or not action):
        raise InvalidInput("approve(action=...) must be a non-empty string or None")
    action = validate.optional_name(action, "action")
    principal = validate.optional_name(principal, "principal")
    expires = _expires_in(expires_in)
    body = json.loads(_input_text({"payload": payload, "facts_seen": facts_seen}, "approval"))
    gid = f"grant_{uuid.uuid4().hex[:16]}"
    _lock_live(conn, wf_id, "approved")
    if once:
        first = conn.execute(db.query("console_pending_approval"), {"wf": wf_id}).fetchone()
        if first is not None:
            raise WorkflowConflict(f"workflow {wf_id!r} was already approved by "
                                   f"{first['sender']}; nothing was approved")  # fmt: skip
    conn.execute(db.query("insert_grant"), {
        "id": gid, "principal": principal or f"workflow:{wf_id}", "action": action,
        "constraints": None, "payload_hash": journal.payload_hash(body["payload"]),
        "facts_seen": db.jsonb(body["facts_seen"]), "by": by, "expires_in": expires})  # fmt: skip
    signal_in(conn, wf_id, "approve", {"grant_id": gid, **body}, sender=by)
    return gid


def signal_in(conn: db.Conn, wf_id: str, name: str, payload: Any,
              sender: str | None = None) -> int:  # fmt: skip
    """The body of rt.signal, run inside the caller's transaction (race tests hold it open)."""
    _lock_live(conn, wf_id, "signalled")
    params = {"wf": wf_id, "name": name, "payload": db.jsonb(payload), "sender": sender}
    signal_id: int = db.one(conn.execute(db.query("insert_signal"), params))["id"]
    conn.execute(db.query("wake"), {"id": wf_id})
    conn.execute(db.query("notify_ready"), {"id": wf_id})
    return signal_id


def cancel_in(conn: db.Conn, wf_id: str, by: str | None = None) -> None:
    """The body of rt.cancel, run inside the caller's transaction."""
    _lock_live(conn, wf_id, "cancelled")
    conn.execute(db.query("request_cancel"), {"id": wf_id, "by": by})
    if queueing.cancel_awaiting(conn, wf_id):
        return  # no worker ever served it: cancelled at once, nothing ran to compensate
    conn.execute(db.query("wake"), {"id": wf_id})
    conn.execute(db.query("notify_ready"), {"id": wf_id})


def _input_text(value: Any, what: str = "workflow input") -> str:
    """Canonical JSON text of a value, or InvalidInput (stored.json_text: JSON types, finite
    numbers, no NUL or lone surrogate, at most 64 levels deep and 1 MiB)."""
    return stored.json_text(value, what, max_bytes=MAX_INPUT_BYTES)


def _expires_in(seconds: Any) -> float | None:
    """None (never expires) or a positive, finite number of seconds, at most ten years."""
    if seconds is not None and (isinstance(seconds, bool)
                                or not isinstance(seconds, (int, float))):  # fmt: skip
        raise InvalidInput(f"expires_in must be a positive number of seconds (or None: until "
                           f"revoked), not {validate.shown(seconds)}")  # fmt: skip
    return validate.seconds(seconds, "expires_in", allow_zero=False)


_MONEY = ("amount", "cents")


def _check_numbers(constraints: Any) -> None:
    """Constraint bounds (min, max) are finite numbers within +-2**53, exact in every JSON
    reader (checked before authority.validate_constraints, which checks the shape)."""
    if not isinstance(constraints, dict):
        return
    for field, ops in constraints.items():
        for op in ("min", "max"):
            if isinstance(ops, dict) and op in ops:
                validate.number(ops[op], f"constraint on {validate.shown(field)}: {op}",
                                low=-stored.MAX_SAFE_INTEGER, high=stored.MAX_SAFE_INTEGER)  # fmt: skip


def _check_money(bounds: dict[str, dict[str, Any]] | None) -> None:
    """A cap on a money field (its name ends in amount or cents: amounts are never negative)
    may not be below zero: nothing could pass it."""
    for field, ops in (bounds or {}).items():
        last = field.rsplit(".", 1)[-1].lower()
        if "max" in ops and last.endswith(_MONEY) and ops["max"] < 0:
            raise InvalidInput(f"constraint on {field!r}: max {ops['max']} is below zero, so no "
                               "amount could pass; give a cap of 0 or more")  # fmt: skip


def register_deployment(conn: db.Conn, wf: WorkflowDef, allow_code_change: bool) -> None:
    """Upsert (name, version, code_sha256) inside the caller's transaction (docs/design.md#durable-replay)."""
    params = {"name": wf.name, "version": wf.version, "sha": wf.code_sha256}
    conn.execute(db.query("register_deployment"), params)
    row = db.one(conn.execute(db.query("get_deployment"), params))
    if row["code_sha256"] != wf.code_sha256:
        if not allow_code_change:
            raise CodeChanged(wf.name, wf.version, row["code_sha256"], wf.code_sha256)
        conn.execute(db.query("replace_deployment_hash"), params)
    # runs started before any deployment served this name get their version now (queues.py)
    conn.execute(db.query("resolve_awaiting"), {"name": wf.name})
