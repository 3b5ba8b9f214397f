"""The answer to a database fault at a public entry (docs/errors.md#database-faults): a verb of
`interlock`, a method of the sync client (Runtime) or of the asyncio client (AsyncRuntime).

Five faults, one answer each:

- a role without the privilege: PermissionDenied naming the login, the call, and the role
  that may make it (sql/roles.sql); nothing was written;
- a database the DSN names that does not exist: DatabaseMissing (db.explain);
- a server restarted, or a backend terminated, under a long-lived client: a connection found
  dead while idle is made again before anything is sent (`dead_while_idle`), so every call
  rides through; one lost with a statement in flight is made again and the call repeated once
  when it is safe to repeat (SAFE_TO_REPEAT), else ConnectionLost (its outcome is unknown);
  still down: DatabaseUnreachable;
- a transaction Postgres rolled back (serialization failure, deadlock): repeated up to
  CONFLICT_TRIES times when safe to repeat, else DatabaseConflict (nothing written).
"""

from __future__ import annotations

import getpass
import os
import select
from contextvars import ContextVar
from typing import Any

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from . import db
from .errors import (
    ConnectionLost,
    DatabaseConflict,
    DatabaseMissing,
    DatabaseUnreachable,
    InvalidInput,
    PermissionDenied,
    one_line,
)

SAFE_TO_REPEAT = frozenset({
    # reads
    "ambiguous", "breakers", "claim_history", "deployments", "describe", "describe_queue",
    "describe_schedule", "drain_report", "effects", "list", "query", "queues", "receipt",
    "result_now", "schedules", "status_record",
    # writes whose second run answers as the first did (idempotent on their arguments)
    "start", "register", "migrate", "reset_breaker", "queue", "create_schedule",
    "pause_schedule", "resume_schedule",
})  # fmt: skip
"""Client methods repeated after a lost connection or a rolled-back transaction. The others
(signal, approve, grant, revoke, reconcile, fork, cancel, delete_schedule, trigger_schedule,
recover_orphans) would write twice or answer differently the second time (a cancel that
committed ends a run no worker served, so its repeat would say it had already ended);
result() rides through faults itself (docs/api.md#results)."""

CALLER: ContextVar[str | None] = ContextVar("interlock_caller", default=None)
"""The entry a person used, when it is not the client method that met the fault: the CLI sets
it to `interlock VERB`, so a refusal names the verb that needs another role."""

RECONNECT_SECONDS = 10.0
"""How long a client waits for its server to come back after it lost its connection (a
restart or a failover takes seconds), before DatabaseUnreachable."""

STAYS_DOWN = (DatabaseMissing, InvalidInput)
"""Connection failures that waiting does not cure: no such database, a malformed DSN."""

CONFLICT_TRIES = 3
"""Runs of a safe call whose transaction Postgres rolled back, before DatabaseConflict."""

_ANY = "any of ilr_auditor, ilr_operator, ilr_worker"
_OPERATOR = "ilr_operator"
_OWNER = "the schema's owner (an admin DSN)"
NEEDS: dict[str, str] = {
    **{m: _ANY for m in SAFE_TO_REPEAT - {"start", "register", "migrate",
                                          "reset_breaker", "queue", "create_schedule",
                                          "pause_schedule", "resume_schedule"}},
    "result": _ANY,
    **{m: _OPERATOR for m in ("start", "signal", "cancel", "migrate", "fork", "grant", "approve",
                              "revoke", "reconcile", "reset_breaker", "queue", "create_schedule",
                              "pause_schedule", "resume_schedule", "delete_schedule",
                              "trigger_schedule")},
    "register": "ilr_worker or ilr_operator",
    "recover_orphans": "ilr_worker",
    "Runtime": _ANY + " on a database that has the schema (else " + _OWNER + ")",
    # verbs of `interlock` that are no client method of the same name
    "interlock list": _ANY, "interlock describe": _ANY, "interlock query": _ANY,
    "interlock result": _ANY, "interlock drain-report": _ANY, "interlock receipt": _ANY,
    "interlock ambiguous": _ANY, "interlock watchdog": _ANY,
    "interlock breaker": "ilr_operator (reset; list: " + _ANY + ")",
    "interlock db": _OWNER + " (upgrade; status: " + _ANY + ")",
    "interlock migrate": "ilr_operator (a workflow; --schema: " + _OWNER + ")",
    "interlock roles": _OWNER,
    "interlock operator": _OWNER + " (add, disable; list: ilr_auditor or ilr_operator)",
    "interlock queue": "ilr_operator (set; list, describe: " + _ANY + ")",
    "interlock schedule": "ilr_operator (list, describe: " + _ANY + ")",
    "interlock console": _OPERATOR, "interlock worker": "ilr_worker",
    **{f"interlock {v}": _OPERATOR for v in ("start", "signal", "cancel", "fork", "reconcile",
                                             "revoke", "approve")},
}  # fmt: skip
"""Who may make each call: the roles of sql/roles.sql, or the schema's owner."""


def is_denied(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.InsufficientPrivilege)


