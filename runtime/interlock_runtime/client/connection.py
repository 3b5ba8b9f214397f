"""The connection every part of the client shares (docs/api.md#client), and the checks of
their arguments that more than one part makes.

ClientConnection opens the database, checks its schema, and hands the parts one connection
under one lock: `_execute` for a statement, `_transaction` for several. Runtime (runtime.py)
is composed of parts that all derive from it, so a Runtime holds exactly one of each.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import psycopg

from .. import db, durability, end_notices, local_postgres, migrations, stored, validate
from ..vocabulary import TERMINAL_STATUSES

MAX_INPUT_BYTES = stored.MAX_JSON_BYTES
MAX_LIST_LIMIT = 100_000
"""rt.list(limit=...) and `interlock list --limit`: 1 to this many rows."""
MAX_SEQ = 2**31 - 1
TERMINAL = TERMINAL_STATUSES

_Self = TypeVar("_Self", bound="ClientConnection")


def check_id(value: Any, what: str = "workflow id") -> str:
    """`value` as an id (validate.identifier), or InvalidInput naming `what`."""
    return validate.identifier(value, what)


def input_text(value: Any, what: str = "workflow input") -> str:
    """Canonical JSON text of a value, or InvalidInput (stored.json_text: JSON types, finite
    numbers, no NUL or lone surrogate, at most 64 levels deep and 1 MiB)."""
    return stored.json_text(value, what, max_bytes=MAX_INPUT_BYTES)


class ClientConnection:
    """One client's connection to one Interlock database, shared by the client's parts.
    Thread-safe: every statement runs under one lock."""

    def __init__(self, dsn: str | None = None, *, create_schema: bool = True) -> None:
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
