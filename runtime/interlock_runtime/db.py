"""Postgres access: connections, named queries, the fence, the database clock, roles.

All connections are autocommit; a transaction is always an explicit `with conn.transaction()`
block, so nothing is ever left open by accident.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg.abc import Buffer
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import Jsonb

from .errors import DatabaseMissing, DatabaseUnreachable, Fenced, InvalidInput
from .stored import NEEDS_SERVER, stored_locally

SCHEMA_LOCK = 0x1C0C7A11  # advisory lock key: one schema change at a time (migrations.LOCK)
FOREVER = datetime.max.replace(tzinfo=timezone.utc)

Row = dict[str, Any]
"""A row as the runtime's connections return it (row_factory=dict_row): column name to value."""
Conn = psycopg.Connection[Row]
"""A connection made by `connect`: autocommit, rows as dicts."""


class _InfinityTimestamptzLoader(TimestamptzLoader):
    """available_at is 'infinity' while a workflow waits with no timeout; psycopg has no
    infinite datetime, so it loads as datetime.max (docs/design.md#refinements)."""

    def load(self, data: Buffer) -> datetime:
        if bytes(data) == b"infinity":
            return FOREVER
        return super().load(data)


psycopg.adapters.register_loader("timestamptz", _InfinityTimestamptzLoader)


def _sql_text(name: str) -> str:
    # one name per joinpath: Traversable.joinpath takes one argument on Python 3.10
    return resources.files(__package__).joinpath("sql").joinpath(name).read_text()


def _query_files() -> list[tuple[str, str]]:
    # the core queries, then one file per feature in sql/queries/ (schedules, queues, ...)
    files = [("queries.sql", _sql_text("queries.sql"))]
    folder = resources.files(__package__).joinpath("sql").joinpath("queries")
    if folder.is_dir():
        for item in sorted(folder.iterdir(), key=lambda t: t.name):
            if item.name.endswith(".sql"):
                files.append((f"queries/{item.name}", item.read_text()))
    return files


@cache
def _queries() -> dict[str, str]:
    found: dict[str, str] = {}
    where: dict[str, str] = {}
    for file, text in _query_files():
        parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.M)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise ValueError(
                    f"query {name!r} is named twice: in sql/{where[name]} and sql/{file}"
                )
            found[name], where[name] = body.strip(), file
    return found


def query(name: str) -> str:
    """The SQL of a named query in sql/queries.sql or sql/queries/*.sql."""
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries.sql or sql/queries/") from None


def connect(dsn: str, **kwargs: Any) -> Conn:
    """An autocommit connection returning rows as dicts."""
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=10, **kwargs)


def address(dsn: str) -> str:
    """Where a DSN points, for messages: host:port/dbname, never the password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "an unparsable DSN"
    host = info.get("host") or info.get("hostaddr") or "the local socket"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text[:300]


def _missing_database(exc: psycopg.Error) -> bool:
    """The server answered that the DSN's database does not exist (SQLSTATE 3D000; a failed
    connection carries no SQLSTATE, so its text is read too)."""
    return getattr(exc, "sqlstate", None) == "3D000" or bool(
        re.search(r'database ".*" does not exist', str(exc))
    )


def _dbname(dsn: str) -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "?"
    return str(info.get("dbname") or info.get("user") or "?")


def explain(dsn: str, exc: psycopg.Error) -> InvalidInput | DatabaseUnreachable:
    """The one-line error a person gets for a failed connection: a malformed DSN is
    InvalidInput; anything else (down, refused, unknown host, bad password) says where it
    tried and what to check; a database the server does not have is DatabaseMissing, saying
    how to create it."""
    if isinstance(exc, psycopg.ProgrammingError) or _one_line(exc).startswith("invalid "):
        return InvalidInput(f"the DSN is not valid ({_one_line(exc)}); give --dsn or ILR_DSN as "
                            "postgresql://USER@HOST:PORT/DBNAME or 'host=... port=... dbname=...'")  # fmt: skip
    if _missing_database(exc):
        server, name = address(dsn).rsplit("/", 1)[0], _dbname(dsn)
        host, _, port = server.rpartition(":")
        return DatabaseMissing(
            f"Postgres at {server} answers, but it has no database {name!r} ({_one_line(exc)}). "
            f"Create it (`createdb -h {host} -p {port} -U ADMIN {name}`, then `interlock db "
            "upgrade` makes the schema; `interlock pg start` makes the project's own cluster's "
            "`ilr`), or give a DSN (--dsn or ILR_DSN) that names an existing database"
        )
    return DatabaseUnreachable(
        f"cannot reach Postgres at {address(dsn)}: {_one_line(exc)}. Check that the server "
        "runs (`interlock pg start` for the project's own cluster) and that the DSN (--dsn or "
        "ILR_DSN) names the right host, port, database and user"
    )


def check_dsn(dsn: Any) -> str:
    """The DSN if it parses and its port(s) are numbers in 1-65535; else InvalidInput saying
    how to write one. Connects to nothing."""
    if not isinstance(dsn, str) or not dsn.strip() or "\x00" in dsn:
        raise InvalidInput("the DSN must be a non-empty string without NUL characters; give "
                           "--dsn or ILR_DSN as postgresql://USER@HOST:PORT/DBNAME")  # fmt: skip
    try:
        dsn.encode()
    except UnicodeEncodeError:
        raise InvalidInput("the DSN is not valid UTF-8 (undecodable bytes); give --dsn or ILR_DSN "
                           "as postgresql://USER@HOST:PORT/DBNAME") from None  # fmt: skip
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise explain(dsn, exc) from None
    for port in str(info.get("port") or "5432").split(","):  # one per host of a multi-host DSN
        if port.strip() == "":  # an empty entry is libpq's default port
            continue
        if not port.strip().isdigit() or not 1 <= int(port) <= 65535:
            raise InvalidInput(f"the DSN is not valid (port {port!r} is not a number in "
                               "1-65535); give --dsn or ILR_DSN as "
                               "postgresql://USER@HOST:PORT/DBNAME")  # fmt: skip
    return dsn


def connect_explained(dsn: str, **kwargs: Any) -> Conn:
    """connect(), with a failure turned into `explain`'s one-line error (for people: the CLI
    and the client API; the worker keeps psycopg's errors and retries on them)."""
    check_dsn(dsn)
    try:
        return connect(dsn, **kwargs)
    except psycopg.Error as exc:
        raise explain(dsn, exc) from None


