"""Queues with limits that hold across workers, priorities, workers serving chosen queues, and
starts before any worker exists (issue 21, items 4 and 7; docs/queues.md).

Limits are judged from ground truth: each run of `queued_work` (flows.py) writes when its work
began and ended, by the machine's clock, to a file of its own; nothing the runtime counts is
trusted. Every test here was seen failing with the code it guards broken (see the report in
the commit that added this file).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psycopg
import pytest
from flows import child_flow, placed_parent, queued_work

from interlock_runtime import (
    InvalidInput,
    Runtime,
    UnknownWorkflow,
    WorkflowConflict,
    WorkflowNotFound,
    cli,
    db,
)
from interlock_runtime import queues as queueing
from interlock_runtime.run_state import child_placement
from interlock_runtime.testing import wait_for
from interlock_runtime.workflow import workflow

FLOW = "queued_work"


def start_all(rt: Runtime, folder: Path, ids: list[str], hold: float, **opts: object) -> None:
    for wf_id in ids:
        rt.start(FLOW, wf_id, {"dir": str(folder), "hold": hold}, **opts)  # type: ignore[arg-type]


def finished(rt: Runtime, ids: list[str], timeout: float) -> None:
    def done() -> bool:
        statuses = {rt.describe(i)["status"] for i in ids}
        assert statuses <= {"awaiting_worker", "pending", "running", "completed"}, statuses
        return statuses == {"completed"}

    wait_for(done, timeout, f"{len(ids)} runs to complete")


def times(folder: Path, ids: list[str]) -> dict[str, dict]:
    return {i: json.loads((folder / f"{i}.json").read_text()) for i in ids}


def most_at_once(spans: list[dict]) -> int:
    """The largest number of runs whose work overlapped at one instant (an end before a start
    at the same instant)."""
    edges = sorted([(s["began"], 1) for s in spans] + [(s["ended"], -1) for s in spans],
                   key=lambda e: (e[0], e[1]))  # fmt: skip
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def owners(conn: psycopg.Connection, ids: list[str]) -> dict[str, set[str]]:
    rows = conn.execute("select workflow_id, owner from ilr.claims where workflow_id = any(%s)",
                        (ids,)).fetchall()  # fmt: skip
    out: dict[str, set[str]] = {}
    for r in rows:
        out.setdefault(r["workflow_id"], set()).add(r["owner"])
    return out


# -- limits, judged from what the runs recorded --------------------------------------------------


def test_a_concurrency_limit_holds_across_four_workers(dsn, conn, workers, tmp_path) -> None:
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        rt.queue("q2", concurrency=2)
        ids = [f"c-{i:02}" for i in range(10)]
        start_all(rt, tmp_path, ids, hold=0.4, queue="q2")
        for n in range(4):
            workers(f"w{n}", concurrency=3)
        finished(rt, ids, timeout=30)
    spans = list(times(tmp_path, ids).values())
    assert most_at_once(spans) == 2  # never more than the limit, and the limit was used
    served_by = set().union(*owners(conn, ids).values())
    assert len(served_by) >= 2, f"one worker served every run: {served_by}"


def test_a_per_key_limit_holds_per_key_and_keys_run_side_by_side(dsn, workers,
                                                                 tmp_path) -> None:  # fmt: skip
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        rt.queue("per-customer", per_key_concurrency=1)
        keys = {f"k-{c}-{i}": c for c in "abc" for i in range(3)}
        for wf_id, customer in keys.items():
            start_all(rt, tmp_path, [wf_id], hold=0.3, queue="per-customer", queue_key=customer)
        workers("w1", concurrency=4)
        workers("w2", concurrency=4)
        finished(rt, list(keys), timeout=30)
    spans = times(tmp_path, list(keys))
    for customer in "abc":
        assert most_at_once([s for i, s in spans.items() if keys[i] == customer]) == 1, customer
    assert most_at_once(list(spans.values())) >= 2  # different keys did run at once


def test_rate_limits_per_queue_and_per_key(dsn, workers, tmp_path) -> None:
    """rate (2, 1 s): in any second at most 2 first starts. per_key_rate (1, 1 s) on another
    queue: each key's starts at least a second apart, while different keys start together."""
    # Judged on the claims table (ground truth: the database's time of each run's first claim,
    # which is what the rate spends), not on when the work began in the worker: on a busy
    # machine that can come 0.2 s after its claim. slack: the claim's transaction start against
    # the statement time the limit reads.
    period, slack = 1.0, 0.05
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        rt.queue("rated", rate=(2, period))
        rt.queue("rated-per-key", per_key_rate={"limit": 1, "period": period})
        rated = [f"r-{i}" for i in range(6)]
        start_all(rt, tmp_path, rated, hold=0.05, queue="rated")
        keyed = {f"rk-{c}-{i}": c for c in "xy" for i in range(3)}
        for wf_id, key in keyed.items():
            start_all(rt, tmp_path, [wf_id], hold=0.05, queue="rated-per-key", queue_key=key)
        workers("w1", concurrency=4)
        workers("w2", concurrency=4)
        finished(rt, rated + list(keyed), timeout=30)
        claimed = {i: rt.claim_history(i)[0]["claimed_at"].timestamp() for i in rated + list(keyed)}
    assert sorted(times(tmp_path, rated + list(keyed))) == sorted(rated + list(keyed))  # all ran
    began = sorted(claimed[i] for i in rated)
    gaps = [round(later - first, 3) for first, later in zip(began, began[2:], strict=False)]
    assert min(gaps) >= period - slack, f"3 starts within {period}s: {gaps}"
    for key in "xy":
        mine = sorted(claimed[i] for i in keyed if keyed[i] == key)
        assert min(b - a for a, b in zip(mine, mine[1:], strict=False)) >= period - slack, (
            key,
            mine,
        )
    firsts = [min(claimed[i] for i in keyed if keyed[i] == key) for key in "xy"]
    assert abs(firsts[0] - firsts[1]) < period / 2  # the keys did not wait for each other


