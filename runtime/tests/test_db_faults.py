"""Database faults at the public entries (docs/errors.md#database-faults): a role without the
privilege, a missing database, a terminated backend, a rolled-back transaction and a server
restarted under a long-lived client, at the CLI, the sync client and the asyncio client. Each
answer is one documented error (one line, exit status 2 at the CLI), never a traceback, and a
refused call changes no row (the ilr schema is hashed before and after)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from test_hostile_input import _changed, _snapshot

from conftest import wait_for
from interlock_runtime import AsyncRuntime, Runtime, db, local_postgres
from interlock_runtime.errors import (
    ConnectionLost,
    DatabaseConflict,
    DatabaseMissing,
    DatabaseUnreachable,
    PermissionDenied,
)

TESTS = Path(__file__).resolve().parent
LOGINS = {"ilr_t_worker": "worker", "ilr_t_operator": "operator", "ilr_t_auditor": "auditor"}
local_only = pytest.mark.skipif(
    local_postgres.external_dsn() is not None, reason="ILR_DSN points at an external server"
)


def as_user(dsn: str, user: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(dsn), "user": user})


def cli(*args: str, dsn: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args, "--dsn", dsn],
                          capture_output=True, timeout=60, env=env, cwd=TESTS)  # fmt: skip


def one_line(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode()
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interlock "), err
    return lines[0]


@pytest.fixture
def roles(dsn, conn):
    db.apply_roles(conn, LOGINS)
    with Runtime(dsn) as rt:
        rt.start("echo", "w1", {})  # awaiting a worker: no deployment serves it
        rt.grant("agent", "refund", by="ops", grant_id="g1")
    return {role: as_user(dsn, user) for user, role in LOGINS.items()}


# -- a role without the privilege -----------------------------------------------------------


def test_approve_under_the_worker_role_is_one_line_naming_the_role(dsn, conn, roles) -> None:
    """The reported case: a traceback ending in InsufficientPrivilege before."""
    before = _snapshot(conn)
    proc = cli("approve", "w1", "--by", "ann", "--payload", "{}", dsn=roles["worker"])
    line = one_line(proc)
    assert proc.returncode == 2, line
    assert "'ilr_t_worker'" in line and "ilr_worker" in line, line
    assert "interlock approve needs ilr_operator" in line, line
    assert _changed(before, _snapshot(conn)) == 0


@pytest.mark.parametrize("argv", [["signal", "w1", "go"], ["cancel", "w1"],
                                  ["revoke", "g1", "--by", "ann"], ["start", "echo", "w2"],
                                  ["breaker", "reset", "t"], ["queue", "set", "q", "--concurrency", "1"],
                                  ["operator", "disable", "bob"], ["roles"], ["worker", "--module", "flows"]])  # fmt: skip
def test_auditor_writes_are_refused_on_one_line(dsn, conn, roles, argv) -> None:
    before = _snapshot(conn)
    proc = cli(*argv, dsn=roles["auditor"])
    line = one_line(proc)
    assert proc.returncode == 2, line
    assert "permission denied" in line and "'ilr_t_auditor'" in line, line
    assert f"interlock {argv[0]} needs" in line, line
    assert _changed(before, _snapshot(conn)) == 0


def test_the_clients_raise_permission_denied_naming_the_method(dsn, conn, roles) -> None:
    before = _snapshot(conn)
    with Runtime(roles["worker"]) as rt:
        with pytest.raises(PermissionDenied, match=r"rt\.approve needs ilr_operator") as err:
            rt.approve("w1", {"amount": 1}, by="agent")
        assert "'ilr_t_worker' (a member of ilr_worker)" in str(err.value)
        assert "\n" not in str(err.value)
        assert isinstance(err.value, psycopg.errors.InsufficientPrivilege)  # as it was
        assert rt.describe("w1")["id"] == "w1"  # the client goes on

    async def main() -> None:
        async with AsyncRuntime(roles["auditor"]) as art:
            with pytest.raises(PermissionDenied, match=r"rt\.signal needs ilr_operator"):
                await art.signal("w1", "go")
            with pytest.raises(PermissionDenied, match=r"rt\.cancel needs ilr_operator"):
                await art.handle("w1").cancel()
            assert len(await art.list()) == 1

    asyncio.run(main())
    assert _changed(before, _snapshot(conn)) == 0


# -- a database that does not exist ---------------------------------------------------------


def test_a_missing_database_is_named_not_unreachable(admin_dsn) -> None:
    missing = make_conninfo(**{**conninfo_to_dict(admin_dsn), "dbname": "ilr_no_such_db"})
    with pytest.raises(DatabaseMissing, match="has no database 'ilr_no_such_db'") as err:
        Runtime(missing)
    assert "cannot reach" not in str(err.value) and "Create it" in str(err.value)
    assert isinstance(err.value, DatabaseUnreachable)  # code that caught that still does
    with pytest.raises(DatabaseMissing):
        asyncio.run(AsyncRuntime(missing).list())
    for argv in (["list"], ["approve", "w1", "--by", "ann"], ["queue", "list"], ["watchdog"],
                 ["schedule", "list"], ["db", "status"]):  # fmt: skip
        proc = cli(*argv, dsn=missing)
        line = one_line(proc)
        assert proc.returncode == 2 and "has no database 'ilr_no_such_db'" in line, (argv, line)


# -- a terminated backend -------------------------------------------------------------------


def _terminate(conn: psycopg.Connection, pid: int) -> None:
    conn.execute("select pg_terminate_backend(%s)", (pid,))
    wait_for(lambda: conn.execute("select count(*) as n from pg_stat_activity where pid = %s",
                                  (pid,)).fetchone()["n"] == 0, 10, "the backend to end")  # fmt: skip


def test_a_backend_terminated_while_idle_is_made_again_for_any_call(dsn, conn, roles) -> None:
    """An unsafe call (signal) too: nothing was sent when the dead connection is found. Before
    the fix the first call after the kill raised AdminShutdown."""
    with Runtime(dsn) as rt:
        for call in (lambda: rt.list(), lambda: rt.signal("w1", "go"),
                     lambda: rt.approve("w1", {"a": 1}, by="ann"), lambda: rt.describe("w1")):  # fmt: skip
            _terminate(conn, rt._conn.info.backend_pid)
            call()
    assert conn.execute("select count(*) as n from ilr.signals").fetchone()["n"] == 2

    async def main() -> None:
        async with AsyncRuntime(dsn) as art:
            rt = await art.runtime()
            _terminate(conn, rt._conn.info.backend_pid)
            assert await art.signal("w1", "go") > 0
            _terminate(conn, rt._conn.info.backend_pid)
            assert (await art.handle("w1").describe())["id"] == "w1"

    asyncio.run(main())


def _blocked(conn: psycopg.Connection, pid: int) -> bool:
    row = conn.execute("select wait_event_type from pg_stat_activity where pid = %s",
                       (pid,)).fetchone()  # fmt: skip
    return row is not None and row["wait_event_type"] == "Lock"


def _killed_in_flight(dsn: str, conn: psycopg.Connection, call) -> BaseException | None:
    """Run call(rt) while another session holds ilr.workflows locked; terminate the call's
    backend while it waits for the lock, then let the lock go. What the call raised, or None."""
    box: dict = {}
    with Runtime(dsn) as rt, db.connect(dsn) as holder:
        pid = rt._conn.info.backend_pid
        with holder.transaction():
            holder.execute("lock table ilr.workflows in access exclusive mode")

            def body() -> None:
                try:
                    box["value"] = call(rt)
                except BaseException as exc:  # noqa: BLE001 - the test looks at it
                    box["exc"] = exc

            t = threading.Thread(target=body)
            t.start()
            wait_for(lambda: _blocked(conn, pid), 10, "the call to wait for the row lock")
            _terminate(conn, pid)
        t.join(30)
        assert not t.is_alive()
    return box.get("exc")


def test_a_backend_terminated_under_a_call_repeats_it_if_safe_else_says_so(
    dsn, conn, roles
) -> None:
    before = _snapshot(conn)
    exc = _killed_in_flight(dsn, conn, lambda rt: rt.signal("w1", "go"))
    assert isinstance(exc, ConnectionLost), repr(exc)
    assert "rt.signal" in str(exc) and "is not known" in str(exc) and "\n" not in str(exc)
    assert _changed(before, _snapshot(conn)) == 0  # it was killed waiting: nothing written
    exc = _killed_in_flight(dsn, conn, lambda rt: rt.cancel("w1", by="ann"))
    assert isinstance(exc, ConnectionLost) and "rt.cancel" in str(exc), repr(exc)
    assert _changed(before, _snapshot(conn)) == 0
    box: list = []
    assert _killed_in_flight(dsn, conn, lambda rt: box.append(rt.list())) is None
    assert [w["id"] for w in box[0]] == ["w1"]  # a read: made again, repeated, answered


# -- a transaction Postgres rolled back -----------------------------------------------------

ROLL_BACK = """
create table if not exists public.fault_budget (n int);
create sequence if not exists public.fault_calls;  -- counts outside the rolled-back transaction
create or replace function public.fault_roll_back() returns trigger language plpgsql as $$
begin
  if nextval('public.fault_calls') <= (select coalesce(max(n), 0) from public.fault_budget) then
    raise exception 'could not serialize access (injected)' using errcode = '40001';
  end if;
  return new;
