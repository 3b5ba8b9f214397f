"""The client refuses bad input before anything is written, and names what it knows."""

from __future__ import annotations

import math

import psycopg
import pytest
from flows import echo, three_steps

from interlock_runtime import (
    InvalidInput,
    Runtime,
    UnknownWorkflow,
    WorkflowConflict,
    WorkflowNotFound,
    workflow,
)


def _counts(conn: psycopg.Connection) -> tuple[int, int]:
    row = conn.execute(
        "select (select count(*) from ilr.workflows) as w, (select count(*) from ilr.deployments) as d"
    ).fetchone()
    return row["w"], row["d"]


@pytest.mark.parametrize(
    "bad", [{"when": object()}, {"x": math.nan}, {1j: 2}, b"bytes", {"s": {1, 2}}]
)
def test_non_json_input_is_refused_before_anything_is_written(dsn, conn, bad) -> None:
    with Runtime(dsn) as rt:
        before = _counts(conn)
        with pytest.raises(InvalidInput, match="not JSON-serializable"):
            rt.start(echo, "wf-1", bad)
        assert _counts(conn) == before == (0, 0)


@pytest.mark.parametrize("bad_id", ["", "a b", "x" * 201, "semi;colon", "quote'", None, 7])
def test_bad_ids_are_refused(dsn, conn, bad_id) -> None:
    with Runtime(dsn) as rt:
        with pytest.raises(InvalidInput, match="not valid"):
            rt.start(echo, bad_id, {})
    assert _counts(conn) == (0, 0)


def test_unknown_name_or_version_names_the_registered_ones(dsn, conn) -> None:
    """Refused only with wait_for_worker=False: by default such a start waits for a worker
    (awaiting_worker, test_queues.py)."""
    with Runtime(dsn) as rt:
        rt.register(echo, three_steps)
        with pytest.raises(UnknownWorkflow) as err:
            rt.start("refund", "wf-1", {}, wait_for_worker=False)
        assert "echo@1" in str(err.value) and "three_steps@1" in str(err.value)
        with pytest.raises(UnknownWorkflow, match="echo@9"):
            rt.start("echo", "wf-1", {}, version="9", wait_for_worker=False)
        assert _counts(conn)[0] == 0
        rt.start("refund", "wf-2", {})
        rt.start("echo", "wf-3", {}, version="9")
        assert {w["id"]: w["status"] for w in rt.list()} == {
            "wf-2": "awaiting_worker", "wf-3": "awaiting_worker"}  # fmt: skip


def test_start_is_idempotent_on_id_and_refuses_a_conflict(dsn) -> None:
    with Runtime(dsn) as rt:
        assert rt.start(echo, "wf-1", {"a": 1}) == "wf-1"
        assert rt.start(echo, "wf-1", {"a": 1}) == "wf-1"
        with pytest.raises(WorkflowConflict, match="different name, version or input"):
            rt.start(echo, "wf-1", {"a": 2})
        assert [w["id"] for w in rt.list()] == ["wf-1"]
        assert rt.describe("wf-1")["status"] == "pending"
        with pytest.raises(WorkflowNotFound):
            rt.describe("nope")


def test_start_by_name_uses_the_newest_version(dsn) -> None:
    @workflow(name="versioned", version="1")
    def v1(ctx, inp):
        return 1

    @workflow(name="versioned", version="2")
    def v2(ctx, inp):
        return 2

    with Runtime(dsn) as rt:
        rt.register(v1)
        rt.register(v2)
        rt.start("versioned", "wf-v", {})
        assert rt.describe("wf-v")["version"] == "2"


def test_a_start_of_a_served_workflow_is_one_round_trip(dsn, tmp_path) -> None:
    """rt.start by name of a deployed workflow under a new id is one statement in one commit
    (start_served), counted as the server's ReadyForQuery messages in libpq's protocol trace;
    the version it records is the one the general form would (the newest, or the one asked
    for), and a second start with that id still goes the general way and compares."""
    from psycopg import pq

    @workflow(name="served", version="1")
    def s1(ctx, inp):
        return 1

    @workflow(name="served", version="2")
    def s2(ctx, inp):
        return 2

    with Runtime(dsn) as rt:
        rt.register(s1, s2)
        trace = tmp_path / "start.trace"
        with open(trace, "w") as f:
            rt._conn.pgconn.trace(f.fileno())
            rt._conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            rt.start("served", "wf-new", {"n": 1})
            rt.start("served", "wf-old", {"n": 1}, version="1")
            rt._conn.pgconn.untrace()
        ready = [line for line in trace.read_text().splitlines() if "\tReadyForQuery" in line]
        assert len(ready) == 2, trace.read_text()
        assert rt.describe("wf-new")["version"] == "2"
        assert rt.describe("wf-old")["version"] == "1"
        assert rt.start("served", "wf-new", {"n": 1}) == "wf-new"
        with pytest.raises(WorkflowConflict):
            rt.start("served", "wf-new", {"n": 2})


def test_workflow_decorator_rejects_bad_names() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        workflow(name="has space")(lambda ctx, inp: None)


def test_an_approval_once_refuses_a_second_while_the_first_waits(dsn) -> None:
    """approve_in(once=True), the console's approval: a second approval of a workflow whose
    first has not been picked up is refused and writes nothing; rt.approve keeps allowing it."""
    from interlock_runtime import db
    from interlock_runtime.runtime import approve_in

    with Runtime(dsn) as rt:
        rt.start(echo, "appr-1", {"n": 1})
        with db.connect(dsn) as conn:
            with conn.transaction():
                approve_in(conn, "appr-1", {"amount": 1}, by="ann", once=True)
            with pytest.raises(WorkflowConflict, match="already approved by ann"):
                with conn.transaction():
                    approve_in(conn, "appr-1", {"amount": 1}, by="bob", once=True)
            grants = conn.execute("select count(*) as n from ilr.grants").fetchone()["n"]
        assert grants == 1
        rt.approve("appr-1", {"amount": 1}, by="carol")  # the API's own approve: a second grant