def test_priority_orders_the_claims(dsn, workers, tmp_path) -> None:
    """Started before any worker, on a queue that runs one at a time: the work runs in
    priority order (lower first), ties in the order they were started."""
    priorities = [5, 1, 3, -2, 1, 0, 4]
    ids = [f"p-{i}" for i in range(len(priorities))]
    with Runtime(dsn) as rt:
        rt.queue("one-by-one", concurrency=1)
        for wf_id, prio in zip(ids, priorities, strict=True):
            start_all(rt, tmp_path, [wf_id], hold=0.05, queue="one-by-one", priority=prio)
        workers("w1", concurrency=4)
        finished(rt, ids, timeout=30)
    spans = times(tmp_path, ids)
    ran = sorted(ids, key=lambda i: spans[i]["began"])
    expected = [
        i
        for _, i in sorted(zip(priorities, ids, strict=True), key=lambda p: (p[0], ids.index(p[1])))
    ]
    assert ran == expected


def test_a_worker_serves_only_its_queues(dsn, conn, workers, tmp_path) -> None:
    """A worker of queue a (limited: the limited claim) leaves b, c and default alone; a worker
    of b and default (the plain claim) leaves c alone."""
    runs = {"a": ["qa-1", "qa-2"], "b": ["qb-1"], "c": ["qc-1"], "default": ["qd-1"]}
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        rt.queue("a", concurrency=5)
        for queue, ids in runs.items():
            start_all(rt, tmp_path, ids, hold=0.05, queue=None if queue == "default" else queue)
        workers("wa", concurrency=4, extra_args=("--queue", "a"))
        finished(rt, runs["a"], timeout=30)
        time.sleep(1.0)  # five polls of the worker, which had nothing else to claim
        assert {rt.describe(i)["status"] for q in "bc" for i in runs[q]} == {"pending"}
        assert rt.describe("qd-1")["status"] == "pending"
        workers("wb", concurrency=4, extra_args=("--queue", "b,default"))
        finished(rt, runs["b"] + runs["default"], timeout=30)
        time.sleep(1.0)
        assert rt.describe("qc-1")["status"] == "pending"
    by = owners(conn, [i for ids in runs.values() for i in ids])
    assert all(by[i] == {"wa"} for i in runs["a"])
    assert all(by[i] == {"wb"} for i in runs["b"] + runs["default"])
    assert "qc-1" not in by


