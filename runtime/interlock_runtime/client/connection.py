"""The connection every part of the client shares (docs/api.md#client), and the checks of
their arguments that more than one part makes.

ClientConnection opens the database, checks its schema, and hands the parts one connection
under one lock: `_execute` for a statement, `_transaction` for several. Runtime (runtime.py)
is composed of parts that all derive from it, so a Runtime holds exactly one of each.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import psycopg

from .. import db, db_faults, durability, end_notices, local_postgres, migrations, stored, validate
from ..errors import DatabaseUnreachable
from ..vocabulary import TERMINAL_STATUSES

MAX_INPUT_BYTES = stored.MAX_JSON_BYTES
MAX_LIST_LIMIT = 100_000
"""rt.list(limit=...) and `interlock list --limit`: 1 to this many rows."""
MAX_SEQ = 2**31 - 1
TERMINAL = TERMINAL_STATUSES

_Self = TypeVar("_Self", bound="ClientConnection")
_T = TypeVar("_T")


def check_id(value: Any, what: str = "workflow id") -> str:
    """`value` as an id (validate.identifier), or InvalidInput naming `what`."""
    return validate.identifier(value, what)


def input_text(value: Any, what: str = "workflow input") -> str:
    """Canonical JSON text of a value, or InvalidInput (stored.json_text: JSON types, finite
    numbers, no NUL or lone surrogate, at most 64 levels deep and 1 MiB)."""
    return stored.json_text(value, what, max_bytes=MAX_INPUT_BYTES)


_Method = TypeVar("_Method", bound=Callable[..., Any])
_calling = threading.local()  # the outermost client call of this thread answers its faults


def answered(entry: str, method: _Method) -> _Method:
    """`method` under the database-fault contract (db_faults.py, docs/errors.md#database-faults):
    a call safe to repeat is repeated once after a lost connection and up to
    db_faults.CONFLICT_TRIES times after a rolled-back transaction; any other database fault
    becomes its documented error. A call made inside another (start registers) leaves the
    answer to the outer one."""

    @functools.wraps(method)
    def call(self: ClientConnection, *args: Any, **kwargs: Any) -> Any:
        if getattr(_calling, "entry", None) is not None:
            return method(self, *args, **kwargs)
        _calling.entry = entry
        try:
            return self._answering(entry, lambda: method(self, *args, **kwargs))
        finally:
            _calling.entry = None

    # Not a layer of its own for introspection: the signature is the method's, and __wrapped__
    # is only an instrumentation's (telemetry.traced), which tests look for.
    del call.__wrapped__
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    if hasattr(method, "__wrapped__"):
        call.__wrapped__ = method.__wrapped__
    return call  # type: ignore[return-value]


class ClientConnection:
    """One client's connection to one Interlock database, shared by the client's parts.
    Thread-safe: every statement runs under one lock. Each public method of every part is
    `answered` (__init_subclass__): a database fault gets its documented answer."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value):
                setattr(cls, name, answered(name, value))

    def __init__(self, dsn: str | None = None, *, create_schema: bool = True) -> None:
        """Connect to the database at `dsn` (default: the project's own cluster). Its schema
        must be this runtime's (SchemaMismatch says to run `interlock db upgrade` if not); an
        empty database gets the schema unless create_schema is false."""
        self.dsn = dsn or local_postgres.dsn()
        self._lock = threading.Lock()
        self._can_mark = True  # false once the role may not mark a run awaited (read only)
        self._down = False  # the last reconnect failed: the next one does not wait
        for attempt in (1, 2):  # a connection lost under the checks is made again once
            self._conn = db.connect_explained(self.dsn)
            try:
                migrations.ensure(self._conn, create=create_schema)
                durability.check(self._conn)
                break
            except psycopg.Error as exc:
                again = attempt == 1 and db_faults.is_lost(exc, self._conn)
                fault = None if again else db_faults.answer(exc, "Runtime", self.dsn, self._conn)
                self._conn.close()
                if fault is None:
                    continue
                if fault is exc:
                    raise
                raise fault from None
            except BaseException:
                self._conn.close()
                raise
        self._notices = end_notices.EndNotices(self.dsn)  # listens from the first result() wait

    def _answering(self, entry: str, run: Callable[[], _T]) -> _T:
        """Run one public call under the database-fault contract (see `answered`)."""
        safe = entry in db_faults.SAFE_TO_REPEAT
        lost_once, conflicts = False, 0
        while True:
            try:
                return run()
            except psycopg.Error as exc:
                lost = db_faults.is_lost(exc, self._conn)
                if safe and not lost_once and lost and not isinstance(exc, DatabaseUnreachable):
                    lost_once = True  # made again at the next statement (_live)
                    continue
                if (
                    safe
                    and db_faults.is_rolled_back(exc)
                    and conflicts + 1 < db_faults.CONFLICT_TRIES
                ):
                    conflicts += 1
                    time.sleep(0.01 * 2**conflicts)  # let the other transaction finish
                    continue
                with self._lock:  # answer may read the login's roles on the connection
                    fault = db_faults.answer(exc, entry, self.dsn, self._conn)
                if fault is exc:
                    raise
                raise fault from None

    def close(self) -> None:
        """Close the connection and stop listening for ends of runs."""
        self._notices.close()
        self._conn.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> psycopg.Connection[db.Row]:
        """The connection, made again when it broke (a server restart, a failover: with a
        multi-host DSN the new one reaches the new primary). Call with self._lock held."""
        if db_faults.dead_while_idle(self._conn):  # nothing sent yet: safe for any call
            self._conn.close()
            self._reconnect()
        return self._conn

    def _reconnect(self) -> None:
        """Connect again. The first time after a connection was lost it waits up to
        db_faults.RECONNECT_SECONDS for a server that is restarting or failing over; while
        the server stays down, each call tries once (DatabaseUnreachable, fast)."""
        deadline = time.monotonic() + (0 if self._down else db_faults.RECONNECT_SECONDS)
        while True:
            try:
                self._conn = db.connect_explained(self.dsn)
                self._down = False
                return
            except db_faults.STAYS_DOWN:
                raise
            except DatabaseUnreachable:
                if time.monotonic() >= deadline:
                    self._down = True
                    raise
                time.sleep(0.2)

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
            except DatabaseUnreachable:  # _live tried (and waited) already
                raise
            except psycopg.OperationalError:
                self._conn.close()
                conn = self._live()
                stack.enter_context(conn.transaction())
            yield conn