def is_rolled_back(exc: BaseException) -> bool:
    """Postgres rolled the transaction back and the connection is fine: SQLSTATE class 40
    (40001 serialization failure, 40P01 deadlock; psycopg's classes for them do not all
    derive from TransactionRollback, so the SQLSTATE decides)."""
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, psycopg.Error) and state.startswith("40")


def is_lost(exc: BaseException, conn: psycopg.Connection[Any] | None) -> bool:
    """The connection went away under a statement (a restart, a terminated backend, a
    network cut): psycopg marks it broken, or the server said it is shutting down (57P)."""
    if not isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    if is_rolled_back(exc):
        return False
    state = getattr(exc, "sqlstate", None) or ""
    if conn is None:  # a failed connect carries no SQLSTATE; a session ended by the server does
        return state in ("57P01", "57P02")
    return conn.closed or conn.broken or state in ("57P01", "57P02") or state.startswith("08")


def dead_while_idle(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection was closed by the server since its last statement (a
    restart, pg_terminate_backend): a server says nothing to an idle client unless it is
    ending the session, so a readable socket is checked with one round trip; nothing was
    sent for the caller's statement yet, so making the connection again is safe for any
    call. The usual case, nothing to read, costs no round trip."""
    if conn.closed or conn.broken:
        return True
    if conn.info.transaction_status != TransactionStatus.IDLE:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    try:
        conn.execute("select 1")  # a NOTICE or NOTIFY while idle is harmless: this answers
    except psycopg.Error:
        return True
    return False


def login(dsn: str, conn: psycopg.Connection[Any] | None = None) -> str:
    """The user a DSN logs in as: the connection's, else the DSN's, libpq's PGUSER, or the
    operating system's user (libpq's default)."""
    if conn is not None and not conn.closed:
        return str(conn.info.user)
    try:
        user = psycopg.conninfo.conninfo_to_dict(dsn).get("user")
    except psycopg.Error:
        user = None
    return str(user or os.environ.get("PGUSER") or getpass.getuser())


def member_of(conn: psycopg.Connection[Any] | None) -> list[str]:
    """The ilr_* roles the connection's user is a member of (best effort: [] if unknown)."""
    if conn is None or conn.closed or conn.broken:
        return []
    try:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return []
        return [str(r[0]) for r in conn.cursor(row_factory=psycopg.rows.tuple_row).execute(
            db.query("login_roles"))]  # fmt: skip
    except psycopg.Error:
        return []


def denied(exc: BaseException, entry: str, user: str, roles: list[str]) -> PermissionDenied:
    """The one-line PermissionDenied for `entry` (a method name, or `interlock VERB`)."""
    who = f"{user!r}" + (f" (a member of {', '.join(roles)})" if roles else "")
    needs = NEEDS.get(entry) or _OPERATOR
    call = shown(entry)
    how = (
        "give an admin DSN"
        if needs == _OWNER
        else "give a DSN whose user has that role (an admin makes one with `interlock roles "
        "--login USER=operator|worker|auditor`, docs/operations.md)"
    )
    return PermissionDenied(
        f"permission denied: the DSN logs in as {who}, and {call} needs {needs}; {how}; nothing "
        f"was written (Postgres: {one_line(exc)[:160]})"
    )


def shown(entry: str) -> str:
    """An entry as a person calls it: `interlock VERB`, `Runtime(dsn)`, `rt.METHOD`."""
    if entry.startswith("interlock "):
        return entry
    return "Runtime(dsn)" if entry == "Runtime" else f"rt.{entry}"


def _prefix(entry: str) -> str:
    """What a message starts with: the method, or nothing for a verb (the CLI prints it)."""
    return "" if entry.startswith("interlock ") else f"{shown(entry)}: "


def conflict(exc: BaseException, entry: str) -> DatabaseConflict:
    return DatabaseConflict(
        f"{_prefix(entry)}Postgres rolled the transaction back ({one_line(exc)[:160]}); nothing of "
        "it was written: run the call again"
    )


def lost(exc: BaseException, entry: str, dsn: str) -> ConnectionLost:
    return ConnectionLost(
        f"{_prefix(entry)}the connection to Postgres at {db.address(dsn)} was lost while the call was "
        f"in flight ({one_line(exc)[:160]}), so whether it took effect is not known; look "
        "(rt.describe, `interlock describe`) before you repeat it"
    )


def answer(
    exc: psycopg.Error, entry: str, dsn: str, conn: psycopg.Connection[Any] | None = None
) -> Exception:
    """The documented error for a database fault `exc` raised by `entry` (a client method's
    name, or `interlock VERB`), when no retry is to be made; other errors come back as they
    are. `conn` is the connection it failed on (for the login and its roles)."""
    if isinstance(exc, DatabaseUnreachable | PermissionDenied | DatabaseConflict):
        return exc
    entry = CALLER.get() or entry
    if is_denied(exc):
        return denied(exc, entry, login(dsn, conn), member_of(conn))
    if is_rolled_back(exc):
        return conflict(exc, entry)
    if is_lost(exc, conn):
        return lost(exc, entry, dsn)
    if isinstance(exc, psycopg.OperationalError):
        return db.explain(dsn, exc)
    return exc
