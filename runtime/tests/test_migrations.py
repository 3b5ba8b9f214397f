"""Versioned schema migrations: create, refuse, upgrade, keep every row, never half-apply."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from interlock_runtime import Runtime, SchemaMismatch, db, migrations, receipts, testing

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    name = f"ilr_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        c.execute(f'create database "{name}"')
    try:
        yield testing.with_dbname(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as c:
            c.execute(f'drop database if exists "{name}" with (force)')


def history(dsn: str) -> list[int]:
    with db.connect(dsn) as c:
        return [r["version"] for r in migrations.applied(c) or []]


def snapshot(conn: psycopg.Connection) -> dict[str, list]:
    """Every row of every ilr table, as JSON text, sorted (the version table aside)."""
    tables = [r["relname"] for r in conn.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'ilr' and c.relkind = 'r' and c.relname <> 'schema_version'")]  # fmt: skip
    return {t: sorted(r["j"] for r in conn.execute(f"select to_jsonb(t)::text as j from ilr.{t} t"))
            for t in tables}  # fmt: skip


# Columns a migration replaced, each with the column that now carries its value and how.
REPLACED = {
    ("grants", "max_cents"): (  # 0002: a cap on "amount" became a declared constraint
        "constraints",
        lambda cap: None if cap is None else {"amount": {"max": cap}},
    ),
}


def same_rows(before: dict[str, list], after: dict[str, list]) -> dict[str, list]:
    """Per table, the rows of `before` as they must read after upgrading: every column that
    still exists with its old value, every replaced column as its replacement's value. The
    result must equal `after` restricted to those columns."""
    out = {}
    for table, rows in before.items():
        old_cols = set(json.loads(rows[0])) if rows else set()
        new_cols = set(json.loads(after[table][0])) if after.get(table) else set()
        expect, got = [], []
        for r in rows:
            row = json.loads(r)
            mapped = {k: v for k, v in row.items() if k in new_cols}
            for (t, col), (to, fn) in REPLACED.items():
                if t == table and col in row and col not in new_cols:
                    mapped[to] = fn(row[col])
            expect.append(json.dumps(mapped, sort_keys=True))
        keep = (old_cols & new_cols) | {to for (t, c), (to, _) in REPLACED.items()
                                         if t == table and c in old_cols and c not in new_cols}  # fmt: skip
        for r in after.get(table, []):
            row = json.loads(r)
            got.append(json.dumps({k: v for k, v in row.items() if k in keep}, sort_keys=True))
        out[table] = (sorted(expect), sorted(got))
    return out


def test_an_empty_database_gets_every_migration(empty_dsn: str) -> None:
    with Runtime(empty_dsn) as rt:
        assert rt.list() == []
    assert history(empty_dsn) == [m.version for m in migrations.available()]
    with db.connect(empty_dsn) as c:
        shas = [r["sha256"] for r in migrations.applied(c) or []]
    assert shas == [m.sha256 for m in migrations.available()]


def test_a_first_version_database_upgrades_from_the_cli_and_keeps_every_row(
    empty_dsn: str,
) -> None:
    first = migrations.available()[:1]
    with db.connect(empty_dsn) as c:
        migrations.upgrade(c, first)
        c.execute((DATA / "schema_v1_rows.sql").read_text())
        # and a standing policy grant with a cap, as version 1 stored one
        c.execute("insert into ilr.grants (id, principal, action, max_cents, granted_by) "
                  "values ('grant-policy-v1', 'support-bot', 'refund', 5000, 'ops')")  # fmt: skip
        before = snapshot(c)
    assert sum(len(rows) for rows in before.values()) >= 15  # the fixture is not empty
    if migrations.latest() > 1:
        with pytest.raises(SchemaMismatch, match="interlock db upgrade"):
            Runtime(empty_dsn)
    cli = [sys.executable, "-m", "interlock_runtime.cli", "db"]
    up = subprocess.run([*cli, "upgrade", "--dsn", empty_dsn], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    again = subprocess.run([*cli, "upgrade", "--dsn", empty_dsn], capture_output=True, text=True)
    assert "nothing to do" in again.stdout
    assert history(empty_dsn) == list(range(1, migrations.latest() + 1))
    with db.connect(empty_dsn) as c:
        after = snapshot(c)
    for table, (expect, got) in same_rows(before, after).items():
        assert got == expect, f"ilr.{table} changed"  # every row, every old value
    policy = [json.loads(r) for r in after["grants"] if "grant-policy-v1" in r]
    assert policy[0]["constraints"] == {"amount": {"max": 5000}}
    # and the runtime reads what the old one wrote: the workflow, its receipt
    with Runtime(empty_dsn) as rt:
        (wf,) = rt.list()
        assert rt.describe(wf["id"])["status"] == "completed"
        effect_id = rt.result(wf["id"], timeout=5)["effect_id"]
        assert receipts.verify(rt.receipt(effect_id))["happened_once"] is True


def _folder(tmp_path: Path, extra: dict[str, str]) -> tuple[migrations.Migration, ...]:
    """The runtime's migrations plus `extra` files, as a folder of their own."""
    folder = tmp_path / "migrations"
    folder.mkdir(parents=True)
    for m in migrations.available():
        (folder / f"{m.label}.sql").write_text(m.sql)
    for name, sql in extra.items():
        (folder / name).write_text(sql)
    return migrations.load(folder)