def test_a_child_runs_on_its_parents_queue_unless_told_otherwise(dsn, conn, workers) -> None:
    """The only worker serves queue a: a child left on the default queue would never be
    claimed and its parent would wait for ever. One named elsewhere (queue b, priority 7)
    waits there until a worker of b comes."""
    with Runtime(dsn) as rt:
        rt.register(placed_parent, child_flow)
        rt.start(placed_parent, "pp-1", {"x": 2}, queue="a", priority=3)
        rt.start(placed_parent, "pp-2", {"x": 5, "queue": "b", "priority": 7}, queue="a")
        workers("wa", extra_args=("--queue", "a"))
        assert rt.result("pp-1", timeout=30) == {"child": "pp-1/1", "result": 4}
        child = "select status from ilr.workflows where id = 'pp-2/1'"
        wait_for(lambda: conn.execute(child).fetchone(), 30, "the child on b")
        placed = {r["id"]: (r["queue"], r["priority"]) for r in conn.execute(
            "select id, queue, priority from ilr.workflows where parent_id is not null")}  # fmt: skip
        assert placed == {"pp-1/1": ("a", 3), "pp-2/1": ("b", 7)}
        time.sleep(1.0)  # five polls of wa: b is not its queue
        assert rt.describe("pp-2/1")["status"] == "pending"
        workers("wb", extra_args=("--queue", "b"))
        assert rt.result("pp-2", timeout=30) == {"child": "pp-2/1", "result": 10}


# -- starting before a worker exists ---------------------------------------------------------------


def test_a_start_before_any_worker_waits_visibly_then_runs(dsn, workers, tmp_path,
                                                          capsys) -> None:  # fmt: skip
    inp = json.dumps({"dir": str(tmp_path), "hold": 0.05})
    assert cli.main(["start", FLOW, "early-1", "--input", inp, "--dsn", dsn]) == 0
    assert "awaiting a worker" in capsys.readouterr().out
    with Runtime(dsn) as rt:
        rt.start(FLOW, "early-v2", {"dir": str(tmp_path)}, version="2")  # no worker serves v2
        assert rt.deployments() == []
        assert cli.main(["list", "--dsn", dsn]) == 0
        listed = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
        assert "awaiting_worker" in listed["early-1"] and "awaiting_worker" in listed["early-v2"]
        row = rt.describe("early-1")
        assert (row["status"], row["version"]) == ("awaiting_worker", None)
        workers("w1", concurrency=2)
        assert rt.result("early-1", timeout=30)["id"] == "early-1"
        assert rt.describe("early-1")["claims"][0]["version"] == "1"
        time.sleep(0.5)
        assert rt.describe("early-v2")["status"] == "awaiting_worker"  # pinned: waits for v2
        rt.cancel("early-v2", by="test")  # nothing of it ever ran: it ends at once
        assert rt.describe("early-v2")["status"] == "cancelled"


def test_version_pinning_of_a_run_started_before_its_deployment(dsn) -> None:
    """Unpinned: the newest live version when its name is first registered. Pinned: waits for
    exactly that version. wait_for_worker=False keeps the old refusal."""

    @workflow(name="later", version="1")
    def later_v1(ctx, inp):
        return 1

    @workflow(name="later", version="2")
    def later_v2(ctx, inp):
        return 2

    with Runtime(dsn) as rt:
        rt.start("later", "free", {})
        rt.start("later", "pinned-2", {}, version="2")
        with pytest.raises(UnknownWorkflow, match="no deployment serves workflow 'later'"):
            rt.start("later", "refused", {}, wait_for_worker=False)
        rt.register(later_v1)
        assert (rt.describe("free")["status"], rt.describe("free")["version"]) == ("pending", "1")
        assert rt.describe("pinned-2")["status"] == "awaiting_worker"
        # nothing of it ran: a fork is refused with what to do, never a database error
        with pytest.raises(WorkflowConflict, match="no steps to fork; start a new workflow"):
            rt.fork("pinned-2", 1, "pinned-2-fork")
        with pytest.raises(WorkflowNotFound):
            rt.fork("nobody", 1, "nobody-fork")
        rt.register(later_v2)
        assert (rt.describe("pinned-2")["status"], rt.describe("pinned-2")["version"]) == (
            "pending", "2")  # fmt: skip
        assert rt.start("later", "free", {}) == "free"  # idempotent once resolved


