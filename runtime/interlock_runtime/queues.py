"""Named queues with limits that hold across workers, priorities, and starts before any worker
exists (docs/queues.md).

A workflow is started on a queue (`default` unless named) with a priority (lower runs first)
and optionally a queue key (a customer, a tenant) and a dedup id. A queue declared with
`rt.queue(...)` has limits: runs at once (over all workers, per worker, per key) and first
starts per period (per queue, per key). The limits are enforced by the claim, in Postgres:
a worker that serves a limited queue claims inside a transaction that holds that queue's
advisory lock and counts the runs whose lease is live and the first starts in the window
(sql/queries/queues.sql, claim_limited). A worker serving no limited queue claims with the
plain single statement, as before queues existed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import psycopg

from . import db, stored, validate
from .errors import InvalidInput, WorkflowConflict, WorkflowNotFound
from .vocabulary import WorkflowStatus

DEFAULT_QUEUE = "default"
MAX_PRIORITY = 1_000_000
"""Priorities are whole numbers in [-MAX_PRIORITY, MAX_PRIORITY]; lower runs first, 0 default."""
MAX_LIMIT = 1_000_000
MAX_PERIOD = 366 * 86_400.0
SCAN_FACTOR = 4
"""The limited claim locks up to this many times the free slots as candidates, so rows a
partly used limit holds back do not hide claimable rows of other queues behind them."""


# -- checks -------------------------------------------------------------------------------------


def queue_name(value: Any, what: str = "queue name") -> str:
    return validate.identifier(value, what)


def optional_queue(value: Any) -> str:
    return DEFAULT_QUEUE if value is None else queue_name(value, "queue")


def settable_name(value: Any) -> str:
    """A queue whose limits may be set: any but the default queue."""
    name = queue_name(value)
    if name == DEFAULT_QUEUE:
        raise InvalidInput("the default queue has no limits, so that runs started without a "
                           "queue are claimed as before; start them on a named queue "
                           "(rt.start(..., queue='name')) and set that queue's limits")  # fmt: skip
    return name


def priority(value: Any, from_text: bool = False) -> int:
    return int(validate.number(value, "priority", low=-MAX_PRIORITY, high=MAX_PRIORITY,
                               integer=True, from_text=from_text))  # fmt: skip


def served(queues: Iterable[str] | str | None) -> list[str] | None:
    """The queues a worker serves: None (every queue) or a non-empty list of queue names;
    a string is a comma-separated list (the CLI's --queue a,b)."""
    if queues is None:
        return None
    items = [q.strip() for q in queues.split(",")] if isinstance(queues, str) else list(queues)
    names = sorted({queue_name(q, "queue") for q in items if not isinstance(q, str) or q})
    if not names:
        raise InvalidInput("a worker's queues must name at least one queue (or be left out: "
                           "every queue)")  # fmt: skip
    return names


def rate(value: Any, what: str) -> tuple[int | None, float | None]:
    """A rate limit: None, (limit, period_seconds), or {"limit": N, "period": seconds} as DBOS
    writes it. Returns (limit, period) or (None, None)."""
    if value is None:
        return None, None
    if isinstance(value, Mapping):
        if set(value) != {"limit", "period"}:
            raise InvalidInput(f"{what} as a dict needs exactly the keys limit and period, "
                               f"e.g. {{'limit': 10, 'period': 60}}; got {sorted(value)}")  # fmt: skip
        limit, period = value["limit"], value["period"]
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        limit, period = value
    else:
        raise InvalidInput(f"{what} must be (limit, period_seconds), e.g. (10, 60) for 10 "
                           f"starts a minute, not {validate.shown(value)}")  # fmt: skip
    return (validate.count(limit, f"{what} limit", high=MAX_LIMIT),
            validate.number(period, f"{what} period", low=0, low_open=True, high=MAX_PERIOD,
                            unit="seconds"))  # fmt: skip


def _limit(value: Any, what: str) -> int | None:
    return None if value is None else validate.count(value, what, high=MAX_LIMIT)


# -- declaring queues ---------------------------------------------------------------------------


def set_queue(conn: db.Conn, name: str, *, concurrency: int | None = None,
              worker_concurrency: int | None = None, per_key_concurrency: int | None = None,
              rate_limit: Any = None, per_key_rate: Any = None) -> db.Row:  # fmt: skip
    """Declare a queue or replace all its limits (one left out is lifted). Returns the queue
    as queue_list shows it."""
    name = settable_name(name)
    limit, period = rate(rate_limit, "rate")
    key_limit, key_period = rate(per_key_rate, "per_key_rate")
    params = {"name": name, "concurrency": _limit(concurrency, "concurrency"),
              "worker_concurrency": _limit(worker_concurrency, "worker_concurrency"),
              "per_key_concurrency": _limit(per_key_concurrency, "per_key_concurrency"),
              "rate_limit": limit, "rate_period": period,
              "per_key_rate_limit": key_limit, "per_key_rate_period": key_period}  # fmt: skip
    conn.execute(db.query("queue_upsert"), params)
    return describe_queue(conn, name)


def list_queues(conn: db.Conn) -> list[db.Row]:
    """Declared queues and queues that live runs name, with their limits and use now."""
    return conn.execute(db.query("queue_list"), {"name": None}).fetchall()


def describe_queue(conn: db.Conn, name: str, keys: int = 20) -> db.Row:
    """One queue's limits and use, and its busiest keys (at most `keys` of them)."""
    name = queue_name(name)
    keys = validate.count(keys, "keys", high=10_000)
    row = conn.execute(db.query("queue_list"), {"name": name}).fetchone()
    if row is None:
        known = ", ".join(r["name"] for r in list_queues(conn)) or "none"
        raise WorkflowNotFound(f"no queue named {name!r}: none is declared and no live run names "
                               f"it; queues: {known}. Declare it with `interlock queue set "
                               f"{name} ...`")  # fmt: skip
    window = max(row["rate_period_s"] or 0, row["per_key_rate_period_s"] or 0, 60.0)
    row["keys"] = conn.execute(db.query("queue_keys"),
                               {"name": name, "window": window, "limit": keys}).fetchall()  # fmt: skip
    return row


# -- starting -----------------------------------------------------------------------------------


def start_in(conn: db.Conn, *, wf_id: str, name: str, version: str | None,
             wanted_version: str | None, input_text: str, queue: str, priority: int,
             queue_key: str | None, dedup_id: str | None,
             check: Callable[[db.Conn, str], None] | None = None) -> tuple[bool, str | None]:  # fmt: skip
    """The insert of rt.start inside the caller's transaction. `version` None: no deployment
    served the name when the caller looked; here, under the name's lock, look again, and if
    there still is none record the run as awaiting_worker (ilr.resolve_awaiting gives it its
    version when one is registered). `check(conn, version)` runs before the insert once the
    version is known (the input's check at the door; an awaiting run has none to check
    against). Returns (inserted, version)."""
    if version is None:
        conn.execute(db.query("lock_workflow_name"), {"name": name})
        if wanted_version is None:
            row = conn.execute(db.query("newest_version"), {"name": name}).fetchone()
            version = row["version"] if row else None
        elif conn.execute(db.query("get_deployment"),
                          {"name": name, "version": wanted_version}).fetchone():  # fmt: skip
            version = wanted_version
    if check is not None and version is not None:
        check(conn, version)
    status = WorkflowStatus.PENDING if version else WorkflowStatus.AWAITING_WORKER
    params = {**_row(wf_id, name, wanted_version, input_text, queue, priority, queue_key,
                     dedup_id), "version": version, "status": str(status)}  # fmt: skip
    try:
        # a savepoint where a dedup refusal may come (it leaves the caller's transaction open);
        # without a dedup id none can, and the insert saves the savepoint's two round trips
        with conn.transaction() if dedup_id is not None else nullcontext():
            inserted = conn.execute(db.query("start_workflow"), params).fetchone() is not None
    except psycopg.errors.UniqueViolation:
        holder = conn.execute(db.query("dedup_holder"),
                              {"queue": queue, "dedup_id": dedup_id}).fetchone()  # fmt: skip
        held = f"workflow {holder['id']!r} ({holder['status']})" if holder else "a live run"
        raise WorkflowConflict(
            f"queue {queue!r} already has a live run with dedup id {dedup_id!r}: {held}; nothing "
            "was started. Wait until it ends, or start with another dedup id"
        ) from None
    return inserted, version  # a pending run's NOTIFY went with its insert


def start_served(conn: db.Conn, *, wf_id: str, name: str, wanted_version: str | None,
                 input_text: str, queue: str, priority: int, queue_key: str | None,
                 dedup_id: str | None, traceparent: str | None,
                 input_checked: bool = False, schema_md5: str | None = None) -> bool:  # fmt: skip
    """rt.start's usual case as one autocommit statement (sql start_served): a deployed
    version, a new id. True when it inserted the run; False when it wrote nothing (no
    deployment serves the name, the id is taken, the dedup id is held, or the deployment
    describes its input type and the input was checked neither against the class
    (input_checked) nor against that very description (schema_md5, its md5)): the caller then
    takes the general form, start_in in a transaction, which handles each of those."""
    params = {**_row(wf_id, name, wanted_version, input_text, queue, priority, queue_key,
                     dedup_id), "traceparent": traceparent, "input_checked": input_checked,
              "schema_md5": schema_md5}  # fmt: skip
    try:
        row = db.one(conn.execute(db.query("start_served"), params))
    except psycopg.errors.UniqueViolation:  # a held dedup id; autocommit: nothing is left open
        return False
    return row["id"] is not None


def _row(wf_id: str, name: str, wanted_version: str | None, input_text: str, queue: str,
         priority: int, queue_key: str | None, dedup_id: str | None) -> dict[str, Any]:  # fmt: skip
    """The parameters both forms of a start write into the new run's row."""
    return {"id": wf_id, "name": name, "input": db.jsonb(json.loads(input_text)), "queue": queue,
            "priority": priority, "queue_key": queue_key, "dedup_id": dedup_id,
            "wanted_version": wanted_version}  # fmt: skip


def same_start(conn: db.Conn, wf_id: str, existing: db.Row, *, name: str, wanted: str | None,
               input_text: str, queue: str, priority: int, queue_key: str | None,
               dedup_id: str | None) -> bool:  # fmt: skip
    """Whether a second start with an existing id asks for what the first one recorded: the
    same name, input and queue options, and the same version if it names one."""
    opts = db.one(conn.execute(db.query("start_options"), {"id": wf_id}))
    version_ok = wanted is None or wanted in (existing["version"], opts["wanted_version"])
    same_opts = (opts["queue"], opts["priority"], opts["queue_key"], opts["dedup_id"]) == (
        queue,
        priority,
        queue_key,
        dedup_id,
    )
    return (existing["name"] == name and version_ok and same_opts
            and stored.to_json_text(existing["input"], "input") == input_text)  # fmt: skip


def cancel_awaiting(conn: db.Conn, wf_id: str) -> bool:
    """Inside rt.cancel's transaction: a run no worker ever served ends cancelled at once (no
    code of it ran, nothing to compensate). False when it is not awaiting a worker."""
    if conn.execute(db.query("cancel_awaiting"), {"id": wf_id}).fetchone() is None:
        return False
    conn.execute(db.query("end_workflow_grants"), {"wf": wf_id})
    return True


# -- claiming (the worker) ----------------------------------------------------------------------


class Claimer:
    """The claim of one worker: which queues it serves, and whether the last claim was under
    limits (then the worker claims again at once after a partial claim, and waits with
    next_due_limited)."""

    def __init__(self, queues: Iterable[str] | str | None = None):
        self.queues = served(queues)
        self.limited: list[str] = []
        self._fresh = False  # `limited` as next_due read it, before the wait this claim ends

    def claim(self, conn: db.Conn, params: dict[str, Any]) -> list[db.Row]:
        """Claim up to params['limit'] due runs. `params` holds names, versions, limit, owner,
        ttl (the plain claim's).

        Which served queues have limits is read by next_due before each wait (no round trip
        here after a wake-up). A list older than that is safe: the plain claim never takes a
        run of a queue limited at its own statement's time, so a queue limited since is only
        claimed after the next next_due (a wait of at most 50 ms: its run is due)."""
        params = {**params, "queues": self.queues}
        if not self._fresh:
            self.limited = [r["name"] for r in conn.execute(db.query("queue_limited_served"),
                                                            {"queues": self.queues})]  # fmt: skip
        self._fresh = False
        if not self.limited:
            return conn.execute(db.query("claim"), params).fetchall()
        params["limited"] = self.limited
        params["scan"] = params["limit"] * SCAN_FACTOR
        with conn.transaction():
            conn.execute(db.query("queue_lock"), params)
            conn.execute(db.query("queue_running_settled"), params)
            return conn.execute(db.query("claim_limited"), params).fetchall()

    def next_due(self, conn: db.Conn, pairs: dict[str, Any]) -> float | None:
        """Seconds until something this worker serves may be claimable (None: nothing known)."""
        params = {**pairs, "queues": self.queues, "limited": self.limited}
        name = "next_due_limited" if self.limited else "next_due"
        row = db.one(conn.execute(db.query(name), params))
        self.limited, self._fresh = list(row["limited"]), True
        seconds: float | None = row["seconds"]
        return seconds
