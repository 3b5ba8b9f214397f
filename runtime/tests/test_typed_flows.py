"""Typed values across the journal and queries (issue 21, items 5 and 6), with real worker
processes on a fresh database: dataclasses and pydantic models as input, step results, signal
payloads, statuses and results survive a SIGKILL and a replay from the journal as their own
types; the published status is read while the workflow is parked and no worker runs."""

from __future__ import annotations

import dataclasses
import json
import signal
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
import typed_flows as tf

from conftest import read_jsonl, wait_for
from interlock_runtime import Runtime, cli, db
from interlock_runtime.errors import NotRecordable, RecordedTypeError


@dataclasses.dataclass
class OnlyHere:
    """Defined in the test module, which a worker serving typed_flows never imports."""

    n: int


def _workers(workers, worker_id: str, **env: str):
    return workers(worker_id, module="typed_flows", lease_ttl=1.5, poll=0.1,
                   env={"ILR_WORKER_TAG": worker_id, **env})  # fmt: skip


def _job(tmp_path) -> tf.Job:
    order = tf.Order("o-17", [tf.Line("apple", 2), tf.Line("pear", 1)],
                     datetime(2026, 3, 1, 9, 30, tzinfo=timezone.utc), Decimal("12.30"),
                     gift=tf.Line("card", 1))  # fmt: skip
    return tf.Job(order, str(tmp_path / "ran.jsonl"))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_typed_values_survive_sigkill_and_replay_and_the_parked_status_is_read_without_a_worker(
    dsn, workers, tmp_path, capsys
) -> None:
    job = _job(tmp_path)
    packed = [tf.Line("apple", 2), tf.Line("pear", 1)]
    approval = tf.Approval(by="ann", at=datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc),
                           lines=[tf.Line("apple", 2)], note=None)  # fmt: skip
    with Runtime(dsn) as rt:
        rt.start(tf.typed_order, "ship-1", job)
        stored = rt.describe("ship-1")["input"]
        assert stored["$ilr_type"] == "typed_flows:Job"  # the type is recorded with the input
        # K records `pack` and the WAITING status in one commit, then is SIGKILLed.
        k = _workers(workers, "K", ILR_KILL_AT="step_after_record@1")
        assert k.proc.wait(timeout=30) == -signal.SIGKILL
        waiting = tf.Progress(tf.Stage.WAITING, tuple(packed))
        assert rt.query("ship-1") == waiting  # no worker runs: read from the journal
        # S takes over after the lease, replays `pack` from the journal and parks on the signal.
        s = _workers(workers, "S")
        wait_for(lambda: rt.describe("ship-1")["status"] == "sleeping", 30, "the signal wait")
        s.signal(signal.SIGKILL)
        s.proc.wait(timeout=10)
        before = rt.describe("ship-1")
        status = rt.query("ship-1")
        assert status == waiting and isinstance(status.packed, tuple)
        assert all(type(line) is tf.Line for line in status.packed)
        code, out, err = _cli(capsys, "query", "ship-1", "--json", "--dsn", dsn)
        assert code == 0, err
        shown = json.loads(out)
        assert (shown["type"], shown["workflow_status"]) == ("typed_flows:Progress", "sleeping")
        assert shown["value"]["stage"] == {"$ilr_type": "typed_flows:Stage",
                                           "$ilr_value": "waiting for approval"}  # fmt: skip
        code, out, _ = _cli(capsys, "query", "ship-1", "--dsn", dsn)
        assert code == 0 and "type: typed_flows:Progress" in out and "apple" in out
        after = rt.describe("ship-1")  # reading woke nothing: same epoch, row and claims
        assert (after["status"], after["epoch"], after["available_at"], len(after["claims"])) == (
            before["status"], before["epoch"], before["available_at"], len(before["claims"]))  # fmt: skip
        # A typed signal; S2 consumes it, runs `label` and dies before recording it.
        rt.signal("ship-1", "approve", approval, sender="ann")
        s2 = _workers(workers, "S2", ILR_KILL_AT="step_before_record@1")
        assert s2.proc.wait(timeout=30) == -signal.SIGKILL
        # S3 replays input, `pack`, the status and the signal from the journal, runs `label`.
        _workers(workers, "S3")
        shipment = rt.result("ship-1", timeout=30)
        final = rt.query("ship-1")
        raw = rt.result("ship-1", raw=True)
    label = tf.Label("o-17 approved by ann", date(2026, 3, 2))
    assert shipment == tf.Shipment(job.order, packed, approval, label, shipment.seen)
    assert shipment.seen == {
        "input": "Job", "order": "Order", "placed": "datetime", "total": "Decimal",
        "packed": "list[Line]", "approval": "Approval", "approval.lines": "list[Line]",
        "label": "Label", "printed": "date"}  # fmt: skip
    assert final == tf.Progress(tf.Stage.LABELLED, tuple(packed), approval)
    assert raw["$ilr_type"] == "typed_flows:Shipment"
    ran = [(r["step"], r["worker"]) for r in read_jsonl(tmp_path / "ran.jsonl")]
    assert ran == [("pack", "K"), ("label", "S2"), ("label", "S3")]  # pack never ran again


