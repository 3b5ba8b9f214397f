"""The mixed sweep (prove/mixed.py, scenarios/MIX.yaml): the event-order oracle on hand-built
ground truth, the plan generator (deterministic, covering, only known actions), and one short
end-to-end run against the runtime with real workers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from interlock_runtime.killpoints import POINTS
from prove import mixed
from prove.scenario import ACTIONS, load_all

T0 = 1_000_000.0


def _note(t: float, what: str, **kw) -> dict:
    return {"t": t, "what": what, **kw}


def _app(rid: str, created: float, amount: int = 2000, key: str = "eff-1") -> dict:
    return {"id": rid, "payment": "pay_881", "amount": amount, "key": key, "created": created,
            "source": "agent", "metadata": {}}  # fmt: skip


def _hand(rid: str, created: float, amount: int = 2000) -> dict:
    return {"id": rid, "payment": "pay_881", "amount": amount, "key": None, "created": created,
            "source": "hand", "metadata": {}}  # fmt: skip


def _post(arrival: float, rid: str | None, status: int = 200, replayed: bool = False) -> dict:
    resp = {"id": rid, "replayed": replayed} if rid else {"error": "x"}
    return {"id": int(arrival * 1000), "method": "POST", "path": "/refunds", "arrival": arrival,
            "start": arrival, "end": arrival + 0.001, "status": status, "response": resp,
            "key": "eff-1"}  # fmt: skip


BASE = [_note(0.1, "start"), _note(0.5, "approve", amount=2000)]


def _judge(ledger, access, notes, system="runtime", tier=1):
    return mixed.judge(ledger, access, notes, T0, system, tier)


def test_one_application_no_event_is_correct_and_none_is_blocked() -> None:
    ok = _judge([_app("re_1", T0 + 1)], [_post(T0 + 1, "re_1")], BASE + [_note(2, "result")])
    assert ok["correct"] and ok["expected_cents"] == [2000] and ok["observed_cents"] == 2000
    none = _judge([], [], BASE + [_note(2, "result")])
    assert not none["correct"] and none["blocked_never_sent"] == 1


def test_two_applications_count_a_duplicate() -> None:
    ledger = [_app("re_1", T0 + 1), _app("re_2", T0 + 3)]
    out = _judge(ledger, [_post(T0 + 1, "re_1"), _post(T0 + 3, "re_2")], BASE)
    assert not out["correct"] and out["duplicate_applications"] == 1
    assert out["observed_cents"] == 4000
    # a tier-1 replay of the same refund is not a second application
    out = _judge([_app("re_1", T0 + 1)], [_post(T0 + 1, "re_1"), _post(T0 + 3, "re_1", 200,
                                                                       True)], BASE)  # fmt: skip
    assert out["correct"] and out["duplicate_applications"] == 0 and out["agent_sends"] == 2


def test_wrong_amount() -> None:
    out = _judge([_app("re_1", T0 + 1, 3000)], [_post(T0 + 1, "re_1")], BASE)
    assert not out["correct"] and out["wrong_amount"] == 1


def test_revoke_before_the_send_makes_an_application_incorrect() -> None:
    notes = BASE + [_note(1.0, "revoke", grant="g", may_still_land=[])]
    out = _judge([_app("re_1", T0 + 2)], [_post(T0 + 2, "re_1")], notes)
    assert not out["correct"] and out["sent_under_revoked_grant"] == 1
    assert out["expected_cents"] == [0]
    # nothing sent after that revoke: correct, and not an availability cost
    out = _judge([], [], notes)
    assert out["correct"] and out["blocked_never_sent"] == 0
    # Temporal: the same order is a violation too (the grants update has no list)
    out = _judge([_app("re_1", T0 + 2)], [_post(T0 + 2, "re_1")],
                 BASE + [_note(1.0, "revoke", grant="g", rows=1)], "temporal_check")  # fmt: skip
    assert not out["correct"] and out["sent_under_revoked_grant"] == 1


def test_revoke_after_the_send_allows_the_refund() -> None:
    notes = BASE + [_note(3.0, "revoke", grant="g", may_still_land=[])]
    out = _judge([_app("re_1", T0 + 2)], [_post(T0 + 2, "re_1")], notes)
    assert out["correct"] and out["expected_cents"] == [2000]


def test_runtime_revoke_listing_the_effect_leaves_both_open() -> None:
    notes = BASE + [_note(1.0, "revoke", grant="g", may_still_land=["eff-1"])]
    landed = _judge([_app("re_1", T0 + 2)], [_post(T0 + 2, "re_1")], notes)
    assert landed["correct"] and landed["expected_cents"] == [0, 2000]
    refused = _judge([], [], notes)
    assert refused["correct"] and refused["blocked_never_sent"] == 0  # revoked: not owed
    # the list exempts only the runtime, and only the listed effect
    other = _judge([_app("re_1", T0 + 2, key="eff-2")], [_post(T0 + 2, "re_1")], notes)
    assert not other["correct"] and other["sent_under_revoked_grant"] == 1


def test_a_revoke_of_nothing_changes_nothing() -> None:
    for note in (_note(0.3, "revoke", grant=None, skipped="no approval yet"),
                 _note(0.3, "revoke", grant="g", rows=0)):  # fmt: skip
        out = _judge([_app("re_1", T0 + 2)], [_post(T0 + 2, "re_1")], BASE + [note])
        assert out["correct"] and out["sent_under_revoked_grant"] == 0


def test_hand_refund_before_the_decision_is_in_the_premises() -> None:
    notes = [_note(0.05, "hand_refund", amount=2000, refund="re_h")] + BASE
    ledger = [_hand("re_h", T0 + 0.05), _app("re_1", T0 + 1)]
    out = _judge(ledger, [_post(T0 + 1, "re_1")], notes)
    assert out["correct"] and out["observed_cents"] == 2000 and out["expected_cents"] == [2000]


def test_hand_refund_after_the_decision_forbids_a_later_send() -> None:
    notes = BASE + [_note(1.2, "hand_refund", amount=1000, refund="re_h")]
    ledger = [_hand("re_h", T0 + 1.2, 1000), _app("re_1", T0 + 2)]
    out = _judge(ledger, [_post(T0 + 2, "re_1")], notes)
    assert not out["correct"] and out["sent_on_changed_premise"] == 1
    assert out["expected_cents"] == [0]
    # the refund landed before the hand refund: allowed, and must be there
    ledger = [_hand("re_h", T0 + 1.2, 1000), _app("re_1", T0 + 0.8)]
    out = _judge(ledger, [_post(T0 + 0.8, "re_1")], notes)
    assert out["correct"] and out["expected_cents"] == [2000]
    # refused after the hand refund: correct, no availability cost
    out = _judge([_hand("re_h", T0 + 1.2, 1000)], [], notes)
    assert out["correct"] and out["blocked_never_sent"] == 0


def test_cancel_before_the_send() -> None:
    notes = BASE + [_note(1.0, "cancel", workflow="wf")]
    out = _judge([_app("re_1", T0 + 2)], [_post(T0 + 2, "re_1")], notes)
    assert not out["correct"] and out["sent_after_cancel"] == 1
    assert _judge([], [], notes)["correct"]
    # cancelled before the decision: no approval, nothing may be sent
    early = [_note(0.1, "start"), _note(0.2, "cancel", workflow="wf")]
    assert _judge([], [], early)["expected_cents"] == [0]


def test_tier3_crash_after_approval_may_be_blocked() -> None:
    notes = BASE + [_note(0.9, "crashed", pid=1), _note(0.9, "sigkill", pid=2),
                    _note(9.0, "result")]  # fmt: skip
    t3 = _judge([], [], notes, tier=3)
    assert t3["correct"] and t3["blocked_never_sent"] == 1 and t3["expected_cents"] == [0, 2000]
    t1 = _judge([], [], notes, tier=1)
    assert not t1["correct"] and t1["blocked_never_sent"] == 1
    # a crash before the approval (an outage while waiting) opens nothing at tier 3
    before = [_note(0.1, "start"), _note(0.3, "sigkill", pid=2), _note(0.5, "approve")]
    assert not _judge([], [], before, tier=3)["correct"]


def test_an_event_after_the_result_does_not_excuse_a_missing_refund() -> None:
    notes = BASE + [_note(2.0, "result"), _note(2.5, "hand_refund", amount=2000, refund="h")]
    out = _judge([_hand("h", T0 + 2.5)], [], notes)
    assert not out["correct"] and out["blocked_never_sent"] == 1


# -- the plan generator ---------------------------------------------------------------------


def test_plans_are_deterministic_per_key_and_shared_by_systems() -> None:
    a = [mixed.make_plan(random.Random(mixed.plan_key(2, 7, i))) for i in range(30)]
    b = [mixed.make_plan(random.Random(mixed.plan_key(2, 7, i))) for i in range(30)]
    assert a == b
    c = [mixed.make_plan(random.Random(mixed.plan_key(2, 8, i))) for i in range(30)]
    assert a != c


def _plans(n: int = 200) -> list[dict]:
    return [mixed.make_plan(random.Random(mixed.plan_key(1 + s % 3, s, 0))) for s in range(n)]


def test_plans_cover_every_event_kind_placement_and_crash() -> None:
    plans = _plans()
    pairs = {(e["kind"], e["placement"]) for p in plans for e in p["events"]}
    for kind, places in mixed.VALID.items():
        for place in places:
            assert (kind, place) in pairs, (kind, place)
    assert {c["kind"] for p in plans for c in p["crashes"]} == set(mixed.CRASH_KINDS)
    assert {len(p["crashes"]) for p in plans} == {0, 1, 2}
    assert {len(p["events"]) for p in plans} >= {0, 1, 2}
    assert {p["duplicate_start"] for p in plans} == {None, *mixed.DUP_PLACEMENTS}


def test_timelines_use_only_known_actions_with_valid_arguments() -> None:
    for plan in _plans():
        for family in ("runtime", "temporal"):
            steps = mixed.timeline(plan, family)
            names = [next(iter(s)) for s in steps]
            for step in steps:
                ((name, args),) = step.items()
                assert name in ACTIONS, name
                assert set(args or {}) <= set(ACTIONS[name][1]), step
                if name == "workers" and args and args.get("kill_at"):
                    assert args["kill_at"] in POINTS
                if name == "sleep":
                    assert args["seconds"] >= 0
            assert names.count("start") == 1 and names.count("wait_result") == 1
            assert names[-1] == "sleep"  # the settle before the ledger is read
            assert names.count("down") == len(plan["crashes"])
            assert names.count("approve") == (0 if plan.get("cancel_early") else 1)
            if "reapprove" in names:  # only while the approval waits unconsumed
                k = names.index("reapprove")
                assert "restart" in names[k:] and names.index("down") < names.index("approve")
                assert names.index("approve") < k < names.index("restart")
            if "revoke" in names and "approve" in names:
                assert names.index("approve") < names.index("revoke")
            if "cancel" in names:
                assert names.index("start") < names.index("cancel") < names.index("wait_result")


def test_the_scenario_file_loads() -> None:
    (scn,) = load_all(["MIX"])
    assert scn.driver == "prove.mixed:mixed"
    # docs/design.md#prove's size: 2040 runs per system in the full sweep; at least 20 per cell quick
    assert scn.seeds["full"] * scn.iterations["full"] * len(scn.tiers) >= 2040
    assert scn.seeds["quick"] * scn.iterations["quick"] >= 20


# -- end to end -----------------------------------------------------------------------------


@pytest.mark.pg
@pytest.mark.slow
def test_two_iterations_against_the_runtime(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from interlock_runtime.testing import admin_dsn, template_database
    from prove import runner
    from prove.driver import DriverRun

    (scn,) = load_all(["MIX"])
    variant = scn.variants[0]
    admin = admin_dsn()
    with template_database(admin) as tpl:
        services = runner.Services(admin, tpl, None, versions={})
        timing = {**variant.timing, "runtime_workers": 1}  # one worker per iteration: quicker
        run = DriverRun(services=services, scn=scn, variant=variant, system="runtime", tier=1,
                        seed=0, iterations=2, run_id="MIX-base-runtime-t1-s0", dir=tmp_path,
                        stack=ExitStack(), timing=timing)  # fmt: skip
        with run.stack:
            out = mixed.mixed(run)
    its = out["iterations"]
    assert out["outcome"]["n"] == 2 and len(its) == 2
    for it in its:
        assert it["harness_error"] is None, it
        rec = json.loads((tmp_path / it["run_record"]).read_text())
        assert rec["identity"]["system"] == "runtime"
        assert it["plan"] == mixed.make_plan(random.Random(mixed.plan_key(1, 0, it["i"])))
    # the oracle saw the sends: at least one iteration sent the refund
    assert sum(it["agent_sends"] for it in its) >= 1, its
    assert all(it["correct"] for it in its), [it["failures"] for it in its]