def test_a_pending_migration_is_refused_until_upgraded_then_applied_whole(
    empty_dsn: str, tmp_path: Path
) -> None:
    n = migrations.latest()
    with Runtime(empty_dsn) as rt:
        rt.grant("bot", "send_email", by="ops")
    nxt = f"{n + 1:04d}_note"
    mine = _folder(tmp_path, {f"{nxt}.sql": "alter table ilr.grants add column note text;\n"
                              "update ilr.grants set note = 'from ' || principal;"})  # fmt: skip
    with db.connect(empty_dsn) as c:
        with pytest.raises(SchemaMismatch, match=rf"version {n}, this runtime needs {n + 1}"):
            migrations.ensure(c, mine=mine)
        assert [m.label for m in migrations.upgrade(c, mine)] == [nxt]
        assert c.execute("select note from ilr.grants").fetchone()["note"] == "from bot"
        migrations.ensure(c, mine=mine)  # current now
    # a failing migration leaves nothing behind, not even the good one before it
    broken = _folder(tmp_path / "b", {f"{nxt}.sql": "alter table ilr.grants add column note text;",
                                      f"{n + 2:04d}_bad.sql": "alter table ilr.nope add x int;"})  # fmt: skip
    with db.connect(empty_dsn) as c:
        c.execute("alter table ilr.grants drop column note")
        c.execute("delete from ilr.schema_version where version = %s", (n + 1,))
        with pytest.raises(psycopg.errors.UndefinedTable):
            migrations.upgrade(c, broken)
        cols = {r["column_name"] for r in c.execute(
            "select column_name from information_schema.columns "
            "where table_schema = 'ilr' and table_name = 'grants'")}  # fmt: skip
    assert "note" not in cols
    assert history(empty_dsn) == list(range(1, n + 1))


def test_an_edited_migration_and_a_newer_database_are_refused(
    empty_dsn: str, tmp_path: Path
) -> None:
    with Runtime(empty_dsn):
        pass
    first = migrations.available()[0]
    edited = _folder(tmp_path, {})
    (tmp_path / "migrations" / f"{first.label}.sql").write_text(first.sql + "\n-- edited\n")
    edited = migrations.load(tmp_path / "migrations")
    with db.connect(empty_dsn) as c:
        with pytest.raises(SchemaMismatch, match="must never be edited"):
            migrations.ensure(c, mine=edited)
        c.execute("insert into ilr.schema_version (version, name, sha256) values (999, 'x', 'y')")
        with pytest.raises(SchemaMismatch, match="newer than this runtime"):
            migrations.ensure(c)


def test_concurrent_upgrades_apply_each_migration_once(empty_dsn: str, tmp_path: Path) -> None:
    with Runtime(empty_dsn):
        pass
    n = migrations.latest()
    mine = _folder(tmp_path, {f"{n + 1:04d}_slow.sql": "select pg_sleep(0.5);\n"
                              "create table ilr.once (x int);"})  # fmt: skip
    results: list[list] = []

    def up() -> None:
        with db.connect(empty_dsn) as c:
            results.append(migrations.upgrade(c, mine))

    threads = [threading.Thread(target=up) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 0, 1]
    assert history(empty_dsn) == list(range(1, n + 2))


