"""S14 (versioning) end to end, and its oracle on facts that must fail it.

Why: S14's claims are negative ones (no v2 worker claimed a v1 workflow; nothing of the
changed code ran), which a broken harness satisfies by running nothing. The end-to-end tests
run the real driver (worker subprocesses, the local target, Postgres, a Temporal dev server)
and check that every property was exercised: ten workflows slept on v1 and completed on the
v1 drain worker, the v2 canary ran on a v2 worker, the eleventh workflow reached its sleep on
v1 before the changed code refused it. The oracle tests feed judge() facts of a wrong run.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from interlock_runtime.testing import admin_dsn, template_database
from prove import driver, runner, versioning
from prove.scenario import load_all
from world.temporal_server import TemporalDevServer

FAST = {"sleep_seconds": 3, "changed_sleep_seconds": 3, "observe_seconds": 1.5}


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    admin = admin_dsn()
    with template_database(admin) as tpl:
        server = TemporalDevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
        try:
            yield runner.Services(admin, tpl, server, versions={})
        finally:
            server.kill()


def _run(services: runner.Services, system: str, tmp_path) -> dict:
    (scn,) = load_all(["S14"])
    base = scn.variant("base")
    variant = dataclasses.replace(base, params={**base.params, **FAST})
    return runner.run_driver(services, scn, variant, system, 1, 0, tmp_path)


def _v1_refunds(rec: dict) -> list[dict]:
    refunds = rec["ground_truth"]["ledgers"][0]["refunds"]
    return [r for r in refunds if r["metadata"]["code"] == "v1"]


def test_runtime_pins_drains_and_refuses_the_unpatched_change(services, tmp_path) -> None:
    rec = _run(services, "runtime", tmp_path)
    assert rec["error"] is None
    oc = rec["outcome"]
    assert oc["n"] == 3 and oc["correct"], oc["oracle_failures"]
    assert oc["observed"] == "$11 pinned; drained; stuck" and oc["prediction_held"]
    facts = rec["artifacts"]["rounds"][0]
    # pinned: two v2-only workers ran the canary and claimed none of the ten
    pin = facts["pinned"]
    assert len(pin["v2_workers"]) == 2 and pin["v2_claims_of_v1"] == {}
    assert pin["canary"]["version"] == "2" and pin["canary"]["ran_on_v2"]
    assert set(pin["v1_status_while_v2_only"].values()) <= {"sleeping", "pending"}
    # drain: ten v1 workflows, first claimed by W1 (to the sleep), completed by W2 alone
    drain = facts["drain"]
    assert len(drain["status"]) == 10 and set(drain["status"].values()) == {"completed"}
    assert set(drain["finished_by"].values()) == {"r0-W2-v1"}
    owners = {(c["workflow_id"], c["owner"]) for c in facts["artifacts"]["claim_history"]}
    for wf in drain["status"]:
        assert {o for w, o in owners if w == wf} == {"r0-W1-v1", "r0-W2-v1"}
    v1 = _v1_refunds(rec)
    assert len(v1) == 10 and {r["metadata"]["wf"] for r in v1} == set(drain["status"])
    # changed code: refused at deploy (exit 2), then at replay (stuck, NonDeterminism, seq 1)
    ch = facts["changed_code"]
    assert ch["deploy_time_refusal"]["exit"] == 2
    assert ch["status"] == "stuck" and ch["error"]["type"] == "NonDeterminism"
    assert ch["error"]["recorded"]["name"] == "prepare"
    assert ch["error"]["called"]["name"] == "check_balance"
    assert [s["name"] for s in ch["steps"]] == ["prepare"]  # nothing recorded after
    assert ch["stuck_event"]["worker"] == "r0-C1-changed"
    changed_iter = rec["iterations"][2]
    assert changed_iter["sent_after_change"] == 0 and changed_iter["changed_refunds"] == 0
    # the runtime's own checks ran, VersionPinned and NonDeterminismLoud among them, and held
    assert {"VersionPinned", "NonDeterminismLoud"} <= set(facts["invariants_checked"])
    assert facts["invariants"] == {}


def test_temporal_pins_drains_and_retries_the_nondeterministic_task(services, tmp_path) -> None:
    t0 = time.monotonic()
    rec = _run(services, "temporal_idem", tmp_path)
    assert rec["error"] is None
    oc = rec["outcome"]
    assert oc["n"] == 3 and oc["correct"], oc["oracle_failures"]
    assert oc["observed"] == "$11 pinned; drained; stuck"
    facts = rec["artifacts"]["rounds"][0]
    pin = facts["pinned"]
    assert pin["v2_claims_of_v1"] == {} and pin["canary"]["ran_on_v2"]
    assert pin["canary"]["version"].endswith(".v2")
    (v1_info,) = pin["v1_versioning"].values()
    assert v1_info["behavior"] == "PINNED" and v1_info["version"].endswith(".v1")
    assert set(pin["v1_status_while_v2_only"].values()) == {"RUNNING"}
    assert set(facts["drain"]["status"].values()) == {"COMPLETED"}
    assert all(i.startswith("r0-T2-v1@") for i in facts["drain"]["finished_by"].values())
    assert len(_v1_refunds(rec)) == 10
    ch = facts["changed_code"]
    assert ch["error"]["cause"] == "WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR"
    assert "s14_check_balance" in ch["error"]["message"]
    assert ch["status"] == "RUNNING" and ch["pending_task_attempt"] >= 2
    assert ch["versioning"]["version"].endswith(".v1") and ch["versioning"]["override"]
    assert rec["iterations"][2]["sent_after_change"] == 0
    assert time.monotonic() - t0 < 60


# -- the oracle on wrong runs ---------------------------------------------------------------


class _Rd:
    """A Round's fields judge() reads, with the facts of a correct run."""

    def __init__(self) -> None:
        self.p = dict(versioning.DEFAULTS)
        self.v1_ids = [f"v1-{i}" for i in range(10)]
        self.canary_id, self.changed_id = "canary", "changed"
        self.marks = {"changed_worker_start": 100.0}
        self.facts = {
            "pinned": {"v2_claims_of_v1": {}, "canary": {"ran_on_v2": True},
                       "v1_status_while_v2_only": dict.fromkeys(self.v1_ids, "sleeping")},
            "drain": {"status": dict.fromkeys(self.v1_ids, "completed")},
            "changed_code": {"reached_sleep_on_v1": True, "loud": True, "status": "stuck",
                             "error": {"type": "NonDeterminism"},
                             "deploy_time_refusal": {"exit": 2}},
            "invariants": {},
        }  # fmt: skip

    def ledger(self) -> list[dict]:
        rows = [{"wf": wf, "code": "v1"} for wf in self.v1_ids] + [{"wf": "canary", "code": "v2"}]
        return [{"amount": 100, "metadata": m} for m in rows]