def one(cursor: psycopg.Cursor[Row]) -> Row:
    """The row of a statement that always returns one (a count, `returning` of an upsert, a row
    the caller has locked); a clear error, not a TypeError on None, if it returned none."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row where one was expected")
    return row


@contextmanager
def fenced(conn: Conn, wf: str, epoch: int, ttl: float) -> Iterator[Row]:
    """One fenced worker write (docs/design.md#fence): the fence UPDATE first, then the caller's statements.

    Zero rows means the claim is gone: the transaction rolls back and Fenced is raised.
    Yields the fence row: cancel_requested_at, now, lease_expires_at.
    """
    with conn.transaction():
        row = conn.execute(query("fence"), {"wf": wf, "epoch": epoch, "ttl": ttl}).fetchone()
        if row is None:
            raise fence_lost(wf, epoch)
        yield row


def fence_lost(wf: str, epoch: int) -> Fenced:
    return Fenced(f"workflow {wf}: epoch {epoch} no longer holds a live claim")


def record_step_fenced(conn: Conn, step: dict[str, Any], ttl: float) -> Row:
    """fenced() around one insert_step, as one statement (query record_step_fenced): `step` is
    insert_step's parameters. Returns the fence row with the output as stored; raises Fenced
    (nothing written) when the claim is gone."""
    row = conn.execute(query("record_step_fenced"), {**step, "ttl": ttl}).fetchone()
    if row is None:
        raise fence_lost(step["wf"], step["epoch"])
    return row


def as_stored(conn: Conn, value: Any) -> Any:
    """The value as a jsonb column will give it back: jsonb reorders object keys (shortest
    first) and prints numbers without exponents (1e16 comes back as an int). Without a float
    (or anything else whose text jsonb may change) that is computed locally
    (stored.stored_locally); the rest make one round trip, no transaction.
    """
    local = stored_locally(value)
    if local is not NEEDS_SERVER:
        return local
    return one(conn.execute(query("as_stored"), {"value": Jsonb(value)}))["value"]


def db_now(conn: Conn) -> datetime:
    now: datetime = one(conn.execute(query("db_now")))["now"]
    return now


def jsonb(value: Any) -> Jsonb:
    """Wrap a value for a jsonb parameter (None becomes JSON null, not SQL NULL)."""
    return Jsonb(value)


ROLES = ("worker", "operator", "auditor")


def apply_roles(conn: Conn, logins: dict[str, str] | None = None) -> None:
    """Create the ilr_worker/ilr_operator/ilr_auditor roles and their grants (sql/roles.sql),
    and optionally login users, each a member of one role: {"alice": "operator"}."""
    from psycopg import sql

    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute(_sql_text("roles.sql"))
        for user, role in (logins or {}).items():
            if role not in ROLES:
                raise ValueError(f"role {role!r}: choose one of {', '.join(ROLES)}")
            exists = conn.execute("select 1 from pg_roles where rolname = %s", (user,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("create role {} login").format(sql.Identifier(user)))
            conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(f"ilr_{role}"),
                                                          sql.Identifier(user)))  # fmt: skip
