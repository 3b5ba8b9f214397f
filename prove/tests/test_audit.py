"""The can-prove audit (prove/audit.py) on small run records built here: a real signed receipt
for the runtime (sealed with interlock_runtime.journal, signed with the runner's key), a
Temporal history plus attempt log, and a ledger and access log as ground truth. No network, no
database, no .data files."""

from __future__ import annotations

import copy

import pytest

from interlock_runtime import journal, receipts
from prove import audit

T0 = 1_800_000_000.0
PAYLOAD = {"amount": 2000, "payment": "pay_881"}
PREMISES = {"eligible": True, "payment": "pay_881", "refunded_by_others": 0}
GRANT = "grant_test"
EFFECT = "eff_test"


def _grant() -> dict:
    return {
        "action": "refund",
        "expires_at": None,
        "grant_id": GRANT,
        "granted_by": "alice",
        "constraints": None,
        "payload_hash": journal.payload_hash(PAYLOAD),
        "principal": "workflow:wf-1",
        "revoked": None,
    }


def _bundle(*kinds: str) -> dict:
    """A signed receipt of one effect whose journal holds `kinds` in order."""
    bodies = {
        "PROPOSED": {
            "agent": "prove_refund",
            "effect": PAYLOAD,
            "lease": GRANT,
            "premises": PREMISES,
            "decision": {"seq": 1},
        },
        "AUTHORIZED": {"lease": GRANT},
        "DISPATCHED": {
            "effect": PAYLOAD,
            "lease": GRANT,
            "premises": PREMISES,
            "by": {"epoch": 1, "workflow_id": "wf-1"},
            "checks": {"lease": _grant(), "lease_live": True, "violations": []},
        },
        "COMMITTED": {"result": {"id": "re_000001", "amount": 2000}},
        "AMBIGUOUS": {"reason": "tier 3: no lookup"},
    }
    entries: list[dict] = []
    for i, kind in enumerate(kinds):
        entry = {"ts": T0 + 1 + i * 0.01, "kind": kind, "effect_id": EFFECT, **bodies[kind]}
        entries.append(journal.seal(entry, journal.last_hash(entries)))
    return receipts.bundle(entries, EFFECT, key=audit.RECEIPT_KEY)


def _post(at: float, rid: str = "re_000001", replayed: bool = False) -> dict:
    return {
        "method": "POST",
        "path": "/refunds",
        "arrival": at,
        "start": at,
        "end": at + 0.002,
        "status": 200,
        "key": EFFECT,
        "payload": PAYLOAD,
        "response": {"id": rid, "amount": 2000, "replayed": replayed},
    }


def _record(system: str, tier: int = 1, applications: int = 1, **extra: object) -> dict:
    """A run record with `applications` agent refunds in the ledger, each POSTed at T0 + 2."""
    ledger = [
        {
            "id": f"re_{i:06d}",
            "amount": 2000,
            "created": T0 + 2 + i,
            "source": "api",
            "key": EFFECT,
            "payment": "pay_881",
        }
        for i in range(1, applications + 1)
    ]
    rec = {
        "identity": {
            "run_id": f"SX-base-{system}-t{tier}-s0",
            "scenario": "SX",
            "variant": "base",
            "system": system,
            "tier": tier,
            "seed": 0,
            "api": "local",
            "workflow_id": "wf-1",
        },
        "error": None,
        "outcome": {"harness_error": None},
        "timings": {"started_at": T0},
        "timing_constants": {"send_timeout": 3.0},
        "faults": {"timeline": [{"t": 0.5, "what": "approve", "amount": 2000}]},
        "model_calls": [{"arrival": T0 + 0.2}],
        "ground_truth": {
            "ledger": ledger,
            "access_log": [_post(T0 + 1 + i, r["id"]) for i, r in enumerate(ledger, 1)],
        },
        "artifacts": {},
    }
    rec.update(extra)
    return rec


def _runtime(tier: int = 1, applications: int = 1, kinds: tuple = ()) -> dict:
    kinds = kinds or ("PROPOSED", "AUTHORIZED", "DISPATCHED", "COMMITTED")
    rec = _record("runtime", tier, applications)
    rec["artifacts"] = {
        "describe": {"effects": [{"effect_id": EFFECT, "state": "committed"}], "result": {}},
        "effects": [{"effect_id": EFFECT}],
        "receipt": _bundle(*kinds),
    }
    return rec


