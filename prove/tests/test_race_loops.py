"""The race loops (prove/races.py) run for real: a few iterations of S12 and S11r against the
runtime with worker subprocesses, and of S12 against Temporal (a), through prove.runner's
run_driver. Non-vacuity: iterations ran, sends happened, measured offsets exist, and the
sent_under_revoked_grant count agrees with one recomputed here from the run's access log.
The counting rule itself is checked on hand-made access-log rows (a count that can be wrong).
"""

from __future__ import annotations

import dataclasses

import pytest

from interlock_runtime.testing import admin_dsn, template_database
from prove import driver, races, runner
from prove.scenario import load_all
from world.temporal_server import TemporalDevServer


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    admin = admin_dsn()
    with template_database(admin) as tpl:
        yield runner.Services(admin, tpl, None, versions={})


def _run(services, scn_id: str, system: str, tier: int, n: int, out) -> dict:
    (scn,) = load_all([scn_id])
    v = scn.variant("base")
    v = dataclasses.replace(v, params={**v.params, "iterations": n})
    return runner.run_driver(services, scn, v, system, tier, 0, out)


def _recount(rec: dict) -> list[int]:
    """sent_under_revoked_grant per iteration, from the run file's access-log rows alone."""
    out = []
    for it, gt in zip(rec["iterations"], rec["ground_truth"]["iterations"], strict=True):
        listed = set(it["returned"] or [])
        out.append(sum(1 for p in gt["posts"] if p["status"] == 200 and not p["replayed"]
                       and p["created"] > gt["revoke_returned_at"]
                       and p["key"] not in listed))  # fmt: skip
    return out


def test_the_count_reads_the_access_log() -> None:
    post = {"id": 7, "arrival": 10.0, "end": 10.03, "created": 10.025, "status": 200,
            "key": "eff_1", "replayed": False}  # fmt: skip
    ledger = [{"amount": 2000, "source": "api"}]
    # applied after the revoke returned, not listed: counted (Temporal passes no list)
    assert races._judge_revoke(None, [post], ledger, None, 10.01)["sent_under_revoked_grant"] == 1
    assert races._judge_revoke(None, [post], ledger, [], 10.01)["correct"] is False
    # listed by the runtime's revoke: it may still land
    assert races._judge_revoke(None, [post], ledger, ["eff_1"], 10.01)["correct"] is True
    # applied before the revoke returned, a replay, or a refusal: not counted
    assert races._judge_revoke(None, [post], ledger, None, 10.026)["sent_under_revoked_grant"] == 0
    replay = {**post, "replayed": True}
    assert races._judge_revoke(None, [replay], ledger, None, 10.0)["sent_under_revoked_grant"] == 0
    refused = {**post, "status": 400, "created": None}
    assert races._judge_revoke(None, [refused], [], None, 10.0)["sent_under_revoked_grant"] == 0
    # two applications are wrong whatever the revoke did
    two = races._judge_revoke(None, [post], ledger * 2, ["eff_1"], 10.01)
    assert not two["correct"] and two["duplicate_applications"] == 1


def test_revoke_race_runtime(services, tmp_path) -> None:
    rec = _run(services, "S12", "runtime", 1, 8, tmp_path)
    assert rec["error"] is None, rec["faults"]["timeline"][-3:]
    # An iteration whose aim missed the race window (a loaded machine) measured nothing: it
    # is listed with its reason and left out of n, as the report does (prove/driver.py).
    out = rec["outcome"]
    assert len(rec["iterations"]) == 8
    assert out["n"] + len(out["dropped_iterations"]) == 8 and out["n"] >= 4, out
    assert all(d["kind"] in ("missed aim", "lateness") for d in out["dropped_iterations"]), out
    its = driver.counted(rec["iterations"])
    assert all(it["planned_offset"] is not None and abs(it["planned_offset"]) <= 0.02 for it in its)
    # the runtime decided every race one way or the other, and said so in the journal
    assert {it["dispatch_tx"] for it in its} <= {"DISPATCHED", "REFUSED"}
    for it in its:
        assert it["offset_vs_dispatch_tx"] is not None
        if it["sent"]:  # a send after the revoke began is listed, or came before it returned
            assert it["measured_offset"] is not None and it["status"] == "COMMITTED"
        else:
            assert it["status"] == "REFUSED:authority" and it["returned"] == []
    assert [it["sent_under_revoked_grant"] for it in its] == [0] * len(its)
    assert _recount(rec) == [0] * 8
    assert rec["outcome"]["correct"] and rec["outcome"]["prediction_held"] is True
    cal = rec["faults"]["calibration"]
    assert len(cal["warmups_s"]) == races.WARMUPS and 0 < cal["median_delay_s"] < 1


def test_signal_race_runtime(services, tmp_path) -> None:
    rec = _run(services, "S11r", "runtime", 1, 6, tmp_path)
    assert rec["error"] is None, rec["faults"]["timeline"][-3:]
    its = rec["iterations"]
    assert len(its) == 6 and rec["outcome"]["correct"], rec["outcome"]["oracle_failures"]
    for it, gt in zip(its, rec["ground_truth"]["iterations"], strict=True):
        assert it["measured_offset"] is not None and it["wake_latency"] is not None
        assert [r["amount"] for r in gt["ledger"]] == [2000] and len(gt["posts"]) == 1
        assert it["consumed"] == {"signals": 1, "consumed": 1, "wait_steps": 1}
        assert it["status"] == "COMMITTED"


def test_revoke_race_temporal_idem(tmp_path_factory, services, tmp_path) -> None:
    server = TemporalDevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
    try:
        svc = dataclasses.replace(services, temporal=server)
        rec = _run(svc, "S12", "temporal_idem", 1, 5, tmp_path)
    finally:
        server.kill()
    assert rec["error"] is None, rec["faults"]["timeline"][-3:]
    its = rec["iterations"]
    assert len(its) == 5
    # (a) never reads the grant: every iteration sends, once
    assert all(it["sent"] and it["agent_applications"] == 1 for it in its)
    assert all(it["measured_offset"] is not None and it["returned"] is None for it in its)
    counts = [it["sent_under_revoked_grant"] for it in its]
    assert counts == _recount(rec)
    assert rec["outcome"]["sent_under_revoked_grant"] == sum(counts)
