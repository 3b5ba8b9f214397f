"""Versioned schema migrations: numbered SQL files, applied in order, recorded in the database.

The files are ``sql/migrations/NNNN_name.sql``, numbered from 0001 without gaps. A database
records each file it has applied in ``ilr.schema_version`` (version, name, sha256, applied_at).

- An empty database gets every migration when a Runtime or a worker first connects to it.
- A database behind the runtime's files is refused (SchemaMismatch) until an operator runs
  ``interlock db upgrade``: schema changes happen when someone decides, not as a side effect of
  a worker starting.
- A database ahead of the runtime (made by a newer release), or one whose recorded history
  differs from the files (a released migration was edited), is refused too.

``upgrade`` applies every pending file in one transaction under an advisory lock: concurrent
upgrades wait for each other, and a failing file leaves the database as it was.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from .db import Conn, Row, one
from .errors import SchemaMismatch

LOCK = 0x1C0C7A11  # advisory lock key: one schema change at a time (the same as db.SCHEMA_LOCK)
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# The sha256 of the schema file that databases made before migrations existed recorded in
# ilr.schema_meta. Such a database holds exactly migration 0001 and is adopted as version 1.
PRE_MIGRATION_SHA = "4115927c5d6a7b120998267523f438d6e009fe18a38710b3adce6aa8575fe5b4"

_VERSION_TABLE = """
create table if not exists ilr.schema_version (
  version int primary key,
  name text not null,
  sha256 text not null,
  applied_at timestamptz not null default now()
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def load(folder: Any) -> tuple[Migration, ...]:
    """The migrations in `folder` (a path or importlib Traversable), in order; they must be
    numbered 1..N without gaps."""
    found = []
    for entry in folder.iterdir():
        m = _FILE.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    numbers = [mig.version for mig in found]
    if not found or numbers != list(range(1, len(found) + 1)):
        raise RuntimeError(
            f"{folder}: migrations must be numbered 1..N without gaps, found {numbers}"
        )
    return tuple(found)


@cache
def available() -> tuple[Migration, ...]:
    """This runtime's migrations (sql/migrations), in order."""
    return load(resources.files(__package__).joinpath("sql").joinpath("migrations"))


def latest() -> int:
    return available()[-1].version


def applied(conn: Conn) -> list[Row] | None:
    """The recorded history (version, name, sha256, applied_at), oldest first; None when the
    database has no Interlock schema at all; [] for a database made before migrations."""
    have = one(
        conn.execute(
            "select to_regclass('ilr.schema_version') as v, to_regclass('ilr.workflows') as w"
        )
    )
    if have["v"] is None:
        return None if have["w"] is None else []
    return conn.execute(
        "select version, name, sha256, applied_at from ilr.schema_version order by version"
    ).fetchall()


def _adopt_pre_migration(conn: Conn, mine: tuple[Migration, ...]) -> bool:
    """Record a database made by the last release before migrations as version 1. Call under
    the lock. False if its schema is some older one (it needs `interlock db upgrade`)."""
    if one(conn.execute("select to_regclass('ilr.schema_meta') as t"))["t"] is None:
        return False
    row = conn.execute("select sha256 from ilr.schema_meta where id = 1").fetchone()
    if not row or row["sha256"] != PRE_MIGRATION_SHA:
        return False
    first = mine[0]
    conn.execute(_VERSION_TABLE)
    conn.execute(
        "insert into ilr.schema_version (version, name, sha256) values (%s, %s, %s)",
        (first.version, first.name, first.sha256),
    )
    return True


def _check_history(history: list[Row], migrations: tuple[Migration, ...]) -> None:
    mine = {m.version: m for m in migrations}
    for row in history:
        m = mine.get(row["version"])
        if m is None:
            raise SchemaMismatch(
                f"the database is at schema version {history[-1]['version']}, newer than this "
                f"runtime's {migrations[-1].version}: it was upgraded by a newer release. Run that release "
                "(or newer) against it; an older runtime must not write to it."
            )
        if row["sha256"] != m.sha256:
            raise SchemaMismatch(
                f"migration {m.label} applied to this database differs from this runtime's file "
                f"(sha256 {row['sha256'][:12]} there, {m.sha256[:12]} here). A released "
                "migration must never be edited: restore the file and put the change in a new one."
            )


def ensure(conn: Conn, create: bool = True, mine: tuple[Migration, ...] | None = None) -> None:
    """Make sure the database's schema is exactly this runtime's; raise SchemaMismatch saying
    what to run if not. An empty database gets every migration when `create` is true. `mine`
    replaces the runtime's own migrations (tests)."""
    mine = mine or available()
    history = applied(conn)
    if history is None:
        if not create:
            raise SchemaMismatch(
                "the database has no Interlock schema: run `interlock db upgrade --dsn ...` "
                "(or start a Runtime, which creates it in an empty database)"
            )
        upgrade(conn, mine)
        return
    if history == []:
        with conn.transaction():
            conn.execute("select pg_advisory_xact_lock(%s)", (LOCK,))
            if applied(conn) == [] and not _adopt_pre_migration(conn, mine):
                raise SchemaMismatch(
                    "the database was made by a release before schema migrations and is not at "
                    "its last schema: run `interlock db upgrade --dsn ...` to bring it up to "
                    f"version {mine[-1].version} (it keeps every row)"
                )
        history = applied(conn) or []
    _check_history(history, mine)
    have = history[-1]["version"] if history else 0
    if have < mine[-1].version:
        pending = ", ".join(m.label for m in mine[have:])
        raise SchemaMismatch(
            f"the database is at schema version {have}, this runtime needs {mine[-1].version} "
            f"(pending: {pending}): run `interlock db upgrade --dsn ...`, then start again"
        )


def upgrade(conn: Conn, mine: tuple[Migration, ...] | None = None) -> list[Migration]:
    """Apply every pending migration in one transaction; return those applied (none: already
    current). Safe to run concurrently and again. `mine` as in ensure."""
    mine = mine or available()
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (LOCK,))
        history = applied(conn)
        if history == []:
            _adopt_pre_migration(conn, mine)
            history = applied(conn)
        if history:
            _check_history(history, mine)
        have = history[-1]["version"] if history else 0
        # A database made before migrations but not by their last schema starts at 0: every
        # statement of 0001 is idempotent, so applying it brings it to version 1, rows kept.
        pending = list(mine[have:])
        for m in pending:
            if m.version == 1:
                conn.execute("create schema if not exists ilr")
            conn.execute(m.sql)
            conn.execute(_VERSION_TABLE)
            conn.execute(
                "insert into ilr.schema_version (version, name, sha256) values (%s, %s, %s)",
                (m.version, m.name, m.sha256),
            )
    return pending
