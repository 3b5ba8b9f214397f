"""Each check of the fault matrix can fail: fed evidence with the violation it exists to find,
it reports it, and fed the same evidence without it, it reports nothing. No database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from conformance.matrix import checks
from conformance.matrix.plan import load
from interlock_runtime.receipts.verification import ESTABLISHED

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def wf(wid: str, status: str = "completed", **extra) -> dict:
    return {"id": wid, "status": status, "error": None, "result": None, "input": {},
            "created_at": at(0), "updated_at": at(5), **extra}  # fmt: skip


def evidence(*workflows: dict, **extra) -> dict:
    return {"runs": [w["id"] for w in workflows], "workflows": list(workflows), "steps": [],
            "claims": [], "grants": [], "side_log": [], "facts": {}, "expect": None,
            "waits": {}, "fault_window": None, **extra}  # fmt: skip


def test_a_fault_ending_is_a_violation_unless_expected() -> None:
    ev = evidence(wf("a", "failed", error={"type": "OperationalError"}), wf("b"))
    assert checks.no_fault_ends_a_run(ev) and checks.expected_end(ev)
    ev["workflows"][0]["status"] = "timed_out"
    ev["expect"] = "timed_out"
    assert not checks.no_fault_ends_a_run(ev)
    assert checks.expected_end(ev) == ["b ended completed, expected timed_out"]


def test_a_run_left_running_or_missing_is_not_terminal() -> None:
    ev = evidence(wf("a", "running"))
    ev["runs"].append("ghost")
    assert len(checks.all_terminal(ev)) == 2


def test_a_wait_that_did_not_return() -> None:
    ev = evidence(wf("a"), waits={("a", "sync"): "returned", ("a", "async"): "AdminShutdown"})
    assert checks.waits_return(ev) == ["a (async): AdminShutdown"]


def test_a_live_grant_of_an_ended_workflow() -> None:
    ev = evidence(wf("a"), grants=[{"id": "g1", "principal": "workflow:a", "revoked_at": None}])
    assert checks.own_grants_end(ev)
    ev["grants"][0]["revoked_at"] = at(5)
    assert not checks.own_grants_end(ev)


def test_a_step_started_after_its_record_is_a_rerun() -> None:
    step = {"workflow_id": "a", "name": "s1", "kind": "step", "error": None, "output": 1,
            "created_at": at(2)}  # fmt: skip
    ev = evidence(wf("a"), steps=[step],
                  side_log=[{"wf": "a", "step": "s1", "t": at(1).timestamp()}])  # fmt: skip
    assert not checks.recorded_steps_never_rerun(ev)
    ev["side_log"].append({"wf": "a", "step": "s1", "t": at(3).timestamp()})
    assert checks.recorded_steps_never_rerun(ev)


def test_a_result_that_is_not_the_records() -> None:
    step = {"workflow_id": "a", "name": "s1", "kind": "step", "error": None, "output": 1}
    ev = evidence(wf("a", result=[1]), steps=[step])
    assert not checks.results_as_recorded(ev)
    ev["workflows"][0]["result"] = [2]
    assert checks.results_as_recorded(ev)


def test_an_early_timer() -> None:
    steps = [{"workflow_id": "a", "name": "before", "created_at": at(0)},
             {"workflow_id": "a", "name": "after", "created_at": at(1.9)}]  # fmt: skip
    ev = evidence(wf("a"), steps=steps, facts={"seconds": 2.0})
    assert checks.timer_not_early(ev)
    steps[1]["created_at"] = at(2.0)
    assert not checks.timer_not_early(ev)


def test_a_signal_consumed_twice_or_out_of_order() -> None:
    sent = [{"n": 1}, {"n": 2}]
    rows = [{"workflow_id": "a", "payload": {"n": 1}, "consumed_seq": 1},
            {"workflow_id": "a", "payload": {"n": 2}, "consumed_seq": 2}]  # fmt: skip
    ev = evidence(wf("a", result=sent), signals=rows, facts={"sent": {"a": sent}})
    assert not checks.signals_exactly_once(ev)
    rows[0]["consumed_seq"], rows[1]["consumed_seq"] = 2, 1
    assert checks.signals_exactly_once(ev)
    rows[1]["consumed_seq"] = None
    assert checks.signals_exactly_once(ev)


def test_a_refund_applied_twice_missing_or_unclaimed() -> None:
    done = {"status": "COMMITTED", "effect_id": "k"}
    ev = evidence(wf("a", result=done), ledger=[{"key": "k"}], facts={"tier": 2})
    assert not checks.effect_at_most_once(ev)
    ev["ledger"].append({"key": "k"})
    assert checks.effect_at_most_once(ev) == ["key k applied 2 times"]
    ev["ledger"] = [{"key": "j"}]  # COMMITTED without the refund, and one nobody claims
    assert len(checks.effect_at_most_once(ev)) == 2
    ev["facts"]["tier"] = 3  # at tier 3 an AMBIGUOUS send may have landed
    assert checks.effect_at_most_once(ev) == [
        "k: the run says COMMITTED, the target never applied it"
    ]


def test_a_tick_started_twice_and_a_start_after_the_pause() -> None:
    runs = [wf("s1", input={"schedule_id": "ms", "scheduled_at": "t1"}, created_at=at(1)),
            wf("s2", input={"schedule_id": "ms", "scheduled_at": "t1"}, created_at=at(2))]  # fmt: skip
    ev = evidence(*runs, fires=[], fires_after_pause=[], facts={"paused_at": at(1.5).isoformat()})
    assert checks.tick_starts_at_most_once(ev) == ["ms tick t1 started 2 runs"]
    assert len(checks.paused_starts_nothing(ev)) == 1
    runs[1]["input"]["schedule_id"] = "other"  # one tick of two schedules: a run each
    assert not checks.tick_starts_at_most_once(ev)
    assert checks.tick_starts_at_most_once(evidence(fires=[])) == ["the schedule started nothing"]
    late = evidence(runs[0], fires_after_pause=[{"tick": "t1", "workflow_id": "s1"}],
                    facts={"paused_at": at(1.5).isoformat()})  # fmt: skip
    assert checks.paused_starts_nothing(late) == ["fire t1 (s1) committed after the pause"]


def test_a_timeout_long_after_its_deadline() -> None:
    ev = evidence(wf("t", "timed_out", updated_at=at(3.2)), facts={"timeout": 3.0},
                  fault_window=(at(0).timestamp(), at(0.5).timestamp()))  # fmt: skip
    assert not checks.timeout_fires_in_bound(ev)
    ev["workflows"][0]["updated_at"] = at(3 + checks.TIMEOUT_BOUND + 1)
    assert checks.timeout_fires_in_bound(ev)


def test_the_declaration_names_only_what_the_code_has(tmp_path) -> None:
    matrix = load()
    assert set(matrix.invariants("queues")) >= {"QueueConcurrencyBounded", "all_terminal"}
    bad = tmp_path / "faults.yaml"
    text = (load.__globals__["DECLARED"]).read_text()
    bad.write_text(text.replace("[timer_not_early]", "[timer_not_early, no_such_check]"))
    with pytest.raises(ValueError, match="no_such_check"):
        load(bad)


def _claim(wf_id: str, t: float, epoch: int = 1) -> dict:
    return {
        "workflow_id": wf_id,
        "epoch": epoch,
        "claimed_at": at(t),
        "prev_lease_expires_at": None,
    }


def test_starts_past_the_rate_and_two_of_a_key_at_once() -> None:
    rated = [wf(f"rate-{i}", updated_at=at(i + 0.3)) for i in range(3)]
    keyed = [wf("key-0", updated_at=at(1)), wf("key-2", updated_at=at(3))]
    claims = [_claim("rate-0", 0), _claim("rate-1", 0.5), _claim("rate-2", 1.2),
              _claim("key-0", 0), _claim("key-2", 1.5)]  # fmt: skip
    ev = evidence(*rated, *keyed, claims=claims,
                  facts={"rate": 2, "period": 1.0, "dedup_refused": True})  # fmt: skip
    assert not checks.rate_and_keys_bounded(ev)
    claims[2]["claimed_at"] = at(0.8)  # three starts within a second
    claims[4]["claimed_at"] = at(0.5)  # key a: key-2 held while key-0 still is
    ev["facts"]["dedup_refused"] = False
    found = checks.rate_and_keys_bounded(ev)
    assert len(found) == 3, found


def test_overlapping_scheduled_runs() -> None:
    runs = [wf("s1", created_at=at(0), updated_at=at(2.5)), wf("s2", created_at=at(3),
            updated_at=at(5.5))]  # fmt: skip
    ev = evidence(*runs, fires=[{"outcome": "skipped"}])
    assert not checks.runs_never_overlap(ev)
    runs[1]["created_at"] = at(2)
    assert checks.runs_never_overlap(ev)
    assert checks.runs_never_overlap(evidence(*runs[:1], fires=[]))  # one run, nothing skipped


def test_a_query_answer_never_published() -> None:
    steps = [{"workflow_id": "q", "name": "$status", "output": {"phase": 0}},
             {"workflow_id": "q", "name": "$status", "output": {"phase": "done"}}]  # fmt: skip
    ev = evidence(wf("q"), steps=steps, facts={"answers": [("q", {"phase": 0}), ("q", None)]})
    assert not checks.queries_follow_history(ev)
    ev["facts"]["answers"].append(("q", {"phase": 7}))
    assert checks.queries_follow_history(ev) == ["q: answered {'phase': 7}, never published"]


def test_a_receipt_that_disagrees_with_the_ledger_or_is_unsigned() -> None:
    good = {"valid": True, "signed": True, "integrity": ESTABLISHED, "happened": True,
            "happened_once": True, "problems": []}  # fmt: skip
    ev = evidence(ledger=[{"key": "eff_1"}], receipts={"eff_1": dict(good)})
    assert not checks.receipts_verify(ev)
    ev["receipts"]["eff_1"]["happened_once"] = False
    assert checks.receipts_verify(ev) == ["eff_1: applied once at the target, receipt says False"]
    ev["receipts"] = {"eff_1": dict(good, signed=False, integrity="failed")}
    assert len(checks.receipts_verify(ev)) == 1
    ev["receipts"] = {"eff_2": dict(good)}  # the ledger never applied eff_2
    assert checks.receipts_verify(ev) == [
        "eff_1: sent to the target, no receipt",
        "eff_2: never applied at the target, receipt says it happened",
    ]


def test_an_effect_sent_without_a_receipt() -> None:
    """Each key the target saw posted to /refunds has a receipt, applied or not."""
    good = {"valid": True, "signed": True, "integrity": ESTABLISHED, "happened": False,
            "happened_once": False, "problems": []}  # fmt: skip
    post = {"method": "POST", "path": "/refunds", "key": "eff_3"}
    lookup = {"method": "GET", "path": "/refunds", "key": "eff_4"}  # a lookup sends nothing
    ev = evidence(ledger=[], access_log=[post, lookup], receipts={"eff_3": good})
    assert not checks.receipts_verify(ev)
    ev["receipts"] = {"eff_4": good}
    assert checks.receipts_verify(ev) == ["eff_3: sent to the target, no receipt"]


def test_a_tick_made_up_after_a_resume_or_nothing_buffered() -> None:
    runs = [wf("b1", created_at=at(0), updated_at=at(2)), wf("b2", created_at=at(2.1),
            updated_at=at(4))]  # fmt: skip
    buffered = {"outcome": "started", "tick": at(1), "decided_at": at(1), "started_at": at(2.1),
                "workflow_id": "b2"}  # fmt: skip
    facts = {"paused_window": [at(5).isoformat(), at(8).isoformat()]}
    ev = evidence(*runs, fires=[buffered], facts=facts)
    assert not checks.buffered_one_and_not_made_up(ev)
    made_up = {"outcome": "started", "tick": at(6), "decided_at": at(8.1), "started_at": at(8.1),
               "workflow_id": "b3"}  # fmt: skip
    ev["fires"].append(made_up)
    assert len(checks.buffered_one_and_not_made_up(ev)) == 1
    ev["fires"] = [dict(buffered, started_at=at(1))]  # started at once: nothing was buffered
    assert checks.buffered_one_and_not_made_up(ev) == [
        "no tick was buffered although every run outlived the interval"
    ]


def test_a_worker_holding_two_or_an_urgent_run_last() -> None:
    runs = [wf("pri0-1", updated_at=at(1)), wf("pri5-0", updated_at=at(2)),
            wf("pri0-3", updated_at=at(3))]  # fmt: skip
    claims = [dict(_claim("pri0-1", 0), owner="w1"), dict(_claim("pri5-0", 1.5), owner="w1"),
              dict(_claim("pri0-3", 0.2), owner="w2")]  # fmt: skip
    ev = evidence(*runs, claims=claims)
    assert not checks.worker_limit_and_priority(ev)
    claims[1]["claimed_at"] = at(0.5)  # w1 takes pri5-0 while it still holds pri0-1
    assert checks.worker_limit_and_priority(ev) == ["w1: 2 held at once, limit 1"]
    claims[1]["claimed_at"], claims[2]["claimed_at"] = at(1.5), at(1.6)  # urgent one last
    assert len(checks.worker_limit_and_priority(ev)) == 1


def test_a_claim_taken_over_ends_for_its_first_owner() -> None:
    """w1 held pri0-3 (its database went away), w2 took it over at 1.6 once the lease had
    expired at 1.5 and ran it to 3; w1 took pri0-1 at 1.55: one run each at a time (the
    matrix's first reading ran w1's claim of pri0-3 to the run's end, and saw two)."""
    runs = [wf("pri0-3", updated_at=at(3)), wf("pri0-1", updated_at=at(2.5))]
    claims = [dict(_claim("pri0-3", 0), owner="w1"),
              dict(_claim("pri0-3", 1.6, epoch=2), owner="w2", prev_lease_expires_at=at(1.5)),
              dict(_claim("pri0-1", 1.55), owner="w1")]  # fmt: skip
    assert not checks.worker_limit_and_priority(evidence(*runs, claims=claims))


def test_modes_compared_finds_a_pair_whose_modes_end_differently() -> None:
    from conformance.matrix.run import modes_compared

    def cell(mode: str, verdict: str, statuses: list[str]) -> dict:
        return {"feature": "steps", "fault": "sigkill", "mode": mode, "verdict": verdict,
                "statuses": statuses}  # fmt: skip

    same = modes_compared(
        [cell("sync", "PASS", ["completed"]), cell("async", "PASS", ["completed"])]
    )
    assert [p["same"] for p in same] == [True]
    ended = modes_compared([cell("sync", "PASS", ["completed"]), cell("async", "PASS", ["failed"])])
    judged = modes_compared(
        [cell("sync", "PASS", ["completed"]), cell("async", "FAIL", ["completed"])]
    )
    alone = modes_compared([cell("sync", "PASS", ["completed"])])
    assert [p["same"] for p in ended + judged] == [False, False] and alone == []


def _fire(sid: str, tick: datetime, decided: datetime, outcome: str = "started") -> dict:
    return {"schedule_id": sid, "source": "schedule", "tick": tick, "decided_at": decided,
            "outcome": outcome}  # fmt: skip


def _caught_up(overlap: str) -> dict:
    """A cron schedule ('* * * * *') back from an outage since 11:55, caught up at 12:00:10
    with a 150 s window: 11:58, 11:59 and 12:00 decided, the three before dropped; then the
    live tick 12:01 decided on time."""
    since, first = at(-300), at(10)
    outcomes = ["started"] * 3 if overlap == "allow_all" else ["started", "skipped", "skipped"]
    fires = [_fire("c", at(60 * m), first, o) for m, o in zip((-2, -1, 0), outcomes, strict=True)]
    fires.append(_fire("c", at(60), at(60.05)))
    row = {"id": "c", "overlap": overlap, "missed_ticks": 3, "last_tick": at(60)}
    return evidence(fires=fires, schedules=[row],
                    facts={"backlogs": {"c": since.isoformat()}, "window": 150.0})  # fmt: skip


@pytest.mark.parametrize("overlap", ["allow_all", "skip"])
def test_a_catch_up_as_documented(overlap: str) -> None:
    assert checks.catchup_as_documented(_caught_up(overlap)) == []


def test_a_tick_older_than_the_window_caught_up() -> None:
    ev = _caught_up("allow_all")
    ev["fires"].insert(0, _fire("c", at(-180), at(10)))  # 11:57 is 190 s old at 12:00:10
    ev["schedules"][0]["missed_ticks"] = 2
    found = checks.catchup_as_documented(ev)
    assert any("older than the window" in v for v in found), found
    assert any("the catch-up pass at" in v for v in found), found


def test_a_tick_lost_or_miscounted_in_the_catch_up() -> None:
    ev = _caught_up("allow_all")
    del ev["fires"][1]  # 11:59: in the window, never decided, not counted
    found = checks.catchup_as_documented(ev)
    assert any("tick " in v and "lost" in v for v in found), found
    ev = _caught_up("allow_all")
    ev["schedules"][0]["missed_ticks"] = 0  # dropped but not counted as missed
    assert checks.catchup_as_documented(ev) == ["c: missed_ticks 0, but 3 ticks were dropped"]


def test_a_catch_up_that_breaks_its_overlap_policy_or_its_expression() -> None:
    ev = _caught_up("skip")
    ev["fires"][1]["outcome"] = "started"  # skip started two runs in one catch-up
    assert len(checks.catchup_as_documented(ev)) == 1
    ev = _caught_up("allow_all")
    ev["fires"][3]["tick"] = at(61)  # not a whole minute
    assert any("not a tick of its expression" in v for v in checks.catchup_as_documented(ev))
    nothing = _caught_up("skip")
    nothing["fires"] = []
    assert checks.catchup_as_documented(nothing) == ["c: nothing was caught up"]


def _at_the_console() -> dict:
    """Two runs approved at the console by alice, the second's grant revoked there."""
    from interlock_runtime.journal import payload_hash

    shown = {"a": {"amount": 1}, "b": {"amount": 2}}
    grants = [{"id": f"g{w}", "principal": f"workflow:{w}", "payload_hash": payload_hash(p),
               "granted_by": "alice", "revoked_at": at(5) if w == "b" else None,
               "revoked_by": "alice" if w == "b" else None} for w, p in shown.items()]  # fmt: skip
    audit = [{"event": "approve", "operator": "alice", "subject": w, "detail": {"grant_id": f"g{w}"},
              "at": at(1)} for w in shown]  # fmt: skip
    audit.append(
        {"event": "revoke", "operator": "alice", "subject": "gb", "detail": {}, "at": at(5)}
    )
    effects = [{"effect_id": f"e{w}", "grant_id": f"g{w}", "payload_hash": g["payload_hash"]}
               for w, g in zip(shown, grants, strict=True)]  # fmt: skip
    facts = {"operator": "alice", "grants": {"a": "ga", "b": "gb"}, "shown": shown,
             "revokes": [{"grant": "gb", "returned": []}]}  # fmt: skip
    return evidence(wf("a"), wf("b"), grant_rows=grants, audit=audit, effect_rows=effects,
                    facts=facts)  # fmt: skip


def test_console_actions_as_the_operator() -> None:
    assert checks.console_acted_as_operator(_at_the_console()) == []


def test_a_console_grant_of_another_payload_or_operator() -> None:
    ev = _at_the_console()
    ev["grant_rows"][0]["payload_hash"] = "0" * 64  # bound to something the page did not show
    ev["effect_rows"][0]["payload_hash"] = "0" * 64
    assert checks.console_acted_as_operator(ev) == [
        "a: grant ga binds a payload other than the one shown"
    ]
    ev = _at_the_console()
    ev["grant_rows"][1]["granted_by"] = "mallory"
    ev["effect_rows"][1]["payload_hash"] = "1" * 64  # sent a payload the grant does not bind
    assert len(checks.console_acted_as_operator(ev)) == 2


def test_a_console_action_unaudited_or_a_revoke_that_did_not_hold() -> None:
    ev = _at_the_console()
    ev["audit"] = [a for a in ev["audit"] if a["subject"] != "a"]  # approve a not audited
    assert len(checks.console_acted_as_operator(ev)) == 1
    ev = _at_the_console()
    ev["grant_rows"][1].update(revoked_at=None, revoked_by=None)
    ev["audit"].pop()
    assert len(checks.console_acted_as_operator(ev)) == 2
    ev = _at_the_console()
    ev["grant_rows"].append(dict(ev["grant_rows"][0], id="g2"))  # two approvals of one run
    assert len(checks.console_acted_as_operator(ev)) == 1


def test_a_console_revoke_of_a_grant_its_run_had_ended_already() -> None:
    """The run ended first and its end revoked its grant ($runtime): the console's revoke
    finds it ended. A grant the run ended only after the console's revoke was not revoked
    there."""
    ev = _at_the_console()
    ev["grant_rows"][1].update(revoked_at=at(4), revoked_by="$runtime")
    assert checks.console_acted_as_operator(ev) == []
    ev["grant_rows"][1]["revoked_at"] = at(6)  # after the console's revoke at 5
    assert len(checks.console_acted_as_operator(ev)) == 1