def test_a_start_racing_the_first_registration_is_resolved(dsn) -> None:
    """A start that found no deployment holds the name's lock until it commits; a
    registration meanwhile waits for it and then resolves the run it inserted."""

    @workflow(name="racy", version="1")
    def racy(ctx, inp):
        return 1

    with Runtime(dsn) as rt, db.connect(dsn) as starter:
        registered = threading.Event()
        with starter.transaction():
            inserted, version = queueing.start_in(
                starter, wf_id="race-1", name="racy", version=None, wanted_version=None,
                input_text="{}", queue="default", priority=0, queue_key=None, dedup_id=None)  # fmt: skip
            assert (inserted, version) == (True, None)
            t = threading.Thread(target=lambda: (rt.register(racy), registered.set()))
            t.start()
            time.sleep(0.5)
            assert not registered.is_set()  # the registration waits for the start's lock
        t.join(10)
        assert registered.is_set()
        assert (rt.describe("race-1")["status"], rt.describe("race-1")["version"]) == (
            "pending", "1")  # fmt: skip


# -- the API and the CLI refuse what they cannot honour ------------------------------------------


def test_queue_options_are_checked_and_deduped(dsn) -> None:
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        for bad, match in [({"concurrency": 0}, "at least 1"), ({"rate": (5,)}, "limit, period"),
                           ({"rate": {"limit": 1}}, "keys limit and period"),
                           ({"rate": (1, 0)}, "above 0"), ({"concurrency": 1.5}, "whole")]:  # fmt: skip
            with pytest.raises(InvalidInput, match=match):
                rt.queue("x", **bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="default queue has no limits"):
            rt.queue("default", concurrency=1)
        with pytest.raises(InvalidInput, match="priority"):
            rt.start(FLOW, "p", {}, priority=10**7)
        with pytest.raises(InvalidInput, match="queue"):
            rt.start(FLOW, "p", {}, queue="has space")
        rt.start(FLOW, "d-1", {"dir": "."}, queue="mail", dedup_id="user-7")
        assert rt.start(FLOW, "d-1", {"dir": "."}, queue="mail", dedup_id="user-7") == "d-1"
        with pytest.raises(WorkflowConflict, match="dedup id 'user-7': workflow 'd-1'"):
            rt.start(FLOW, "d-2", {"dir": "."}, queue="mail", dedup_id="user-7")
        with pytest.raises(WorkflowConflict, match="queue options"):
            rt.start(FLOW, "d-1", {"dir": "."}, queue="other", dedup_id="user-7")
        rt.cancel("d-1")  # not awaiting a worker: a request, as before
        assert rt.describe("d-1")["cancel_requested_at"] is not None


def test_the_queue_cli(dsn, capsys) -> None:
    assert cli.main(["queue", "set", "mail", "--concurrency", "3", "--rate", "10/1m",
                     "--per-key-concurrency", "1", "--dsn", dsn]) == 0  # fmt: skip
    assert "concurrency=3" in capsys.readouterr().out
    assert cli.main(["queue", "list", "--json", "--dsn", dsn]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["concurrency"], row["rate_limit"], row["rate_period_s"]) == (
        "mail", 3, 10, 60.0)  # fmt: skip
    assert cli.main(["queue", "describe", "mail", "--dsn", dsn]) == 0
    assert "10/60s" in capsys.readouterr().out
    assert cli.main(["queue", "describe", "nope", "--dsn", dsn]) == 1
    assert "interlock queue set nope" in capsys.readouterr().err
    for argv, says in [(["set", "default", "--concurrency", "1"], "default queue has no limits"),
                       (["set", "m", "--rate", "ten/1m"], "write e.g. 10/60"),
                       (["set", "m", "--concurrency", "-1"], "at least 1"),
                       (["set", "bad name"], "not valid")]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            cli.main(["queue", *argv, "--dsn", dsn])
        assert exit_.value.code == 2
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["start", FLOW, "x", "--priority", "high", "--dsn", dsn])
    assert exit_.value.code == 2 and "priority" in capsys.readouterr().err
    assert cli.main(["worker", "--module", "flows", "--queue", ",", "--dsn", dsn]) == 2
    assert "at least one queue" in capsys.readouterr().err


