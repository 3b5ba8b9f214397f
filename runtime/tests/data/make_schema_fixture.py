"""Write the rows of a database at one schema version, for the migration test.

    python runtime/tests/data/make_schema_fixture.py 1     # -> runtime/tests/data/schema_v1_rows.sql

Made once per released schema version, by the runtime of that release: a throwaway database
at that version, filled by the refund example (workflow, steps, claims with a takeover,
decision, approval grant, signal, effect and its journal), then `pg_dump --data-only` of the
ilr schema. The migration test loads it into a database made by that migration alone and
upgrades it to the newest.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from interlock_runtime import db, local_postgres, migrations, testing

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "refund_agent.py"


def main(version: int) -> int:
    if version != migrations.latest():
        print(f"this runtime writes schema version {migrations.latest()}, not {version}: "
              "check out the release that introduced it", file=sys.stderr)  # fmt: skip
        return 2
    admin = testing.admin_dsn()
    name = f"ilr_fixture_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'create database "{name}"')
    dsn = testing.with_dbname(admin, name)
    try:
        with db.connect(dsn) as conn:
            migrations.upgrade(conn)
        subprocess.run([sys.executable, str(EXAMPLE), "--dsn", dsn], check=True)
        pg_dump = Path(local_postgres.layout().bin_dir) / "pg_dump"
        out = subprocess.run(
            [str(pg_dump), "--data-only", "--schema=ilr", "--column-inserts", "--no-owner",
             "--no-privileges", "--exclude-table=ilr.schema_version", "--dbname", dsn],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        # keep the INSERTs and sequence positions only: no SET of this server's settings
        keep = [
            ln for ln in out.splitlines() if ln.startswith(("INSERT INTO", "SELECT pg_catalog"))
        ]
        path = HERE / f"schema_v{version}_rows.sql"
        path.write_text(
            f"-- Rows written by the runtime at schema version {version} "
            "(runtime/tests/data/make_schema_fixture.py).\n" + "\n".join(keep) + "\n"
        )
        print(f"wrote {path.name}: {sum(ln.startswith('INSERT') for ln in keep)} rows")
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'drop database if exists "{name}" with (force)')
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else migrations.latest()))