# --- the runtime ----------------------------------------------------------------------------


def test_a_correct_committed_runtime_run_scores_five_with_no_false_claim() -> None:
    out = audit.audit_run(_runtime())
    assert out["answers"] == {"P1": "yes", "P2": "yes", "P3": "yes", "P4": "yes", "P5": "yes"}
    assert out["truth"] == dict.fromkeys(audit.QUESTIONS, "yes")
    assert out["score"] == 5.0 and out["false_claims"] == 0
    assert set(out["why"]) == set(audit.QUESTIONS)


def test_p5_flips_one_byte_of_a_real_bundle_and_verify_rejects_the_copy() -> None:
    bundle = _bundle("PROPOSED", "AUTHORIZED", "DISPATCHED", "COMMITTED")
    t = audit.tamper_check(bundle, "seed-1")
    # The control: the same serialization, not flipped, verifies valid, so a rejection of the
    # flipped copy is the flip's doing and not the round trip's.
    assert t["control_valid"] is True
    assert t["detected"] is True and t["before"] != t["after"]
    # The flipped copy still parses (the tamper is in a string value, not in the syntax).
    data = bytearray(receipts.dumps(bundle).encode())
    assert chr(data[t["offset"]]) == t["before"]
    data[t["offset"]] ^= 0x01
    flipped = receipts.loads(bytes(data))
    assert receipts.verify(flipped, audit.RECEIPT_KEY)["valid"] is False
    # Reproducible: the same seed flips the same byte.
    assert audit.tamper_check(bundle, "seed-1")["offset"] == t["offset"]


def test_p5_counts_a_false_claim_when_the_verifier_accepts_the_flipped_copy(monkeypatch) -> None:
    def accepting(bundle: dict, seed: str) -> dict:
        return {
            "control_valid": True,
            "detected": False,
            "offset": 0,
            "before": "a",
            "after": "`",
            "problems": [],
        }

    monkeypatch.setattr(audit, "tamper_check", accepting)
    out = audit.audit_run(_runtime())
    assert out["answers"]["P5"] == "no" and out["scores"]["P5"] == 0
    assert out["false_claims"] == 1


def test_a_record_claiming_once_against_two_applications_is_a_false_claim() -> None:
    out = audit.audit_run(_runtime(applications=2))
    assert out["answers"]["P2"] == "yes" and out["truth"]["P2"] == "no"
    assert out["scores"]["P2"] == 0
    assert out["false_claims"] == 1
    assert out["score"] == 4.0


def test_tier3_ambiguity_is_unknowable_by_design_only_when_the_answer_was_lost() -> None:
    kinds = ("PROPOSED", "AUTHORIZED", "DISPATCHED", "AMBIGUOUS")
    rec = _runtime(tier=3, kinds=kinds)
    rec["faults"]["timeline"].append({"t": 1.2, "what": "crashed", "kill_at": "effect_after_send"})
    out = audit.audit_run(rec)
    assert out["answers"]["P1"] == "unknown" and out["unknowable"]["P1"] is True
    assert out["scores"]["P1"] == 1 and out["score"] == 5.0 and out["false_claims"] == 0
    # The same "unknown" where the target has lookups (tier 1) is not unknowable by design.
    rec = _runtime(tier=1, kinds=kinds)
    rec["faults"]["timeline"].append({"t": 1.2, "what": "crashed", "kill_at": "effect_after_send"})
    out = audit.audit_run(rec)
    assert out["answers"]["P1"] == "unknown" and out["scores"]["P1"] == 0


def test_a_sender_frozen_after_its_dispatch_at_tier3_is_unknowable_by_design() -> None:
    """S13: SIGSTOP at effect_after_dispatch, nothing applied, the runtime says AMBIGUOUS."""
    kinds = ("PROPOSED", "AUTHORIZED", "DISPATCHED", "AMBIGUOUS")
    rec = _runtime(tier=3, applications=0, kinds=kinds)
    out = audit.audit_run(rec)
    assert out["answers"]["P1"] == "unknown" and out["scores"]["P1"] == 0  # nothing was lost
    rec["faults"]["timeline"].append({"t": 1.1, "what": "stopped",
                                      "stop_at": "effect_after_dispatch"})  # fmt: skip
    out = audit.audit_run(rec)
    assert out["unknowable"]["P1"] is True and out["scores"]["P1"] == 1