def test_declared_input_type_refusals_hostile_tags_and_the_console(
    dsn, conn, workers, tmp_path, capsys
) -> None:
    marker = tmp_path / "pwned"
    with Runtime(dsn) as rt:
        rt.register(tf.typed_echo, tf.status_refusal, tf.typed_input_only, tf.typed_child)
        # refused at the call, before anything is written
        for bad, says in (({1, 2}, "sorted list"), (lambda: 1, "not JSON-serializable"),
                          (tf.Line, "is a class"), ({"at": [object()]}, "type object")):  # fmt: skip
            with pytest.raises(NotRecordable, match=says):
                rt.start(tf.typed_input_only, "never", bad)
        assert rt.list() == []
        code, out, err = _cli(capsys, "start", "typed_echo", "e-1", "--input",
                              '{"sku": "fig", "qty": 3}', "--dsn", dsn)  # fmt: skip
        assert code == 0, err
        rt.start(tf.status_refusal, "refuse-1", {})
        rt.start(tf.typed_parent, "parent-1", tf.Line("fig", 1))
        rt.start(tf.typed_input_only, "literal-1", {"$ilr_type": "os:system", "$ilr_value": "x"})
        rt.start(tf.typed_input_only, "elsewhere-1", OnlyHere(1))
        conn.execute("insert into ilr.workflows (id, name, version, input) values "  # past the client
                     "('hostile-1', 'typed_input_only', '1', %s)",
                     (db.jsonb({"$ilr_type": "os:system", "$ilr_value": f"touch {marker}"}),))  # fmt: skip
        with pytest.raises(NotRecordable, match="sorted list"):
            rt.signal("refuse-1", "go", {"s": {3}})
        _workers(workers, "W")
        assert rt.result("e-1", timeout=30) == {"type": "Line", "line": tf.Line("fig", 3)}
        # a child's typed input and result, and a typed input across continue-as-new
        assert rt.result("parent-1", timeout=30) == {
            "label": tf.Label("3 x fig", date(2026, 1, 1)), "label_type": "Label",
            "input": tf.Line("fig", 2)}  # fmt: skip
        refused = rt.result("refuse-1", timeout=30)["refused"]
        assert refused.startswith("NotRecordable: the status['tags']: a value of type set")
        assert rt.query("refuse-1") == tf.Stage.LABELLED
        statuses = [s for s in rt.describe("refuse-1")["steps"] if s["name"] == "$status"]
        assert len(statuses) == 1  # the refused one left nothing behind
        assert rt.result("literal-1", timeout=30) == "dict"  # a user's dict stays a dict
        for wf, says in (("elsewhere-1", "module 'test_typed_flows' is not imported"),
                         ("hostile-1", "not a dataclass, a pydantic model or an Enum")):  # fmt: skip
            wait_for(lambda wf=wf: rt.describe(wf)["status"] == "stuck", 30, f"{wf} stuck")
            error = rt.describe(wf)["error"]
            assert error["type"] == "NonDeterminism" and says in error["called"]["unreadable"]
        assert not marker.exists()
        # a recorded result whose class is gone: a clear error, and the raw JSON still reads
        conn.execute("update ilr.workflows set result = %s where id = 'e-1'",
                     (db.jsonb({"$ilr_type": "typed_flows:Gone", "$ilr_value": {}}),))  # fmt: skip
        with pytest.raises(RecordedTypeError, match="typed_flows:Gone.*restore it"):
            rt.result("e-1")
        assert rt.result("e-1", raw=True)["$ilr_type"] == "typed_flows:Gone"
        code, _, err = _cli(capsys, "query", "no-such-wf", "--dsn", dsn)
        assert code == 1 and "no workflow with id 'no-such-wf'" in err
        code, _, err = _cli(capsys, "query", "bad id!", "--dsn", dsn)
        assert code == 2 and "workflow id" in err
        code, out, _ = _cli(capsys, "query", "e-1", "--dsn", dsn)
        assert code == 0 and "no status published yet" in out
    _console_shows_the_status(dsn, "refuse-1")


def _console_shows_the_status(dsn: str, wf: str) -> None:
    from starlette.testclient import TestClient

    from interlock_runtime.console import auth
    from interlock_runtime.console.app import create_app

    with db.connect(dsn) as c:
        auth.add_operator(c, "ann", "correct horse battery staple")
    with TestClient(create_app(dsn), base_url="http://127.0.0.1") as client:
        client.post("/login", data={"name": "ann", "password": "correct horse battery staple"})
        page = client.get(f"/workflows/{wf}").text
    assert 'id="wf-published"' in page
    assert '<code id="published-type">typed_flows:Stage</code>' in page
    assert "&#34;labelled&#34;" in page or "&quot;labelled&quot;" in page