end $$;
create or replace trigger fault_roll_back before insert on ilr.{table}
  for each row execute function public.fault_roll_back();
"""


def _roll_back_next(conn: psycopg.Connection, table: str, n: int) -> None:
    """The next n inserts into ilr.`table` fail with a serialization failure (SQLSTATE 40001)."""
    conn.execute(ROLL_BACK.replace("{table}", table))
    conn.execute("delete from public.fault_budget")
    conn.execute("insert into public.fault_budget values (%s)", (n,))
    conn.execute("select setval('public.fault_calls', 1, false)")


def test_a_rolled_back_call_is_repeated_if_safe_else_conflict(dsn, conn, roles) -> None:
    _roll_back_next(conn, "signals", 1)
    before = _snapshot(conn)
    with Runtime(dsn) as rt:
        with pytest.raises(DatabaseConflict, match=r"rt\.signal: Postgres rolled the transaction"):
            rt.signal("w1", "go")
        assert _changed(before, _snapshot(conn)) == 0
        assert rt.signal("w1", "go") > 0  # the budget is spent: it goes through
        _roll_back_next(conn, "workflows", 2)
        assert rt.start("echo", "w-new", {}) == "w-new"  # safe: repeated, went through
    proc = cli("signal", "w1", "go", dsn=dsn)
    assert proc.returncode == 0, proc.stderr
    _roll_back_next(conn, "signals", 1)
    before = _snapshot(conn)
    proc = cli("signal", "w1", "go", dsn=dsn)
    line = one_line(proc)
    assert proc.returncode == 2 and "rolled the transaction back" in line, line
    assert "cannot reach" not in line
    assert _changed(before, _snapshot(conn)) == 0


# -- a server restarted under a long-lived client -------------------------------------------


@local_only
@pytest.mark.exclusive  # restarts the cluster: every other test would see it
def test_a_restart_under_long_lived_clients_is_ridden_through(dsn, roles) -> None:
    """The reported case: the first call after a restart raised AdminShutdown. Then a server
    that stays down is DatabaseUnreachable, and the client works again once it is back."""
    with Runtime(dsn) as rt:
        assert len(rt.list()) == 1
        local_postgres.restart_immediate()
        assert len(rt.list()) == 1
        local_postgres.restart_immediate()
        assert rt.signal("w1", "go") > 0  # not safe to repeat: found dead before sending
        local_postgres.stop()
        try:
            with pytest.raises(DatabaseUnreachable, match="cannot reach Postgres"):
                rt.list()
            with pytest.raises(DatabaseUnreachable, match="cannot reach Postgres"):
                rt.signal("w1", "go")
        finally:
            local_postgres.start()
        assert rt.describe("w1")["id"] == "w1"

    async def main() -> None:
        async with AsyncRuntime(dsn) as art:
            assert len(await art.list()) == 1
            await asyncio.to_thread(local_postgres.restart_immediate)
            assert await art.signal("w1", "go") > 0
            assert (await art.describe("w1"))["id"] == "w1"

    asyncio.run(main())


# -- every entry is classified (no database) ------------------------------------------------


def test_every_entry_has_a_role_and_a_documented_repeat_rule() -> None:
    """A new client method or verb must say who may call it (db_faults.NEEDS), and
    docs/errors.md must say whether it is repeated after a fault."""
    from interlock_runtime import db_faults
    from interlock_runtime.cli import build_parser

    methods = {n for n in dir(Runtime) if not n.startswith("_") and callable(getattr(Runtime, n))}
    methods -= {"handle", "close"}  # read nothing
    assert methods - db_faults.NEEDS.keys() == set()
    doc = (TESTS.parents[1] / "docs" / "errors.md").read_text()
    section = doc.split("## Database faults", 1)[1].split("\n## ", 1)[0]
    undocumented = {m for m in methods if f"`{m}`" not in section and m != "result"}
    assert undocumented == set(), "say in docs/errors.md whether these are repeated"
    assert db_faults.SAFE_TO_REPEAT <= methods
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    verbs = set(sub.choices) - {"pg", "keygen", "verify"}  # no database
    assert {v for v in verbs if f"interlock {v}" not in db_faults.NEEDS} == set()
