"""The primary and synchronous standby pair (world/pg_pair.py) on real PostgreSQL: every
acknowledged commit survives a crash of the primary and a promotion, by both crash modes, and
the old primary rejoins as the standby."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest

from world.pg_pair import PgPair


def _insert(dsn: str, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into acked values (%s)", (n,))


def _rows(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("select n from acked order by n")]


@pytest.fixture
def pair():
    with PgPair() as p:
        yield p


def test_an_acknowledged_commit_survives_each_failover(pair: PgPair) -> None:
    dsn = pair.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table acked (n int primary key)")
    acked = []
    for i, how in enumerate(["immediate", "kill", "immediate"]):
        for n in range(i * 10, i * 10 + 10):
            _insert(dsn, n)  # returned: the commit is on both nodes
            acked.append(n)
        first = pair.primary.name
        event = pair.failover(how)
        assert pair.primary.name != first, event  # the other node now takes writes
        assert 0 < event["promoted_s"] <= event["writable_s"] <= event["in_sync_s"], event
        assert _rows(dsn) == acked, (how, event)
    restart = pair.crash_restart("kill")
    assert restart > 0
    _insert(dsn, 999)
    assert _rows(dsn) == [*acked, 999]
    assert [f["how"] for f in pair.failovers] == ["immediate", "kill", "immediate"]


def test_the_standby_refuses_writes_and_the_dsn_finds_the_primary(pair: PgPair) -> None:
    with psycopg.connect(pair.standby.conninfo("ilr"), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("create table nope (n int)")
    with psycopg.connect(pair.dsn(), autocommit=True) as conn:
        port = conn.execute("select current_setting('port')::int").fetchone()[0]
    assert port == pair.primary.port


def test_a_commit_waits_for_the_standby(pair) -> None:
    """The mechanism itself: with the standby's WAL receiver stopped, a commit does not return;
    the primary crashes before it does, and the client sees an error, never an
    acknowledgement. (The row itself may still reach the standby: the primary had sent it,
    the receiver reads it once it runs again. An unacknowledged commit may go either way.)"""
    dsn = pair.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table acked (n int primary key)")
    with psycopg.connect(pair.standby.conninfo(), autocommit=True) as conn:
        receiver = conn.execute("select pid from pg_stat_wal_receiver").fetchone()[0]
    os.kill(receiver, signal.SIGSTOP)
    outcome: list[object] = []

    def insert() -> None:
        try:
            _insert(dsn, 1)
            outcome.append("acknowledged")
        except psycopg.Error as exc:
            outcome.append(exc)

    writer = threading.Thread(target=insert, daemon=True)
    try:
        writer.start()
        time.sleep(2)
        assert outcome == [], "the commit returned before the standby had it"
        pair.crash(pair.primary, "immediate")
    finally:
        os.kill(receiver, signal.SIGCONT)
    writer.join(30)
    assert outcome and isinstance(outcome[0], psycopg.Error), outcome
    pair.promote()
    with psycopg.connect(pair.primary.conninfo("ilr")) as conn:
        assert conn.execute("select count(*) from acked").fetchone()[0] in (0, 1)


def test_a_node_whose_clock_runs_ahead_judges_by_its_own_clock_after_a_failover() -> None:
    """clock_offset: the standby's now() runs 3 s ahead (libfaketime); while the other node is
    primary the DSN sees this machine's time, after the failover the standby's."""

    def ahead(p: PgPair) -> float:
        with psycopg.connect(p.dsn()) as conn:
            db_now = conn.execute("select extract(epoch from clock_timestamp())").fetchone()[0]
        return float(db_now) - time.time()

    with PgPair(clock_offset={"b": 3.0}) as p:
        assert abs(ahead(p)) < 0.5
        # measured at start, both nodes up: a on this machine's clock, b 3 s ahead
        assert p.measured_offset["a"] == 0.0 and 2.9 < p.measured_offset["b"] < 3.1
        before = time.time()
        p.failover("immediate")
        assert p.primary.name == "b"
        assert 2.5 < ahead(p) < 3.5
        # the clock map the checks use: a's offset until the promotion, b's from then on
        (t0, off0), (t1, off1) = p.db_clock()
        assert off0 == 0.0 and off1 == p.measured_offset["b"] and t0 < before < t1
