"""The database settings the runtime refuses to run without.

Every guarantee here rests on one rule: a commit the runtime saw acknowledged stays committed
(a recorded step, a DISPATCHED entry, a claim). `synchronous_commit = off` acknowledges before
the WAL is flushed, and `fsync = off` lets a crash lose flushed pages, so a worker or a client
that finds either refuses to start (docs/deployment.md#settings-the-runtime-relies-on). The
values are the session's own, so a role or a DSN option that turns them off is caught too.
"""

from __future__ import annotations

from . import db
from .errors import UnsafeDatabase


def check(conn: db.Conn) -> None:
    """Raise UnsafeDatabase when a setting of this session can lose an acknowledged commit:
    synchronous_commit off; local while a synchronous standby is configured (a failover would
    lose what only the primary had); fsync off."""
    row = conn.execute(db.query("durability_settings")).fetchone()
    assert row is not None
    bad = []
    sync, standby = row["synchronous_commit"], row["synchronous_standby_names"]
    if sync == "off" or (sync == "local" and standby):
        bad.append(f"synchronous_commit = {sync}")
    if row["fsync"] != "on":
        bad.append(f"fsync = {row['fsync']}")
    if bad:
        raise UnsafeDatabase(
            f"the database runs with {', '.join(bad)}: a commit it acknowledges can be lost in "
            "a crash or a failover, and with it a recorded step or a sent effect's record. Set "
            "synchronous_commit = on and fsync = on (postgresql.conf, or ALTER ROLE / ALTER "
            "DATABASE ... RESET), and remove them from the DSN's options "
            "(docs/deployment.md#settings-the-runtime-relies-on)"
        )
