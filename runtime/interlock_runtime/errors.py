"""Every exception the runtime raises, in one place. Messages say what to do next."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors


class InterlockError(Exception):
    """Base class for errors a caller of the runtime can handle."""


class InvalidInput(InterlockError, ValueError):
    """A workflow input, signal or payload was refused before anything was written."""


class NotRecordable(InvalidInput, TypeError):
    """A value cannot be recorded (codec.py): a set, a function, a socket, a class another
    process could not find. Raised at the call, before anything is written; it is a TypeError
    too, so code that treated unserialisable results as TypeError still does."""


class RecordedTypeError(InterlockError, TypeError):
    """A recorded typed value cannot be rebuilt: its class is gone, changed, not loaded in
    this process, or not one the codec may build (docs/typed.md). The message says which."""


class DatabaseUnreachable(InterlockError, psycopg.OperationalError):
    """Postgres could not be reached (down, wrong host or port, refused login). The message is
    one line naming the address and what to check. It is still a psycopg.OperationalError, so
    code that retries on those keeps doing so."""


class DatabaseMissing(DatabaseUnreachable):
    """Postgres answers at the DSN's address, but the database the DSN names does not exist.
    The message names the server and the database and says how to create it or which DSN to
    give. A DatabaseUnreachable, so code that handled the old answer still does."""


class ConnectionLost(DatabaseUnreachable):
    """The connection was lost while a call that is not safe to repeat was in flight (a
    restart, a terminated backend), so whether it took effect is not known; the message names
    the call and how to find out before repeating it (docs/errors.md#database-faults)."""


class PermissionDenied(InterlockError, psycopg.errors.InsufficientPrivilege):
    """The role the DSN logged in as may not do this call; the message names that role, the
    call, and the role that may (docs/operations.md). Nothing was written. Still a psycopg
    InsufficientPrivilege, so code that caught that keeps working."""


class DatabaseConflict(InterlockError, psycopg.errors.TransactionRollback):
    """Postgres rolled the call's transaction back (a serialization failure, a deadlock, a
    conflict with recovery on a standby) and the call is not one the runtime repeats by
    itself; nothing of that transaction was written: run the call again
    (docs/errors.md#database-faults). Still a psycopg TransactionRollback."""


ENVIRONMENT_ERRORS: tuple[type[InterlockError], ...] = (
    InvalidInput,
    DatabaseUnreachable,
    PermissionDenied,
    DatabaseConflict,
)
"""The errors a different argument, DSN, role or a second try fixes: the `interlock` command's
exit status 2 (docs/errors.md), where a refusal by the runtime is status 1."""


class UnknownWorkflow(InterlockError, LookupError):
    """No deployment serves this workflow name (or version)."""


class WorkflowNotFound(InterlockError, LookupError):
    """No workflow has this id."""


class WorkflowConflict(InterlockError):
    """A workflow with this id already exists with a different name, version or input."""


class WorkflowFinished(InterlockError):
    """A signal or cancel was sent to a workflow that has already ended; nothing was written."""


class WorkflowFailed(InterlockError):
    """rt.result() on a workflow that ended failed, cancelled or stuck."""

    def __init__(self, workflow_id: str, status: str, error: Any):
        self.workflow_id, self.status, self.error = workflow_id, status, error
        super().__init__(f"workflow {workflow_id!r} ended {status}: {error}")


class ScheduleNotFound(InterlockError, LookupError):
    """No schedule has this id."""


class ScheduleConflict(InterlockError):
    """A schedule with this id already exists with another definition."""


class SchemaMismatch(InterlockError):
    """The database's schema is not this runtime's (older, newer, or edited); the message says
    which command to run."""


class CodeChanged(InterlockError):
    """A worker offers different code for a (name, version) that is already deployed."""

    def __init__(self, name: str, version: str, recorded: str, offered: str):
        self.name, self.version, self.recorded, self.offered = name, version, recorded, offered
        super().__init__(
            f"workflow {name}@{version} is deployed with code sha256 {recorded}, but this worker "
            f"has {offered}. Deploy the change as a new version (@workflow(version=...)), guard it "
            "with ctx.patched(), or pass --allow-code-change if you know replay is unaffected."
        )


class StepFailed(InterlockError):
    """A step's body raised and will not be retried; the error is recorded."""

    def __init__(self, name: str, error: dict[str, Any]):
        self.name, self.error = name, error
        super().__init__(f"step {name!r} failed: {error.get('type')}: {error.get('message')}")


class StepTimedOut(StepFailed):
    """A step ran out of time (docs/timeouts.md): `timeout` says which limit fired,
    "start_to_close" (one attempt, retried while the policy allows) or "schedule_to_close" (all
    attempts from the first one's start). Recorded like any step failure, so a replay raises
    it again; `error` holds the record (limit, attempts, the last attempt's error as cause)."""

    def __init__(self, name: str, error: dict[str, Any]):
        self.timeout = str(error.get("timeout", ""))
        super().__init__(name, error)


class PostconditionFailed(InterlockError):
    """A step's post-condition did not hold (or raised): the attempt failed, closed."""


class TargetRejected(InterlockError):
    """A target refused an effect definitely (e.g. an HTTP 4xx): it did not happen."""

    def __init__(self, reason: str, response: Any = None):
        self.reason, self.response = reason, response
        super().__init__(reason)


# The exceptions below unwind workflow code. They derive from BaseException so that an
# `except Exception:` in a workflow cannot swallow them; the context also remembers them
# and raises them again at the next durable call if one is swallowed anyway.


class Fenced(BaseException):
    """This worker's claim is gone (epoch moved on or lease expired): abandon the run."""


class Suspend(BaseException):
    """The workflow cannot go on now (timer, signal, backoff); its row was released."""


class Release(BaseException):
    """The worker is stopping (SIGTERM): the current step finished, the run is handed back."""


class NonDeterminism(BaseException):
    """Replay found a different call at a recorded seq; nothing runs, the workflow is stuck."""

    def __init__(self, seq: int, recorded: dict[str, Any], called: dict[str, Any]):
        self.seq, self.recorded, self.called = seq, recorded, called
        super().__init__(f"non-determinism at seq {seq}: recorded {recorded}, called {called}")


class Cancelled(BaseException):
    """The workflow was cancelled; raised once, at the first durable call after the cancel."""


class WorkflowTimedOut(BaseException):
    """The workflow's execution deadline passed (docs/timeouts.md): the run ends `timed_out` at
    this durable call. Not catchable by `except Exception`, like Cancelled it cannot be
    ignored; unlike Cancelled there is no time left to compensate in."""


class DatabaseLost(BaseException):
    """The runtime lost its database in the middle of a run (a restart, a failover, a killed
    backend, a partition): the run is abandoned, not ended. Nothing more of it runs here; its
    lease expires and a later claim replays it from its committed history (docs/design.md#run-end).
    Remembered like the others, so workflow code that catches it cannot turn a database fault
    into the workflow's failure."""


DATABASE_FAULTS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg.errors.IdleInTransactionSessionTimeout,
)
"""The database failing rather than a statement being wrong: a lost or refused connection, a
terminated backend, a server shutting down, a serialization failure or deadlock (psycopg's
OperationalError and InterfaceError), a standby that refused a write before its promotion
(read-only transaction), a session ended for idling in a transaction (a paused worker)."""


def is_database_fault(exc: BaseException) -> bool:
    """Whether `exc` is one of DATABASE_FAULTS: retried by replaying the run, never the run's
    failure (docs/design.md#run-end)."""
    return isinstance(exc, DATABASE_FAULTS)


def one_line(exc: BaseException) -> str:
    """An error's text on one line (psycopg's span several), for events and records."""
    return " ".join(str(exc).split())


def database_lost(exc: BaseException) -> DatabaseLost:
    """The DatabaseLost that unwinds a run for the database fault `exc` (its cause)."""
    lost = DatabaseLost(f"the database was lost mid-run: {one_line(exc)}")
    lost.__cause__ = exc
    return lost


class ContinuedAsNew(BaseException):
    """This run ended as `continued`; its successor (the argument) is already started."""


class UnsafeDatabase(InterlockError):
    """The database runs with a setting that loses commits it acknowledged (synchronous_commit
    or fsync off); the message names the setting and how to change it
    (docs/deployment.md#settings-the-runtime-relies-on)."""
