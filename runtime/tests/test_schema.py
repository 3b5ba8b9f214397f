"""R0: the schema is checked twice, and the database itself refuses what the protocol forbids."""

from __future__ import annotations

import psycopg
import pytest

from interlock_runtime import Runtime, db, migrations


def _seed_workflow(conn: psycopg.Connection) -> None:
    conn.execute("insert into ilr.deployments values ('w', '1', 'sha', now(), null)")
    conn.execute(
        "insert into ilr.workflows (id, name, version, input) values ('wf', 'w', '1', '{}')"
    )
    conn.execute(
        "insert into ilr.steps (workflow_id, seq, name, kind, output, epoch) "
        "values ('wf', 1, 's1', 'step', '1', 1)"
    )


def test_schema_checks_twice_and_keeps_data(conn: psycopg.Connection) -> None:
    _seed_workflow(conn)
    migrations.ensure(conn)
    assert migrations.upgrade(conn) == []  # current: nothing to do
    migrations.ensure(conn)
    rows = conn.execute("select seq, output from ilr.steps where workflow_id = 'wf'").fetchall()
    assert rows == [{"seq": 1, "output": 1}]


def test_runtime_applies_schema_to_an_empty_database(admin_dsn: str, dsn: str) -> None:
    with db.connect(dsn) as c:
        c.execute("drop schema ilr cascade")
    with Runtime(dsn) as rt:
        assert rt.list() == []
    with db.connect(dsn) as c:
        tables = {r["relname"] for r in c.execute(
            "select relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = 'ilr' and relkind = 'r'")}  # fmt: skip
    assert {"workflows", "steps", "claims", "effects", "journal", "grants", "signals"} <= tables


@pytest.mark.parametrize(
    "statement",
    [
        "update ilr.steps set output = '2' where workflow_id = 'wf'",
        "delete from ilr.steps where workflow_id = 'wf'",
        "insert into ilr.steps (workflow_id, seq, name, kind, output, epoch) "
        "values ('wf', 1, 's1', 'step', '3', 2)",
    ],
)
def test_step_rows_are_append_only_and_unique(conn: psycopg.Connection, statement: str) -> None:
    _seed_workflow(conn)
    with pytest.raises(psycopg.Error):
        conn.execute(statement)
    assert conn.execute("select output from ilr.steps where workflow_id = 'wf'").fetchall() == [
        {"output": 1}
    ]


def _seed_effect(conn: psycopg.Connection) -> None:
    _seed_workflow(conn)
    conn.execute(
        "insert into ilr.effects (effect_id, workflow_id, target, tier, payload, payload_hash) "
        "values ('e1', 'wf', 't', 1, '{}', 'h1')"
    )


def test_second_committed_is_rejected(conn: psycopg.Connection) -> None:
    _seed_effect(conn)
    conn.execute(
        "insert into ilr.journal (effect_id, kind, body, prev, hash) values ('e1', 'COMMITTED', '{}', null, 'a')"
    )
    with pytest.raises(psycopg.errors.UniqueViolation, match="one_commit"):
        conn.execute(
            "insert into ilr.journal (effect_id, kind, body, prev, hash) values ('e1', 'COMMITTED', '{}', 'a', 'b')"
        )


def test_forked_chain_and_journal_edits_are_rejected(conn: psycopg.Connection) -> None:
    _seed_effect(conn)
    conn.execute(
        "insert into ilr.journal (effect_id, kind, body, prev, hash) values ('e1', 'PROPOSED', '{}', null, 'a')"
    )
    with pytest.raises(psycopg.errors.UniqueViolation):  # a second first entry
        conn.execute(
            "insert into ilr.journal (effect_id, kind, body, prev, hash) values ('e1', 'PROPOSED', '{}', null, 'b')"
        )
    with pytest.raises(psycopg.Error, match="append-only"):
        conn.execute("update ilr.journal set body = '{\"x\":1}'")
    with pytest.raises(psycopg.Error, match="append-only"):
        conn.execute("delete from ilr.journal")


def test_payload_binding_and_terminal_state_are_guarded(conn: psycopg.Connection) -> None:
    _seed_effect(conn)
    with pytest.raises(psycopg.Error, match="immutable"):
        conn.execute("update ilr.effects set payload_hash = 'h2' where effect_id = 'e1'")
    conn.execute("update ilr.effects set state = 'committed' where effect_id = 'e1'")
    with pytest.raises(psycopg.Error, match="terminal"):
        conn.execute("update ilr.effects set state = 'proposed' where effect_id = 'e1'")