def test_a_receipt_that_does_not_verify_proves_nothing() -> None:
    rec = _runtime()
    rec["artifacts"]["receipt"]["entries"][2]["effect"]["amount"] = 9999  # tampered on disk
    out = audit.audit_run(rec)
    assert set(out["answers"].values()) == {"unknown"}
    assert out["score"] == 0.0 and out["false_claims"] == 0


def test_a_send_after_the_revoke_makes_p3_truth_no_unless_the_revoke_named_it() -> None:
    rec = _runtime()
    rec["faults"]["timeline"].append({"t": 0.8, "what": "revoke", "may_still_land": []})
    out = audit.audit_run(rec)
    assert out["truth"]["P3"] == "no" and out["answers"]["P3"] == "yes"
    assert out["false_claims"] == 1
    rec["faults"]["timeline"][-1]["may_still_land"] = [EFFECT]
    assert audit.audit_run(rec)["truth"]["P3"] == "yes"


def test_an_application_after_a_hand_refund_makes_p4_truth_no() -> None:
    rec = _runtime()
    rec["ground_truth"]["ledger"].append(
        {"id": "re_hand", "amount": 2000, "created": T0 + 1.5, "source": "hand"}
    )
    assert audit.audit_run(rec)["truth"]["P4"] == "no"
    # A hand refund before the decision is part of the premises the decision saw.
    rec["ground_truth"]["ledger"][-1]["created"] = T0 + 0.1
    assert audit.audit_run(rec)["truth"]["P4"] == "yes"


def test_an_effect_without_a_receipt_in_the_run_file_is_not_audited() -> None:
    rec = _runtime()
    del rec["artifacts"]["receipt"]
    out = audit.audit_run(rec)
    assert out["score"] is None and "no receipt" in out["why"]["run"]


def test_no_effect_at_all_is_the_runtime_record_that_nothing_was_sent() -> None:
    rec = _record("runtime", applications=0)
    rec["artifacts"] = {"describe": {"effects": [], "result": {}}, "effects": []}
    out = audit.audit_run(rec)
    assert out["answers"]["P1"] == "no" and out["scores"]["P1"] == 1
    assert out["answers"]["P5"] == "no" and out["false_claims"] == 0


# --- Temporal -------------------------------------------------------------------------------


def _history(attempt: int, close: str = "COMPLETED", timed_out: bool = True) -> dict:
    started: dict = {"attempt": attempt, "scheduledEventId": "15"}
    if timed_out and attempt > 1:
        started["lastFailure"] = {
            "message": "activity StartToClose timeout",
            "timeoutFailureInfo": {"timeoutType": "START_TO_CLOSE"},
        }
    return {
        "events": [
            {
                "eventId": "15",
                "eventType": "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED",
                "activityTaskScheduledEventAttributes": {
                    "activityId": "2",
                    "activityType": {"name": "refund"},
                },
            },
            {
                "eventId": "16",
                "eventType": "EVENT_TYPE_ACTIVITY_TASK_STARTED",
                "activityTaskStartedEventAttributes": started,
            },
            {
                "eventId": "17",
                "eventType": f"EVENT_TYPE_ACTIVITY_TASK_{close}",
                f"activityTask{close.title()}EventAttributes": {"scheduledEventId": "15"},
            },
        ]
    }


def _attempt(n: int, phases: list[str], response: dict | None = None, **more: object) -> dict:
    return {
        "activity": "refund",
        "activity_id": "2",
        "attempt": n,
        "run_id": "r1",
        "phases": phases,
        "response": response,
        "outcome": "returned" if "end" in phases else "incomplete",
        **more,
    }


def _temporal(attempts: list[dict], history: dict, applications: int = 1) -> dict:
    rec = _record("temporal_idem", 1, applications)
    rec["artifacts"] = {"history": history, "attempts": attempts, "status": "COMPLETED"}
    return rec