def test_two_claimers_cannot_both_take_the_last_slot(dsn) -> None:
    """Deterministic form of the cross-worker race: one claimer holds its claim of the last
    slot uncommitted; a second one must wait for the queue's lock and then find it taken.
    Without the lock it would count the uncommitted claim as free and take a second run."""
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        rt.queue("one", concurrency=1)
        start_all(rt, Path("."), ["last-1", "last-2"], hold=0.01, queue="one")
    params = {"names": [FLOW], "versions": ["1"], "limit": 4, "ttl": 30}
    got: dict[str, list] = {}
    with db.connect(dsn) as first, db.connect(dsn) as second:
        with first.transaction():
            first.execute(db.query("queue_lock"), {"limited": ["one"]})
            # scan 1: last-2 stays unlocked, free for a second claimer to take
            got["first"] = first.execute(db.query("claim_limited"), {
                **params, "owner": "first", "queues": ["one"], "limited": ["one"],
                "scan": 1}).fetchall()  # fmt: skip
            t = threading.Thread(target=lambda: got.__setitem__(
                "second", queueing.Claimer(["one"]).claim(second, {**params, "owner": "second"})))  # fmt: skip
            t.start()
            time.sleep(0.5)
            assert "second" not in got, got  # waiting for the queue's lock
        t.join(10)
    assert len(got["first"]) == 1 and got["second"] == []


@pytest.mark.parametrize("claimer", ["holder", "other"])
def test_a_renewal_in_flight_is_counted_by_the_next_claim(dsn, claimer) -> None:
    """Deterministic form of the matrix's worker_limits/clock_offset failure. W holds the one
    slot of a queue (per worker, or in all); a heartbeat renews W's lease in a transaction
    that is still open when the old lease runs out. Then W, or another worker, claims. The
    claim must wait for the renewal and count the slot as held; reading the lease as it was
    before, it would see it expired, take the second run, and leave two live leases once the
    renewal commits."""
    limit = {"worker_concurrency": 1} if claimer == "holder" else {"concurrency": 1}
    with Runtime(dsn) as rt:
        rt.register(queued_work)
        rt.queue("one", **limit)
        start_all(rt, Path("."), ["held", "next"], hold=0.01, queue="one")
    params = {"names": [FLOW], "versions": ["1"], "limit": 1}
    got: dict[str, list] = {}
    with db.connect(dsn) as w, db.connect(dsn) as beat, db.connect(dsn) as other:
        held = queueing.Claimer(["one"]).claim(w, {**params, "owner": "W", "ttl": 1.0})
        assert [r["id"] for r in held] == ["held"]
        with beat.transaction():
            renewed = beat.execute(db.query("heartbeat"), {
                "ids": ["held"], "epochs": [held[0]["epoch"]], "ttl": 30}).fetchall()  # fmt: skip
            assert renewed[0]["renewed"]
            time.sleep(1.2)  # the old lease runs out while the renewal is uncommitted
            conn, owner = (w, "W") if claimer == "holder" else (other, "V")
            t = threading.Thread(target=lambda: got.__setitem__(
                "claim", queueing.Claimer(["one"]).claim(conn, {
                    **params, "owner": owner, "ttl": 30})))  # fmt: skip
            t.start()
            time.sleep(0.5)
            assert "claim" not in got, got  # waiting for the renewal to commit
        t.join(10)
    assert got["claim"] == []


@pytest.mark.parametrize(("queue", "priority", "says"), [
    ("", None, "queue"), ("a\x00b", None, "queue"), (7, None, "queue"),
    (None, float("nan"), "priority"), (None, 10**12, "priority"), (None, 1.5, "priority"),
    (None, True, "priority"),
])  # fmt: skip
def test_a_childs_queue_and_priority_are_checked_before_anything_is_written(queue, priority,
                                                                           says) -> None:  # fmt: skip
    with pytest.raises(InvalidInput, match=says):
        child_placement(queue, priority)