def test_a_database_from_before_migrations_is_adopted_or_sent_to_upgrade(
    empty_dsn: str,
) -> None:
    first = migrations.available()[0]
    meta = ("create table ilr.schema_meta (id int primary key, sha256 text not null, "
            "applied_at timestamptz not null)")  # fmt: skip
    with db.connect(empty_dsn) as c:
        c.execute(first.sql)
        c.execute(meta)
        c.execute("insert into ilr.schema_meta values (1, 'an-older-schema', now())")
        with pytest.raises(SchemaMismatch, match="before schema migrations"):
            migrations.ensure(c)
        c.execute("update ilr.schema_meta set sha256 = %s", (migrations.PRE_MIGRATION_SHA,))
    with db.connect(empty_dsn) as c:  # the last pre-migration schema is exactly version 1
        if migrations.latest() > 1:
            with pytest.raises(SchemaMismatch, match="at schema version 1"):
                migrations.ensure(c)
        assert history(empty_dsn) == [1]
        migrations.upgrade(c)
    with Runtime(empty_dsn) as rt:
        assert rt.list() == []


def test_the_migration_files_are_numbered_without_gaps(tmp_path: Path) -> None:
    _folder(tmp_path, {})
    shutil.move(tmp_path / "migrations" / f"{migrations.available()[0].label}.sql",
                tmp_path / "migrations" / "0007_late.sql")  # fmt: skip
    with pytest.raises(RuntimeError, match="without gaps"):
        migrations.load(tmp_path / "migrations")


def test_0003_operators_applies_on_a_database_at_0002_and_keeps_every_row(
    empty_dsn: str,
) -> None:
    """Migration 0003 (operators, sessions, audit; grants.revoke_reason; end_workflow_grants)
    on a database at version 2 with rows in it and the least-privilege roles in the cluster."""
    from interlock_runtime.console import auth

    two = migrations.available()[:2]
    assert [m.version for m in two] == [1, 2]
    with db.connect(empty_dsn) as c:
        migrations.upgrade(c, two)
        for role in ("ilr_worker", "ilr_operator", "ilr_auditor"):  # roles are cluster-wide
            if not c.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone():
                c.execute(f"create role {role} nologin")
        c.execute("insert into ilr.deployments values ('w', '1', 'sha', now(), null)")
        c.execute("insert into ilr.workflows (id, name, version, input, status) values "
                  "('wf-done', 'w', '1', '{}', 'completed'), ('wf-live', 'w', '1', '{}', "
                  "'sleeping')")  # fmt: skip
        c.execute("insert into ilr.grants (id, principal, action, constraints, granted_by) values "
                  "('g-done', 'workflow:wf-done', null, null, 'alice'), "
                  "('g-live', 'workflow:wf-live', null, null, 'alice'), "
                  "('g-policy', 'support-bot', 'refund', '{\"amount\": {\"max\": 5000}}', 'ops')")  # fmt: skip
        before = snapshot(c)
    with pytest.raises(SchemaMismatch, match="at schema version 2"):
        Runtime(empty_dsn)
    cli = [sys.executable, "-m", "interlock_runtime.cli", "db"]
    up = subprocess.run([*cli, "upgrade", "--dsn", empty_dsn], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    assert history(empty_dsn)[:3] == [1, 2, 3]
    with db.connect(empty_dsn) as c:
        after = snapshot(c)
        for table, (expect, got) in same_rows(before, after).items():
            assert got == expect, f"ilr.{table} changed"  # a migration keeps every row
        assert {"operators", "operator_sessions", "operator_audit"} <= set(after)
        grants = {json.loads(r)["id"]: json.loads(r) for r in after["grants"]}
        assert all(g["revoke_reason"] is None and g["revoked_at"] is None
                   for g in grants.values())  # fmt: skip
        # The new door works: a workflow's own live grants end, nobody else's.
        assert db.one(c.execute(db.query("end_workflow_grants"), {"wf": "wf-live"}))["ended"] == 1
        reasons = {r["id"]: r["revoke_reason"]
                   for r in c.execute("select id, revoke_reason from ilr.grants")}  # fmt: skip
        assert reasons == {"g-done": None, "g-live": "workflow finished", "g-policy": None}
        # The console's role got its grants from the migration itself.
        privileges = c.execute(
            "select has_table_privilege('ilr_operator', 'ilr.operator_sessions', 'insert') as s,"
            " has_table_privilege('ilr_operator', 'ilr.operator_audit', 'insert') as a,"
            " has_column_privilege('ilr_auditor', 'ilr.operators', 'password_hash', 'select')"
            " as h, has_function_privilege('ilr_worker',"
            " 'ilr.end_workflow_grants(text, text)', 'execute') as f").fetchone()  # fmt: skip
        assert privileges == {"s": True, "a": True, "h": False, "f": True}
        auth.add_operator(c, "alice", "a long enough password")
        assert auth.login(c, "alice", "a long enough password", ttl=60) is not None
    with Runtime(empty_dsn) as rt:
        assert {w["id"] for w in rt.list()} == {"wf-done", "wf-live"}