def test_temporal_retry_after_a_timeout_cannot_prove_at_most_once() -> None:
    attempts = [
        _attempt(1, ["begin", "send"]),  # killed after the send: no answer recorded
        _attempt(2, ["begin", "send", "response", "end"], {"id": "re_000001", "replayed": False}),
    ]
    out = audit.audit_run(_temporal(attempts, _history(2)))
    assert out["answers"]["P1"] == "yes" and out["scores"]["P1"] == 1
    assert out["answers"]["P2"] == "unknown"
    assert "timeout" in out["why"]["P2"]
    assert {q: out["scores"][q] for q in ("P2", "P3", "P4", "P5")} == dict.fromkeys(
        ("P2", "P3", "P4", "P5"), 0
    )
    assert out["answers"]["P3"] == out["answers"]["P4"] == "unknown"
    assert out["answers"]["P5"] == "no"
    assert out["score"] == 1.0 and out["false_claims"] == 0  # "no" on P5 is an admission


def test_temporal_attempt_log_that_proves_two_applications_answers_p2_no() -> None:
    attempts = [
        _attempt(1, ["begin", "send", "response"], {"id": "re_000001", "replayed": False}),
        _attempt(2, ["begin", "send", "response", "end"], {"id": "re_000002", "replayed": False}),
    ]
    out = audit.audit_run(_temporal(attempts, _history(2), applications=2))
    assert out["answers"]["P2"] == "no" and out["scores"]["P2"] == 1


def test_temporal_replayed_retry_proves_at_most_once() -> None:
    attempts = [
        _attempt(1, ["begin", "send", "response"], {"id": "re_000001", "replayed": False}),
        _attempt(2, ["begin", "send", "response", "end"], {"id": "re_000001", "replayed": True}),
    ]
    out = audit.audit_run(_temporal(attempts, _history(2)))
    assert out["answers"]["P2"] == "yes" and out["scores"]["P2"] == 1


def test_temporal_failed_activity_after_an_unanswered_send_is_not_a_no() -> None:
    attempts = [
        _attempt(1, ["begin", "send"]),
        _attempt(2, ["begin", "end"], error="ApplicationError: not authorized"),
    ]
    out = audit.audit_run(_temporal(attempts, _history(2, close="FAILED"), applications=0))
    assert out["answers"]["P1"] == "unknown"
    # Without the unanswered send, the failed activity does prove nothing was applied.
    out = audit.audit_run(_temporal(attempts[1:], _history(1, close="FAILED"), applications=0))
    assert out["answers"]["P1"] == "no" and out["scores"]["P1"] == 1


# --- harness errors and summaries -----------------------------------------------------------


def test_a_harness_error_is_not_audited_and_not_counted() -> None:
    bad = _runtime()
    bad["error"] = "RunnerError: the Temporal dev server is not running"
    out = audit.audit_run(bad)
    assert out["score"] is None and out["false_claims"] == 0
    summary = audit.cell_summary([out, audit.audit_run(_runtime(applications=2))])
    assert summary == {
        "can_prove_mean": 4.0,
        "false_claims": 1,
        "false_claims_per_1000": 1000.0,
        "n_audited": 1,
    }
    assert audit.cell_summary([out])["can_prove_mean"] is None


def test_audit_runs_groups_by_cell_and_system() -> None:
    recs = [_runtime(), _runtime(), _temporal([], _history(1, timed_out=False), applications=0)]
    out = audit.audit_runs(copy.deepcopy(recs))
    assert len(out["audits"]) == 3
    assert out["cells"]["SX/base/runtime/t1"]["n_audited"] == 2
    assert out["systems"]["runtime"]["can_prove_mean"] == 5.0
    assert "temporal_idem" in out["systems"]


@pytest.mark.parametrize("system", ["runtime", "temporal_idem"])
def test_cli_prints_a_line_per_run_and_the_tables(tmp_path, capsys, system: str) -> None:
    import json

    rec = _runtime() if system == "runtime" else _temporal([], _history(1, timed_out=False))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(rec))
    assert audit.main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert rec["identity"]["run_id"] in printed and f"SX/base/{system}/t1" in printed