def _judge(rd: _Rd, ledger: list[dict] | None = None, access: list[dict] | None = None):
    its = versioning.judge(rd, rd.ledger() if ledger is None else ledger, access or [])
    return {it["property"]: it for it in its}


def test_the_oracle_accepts_a_correct_run() -> None:
    its = _judge(_Rd())
    assert all(it["correct"] for it in its.values())
    assert versioning.status_word(list(its.values())) == "pinned; drained; stuck"
    assert driver.summarize(list(its.values()))["correct"]


def test_the_oracle_fails_a_v2_claim_and_a_vacuous_v2_window() -> None:
    rd = _Rd()
    rd.facts["pinned"]["v2_claims_of_v1"] = {"v1-3": ["V2a"]}
    assert not _judge(rd)["pinned"]["correct"]
    rd = _Rd()
    ledger = [r for r in rd.ledger() if r["metadata"]["wf"] != "canary"]
    assert "vacuous" in _judge(rd, ledger)["pinned"]["failures"][0]


def test_the_oracle_fails_a_duplicate_a_missing_and_a_wrong_code_refund() -> None:
    rd = _Rd()
    ledger = rd.ledger()
    ledger[0] = {"amount": 100, "metadata": {"wf": "v1-1", "code": "v1"}}  # v1-0 none, v1-1 two
    ledger[2]["metadata"]["code"] = "v2"
    drain = _judge(rd, ledger)["drain"]
    assert not drain["correct"]
    assert (drain["duplicate_applications"], drain["blocked_never_sent"],
            drain["wrong_amount"]) == (1, 1, 1)  # fmt: skip


def test_the_oracle_fails_anything_sent_after_the_change_or_a_quiet_change() -> None:
    rd = _Rd()
    late = [{"arrival": 101.0, "method": "GET", "path": "/payments/pay_881", "worker": None},
            {"arrival": 101.5, "method": "GET", "path": "/admin/ledger", "worker": None}]  # fmt: skip
    ch = _judge(rd, access=late)["changed_code"]
    assert not ch["correct"] and ch["sent_after_change"] == 1  # the harness's reads excluded
    rd = _Rd()
    ledger = rd.ledger() + [{"amount": 200, "metadata": {"wf": "changed", "code": "v1-changed"}}]
    assert not _judge(rd, ledger)["changed_code"]["correct"]
    rd = _Rd()
    rd.facts["changed_code"].update(loud=False, status="completed")
    assert not _judge(rd)["changed_code"]["correct"]
    rd = _Rd()
    rd.facts["changed_code"]["deploy_time_refusal"] = {"exit": 0}
    assert not _judge(rd)["changed_code"]["correct"]
