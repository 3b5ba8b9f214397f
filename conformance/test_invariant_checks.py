"""Each invariant check must be able to fail: synthetic violating states are caught.

The states are written with plain SQL (bypassing the runtime), which is exactly what the
checks exist to catch if the runtime ever did it. The positive side (checks hold over real
runs) is test_invariants_hold.py. No execution mode here: both workers write the same tables,
and the fault matrix runs every check over real runs of the sync and the asyncio worker
(conformance/test_matrix.py, docs/matrix.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from conformance.invariants import INVARIANTS, Evidence, MissingEvidence, check_all
from interlock_runtime import db, journal


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with db.connect(dsn) as c:
        yield c


T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seed(conn: psycopg.Connection, wf: str = "wf", status: str = "completed") -> None:
    conn.execute("insert into ilr.deployments values ('refund', '1', 'sha', now(), null) "
                 "on conflict do nothing")  # fmt: skip
    conn.execute("insert into ilr.workflows (id, name, version, input, status, epoch, created_at) "
                 "values (%s, 'refund', '1', '{}', %s, 2, %s)", (wf, status, at(0)))  # fmt: skip


def claim(conn, wf: str, epoch: int, claimed: float, prev: str = "pending",
          prev_lease: float | None = None, owner: str = "w1") -> None:  # fmt: skip
    conn.execute("insert into ilr.claims values (%s, %s, %s, '1', %s, %s, %s)",
                 (wf, epoch, owner, at(claimed), prev,
                  at(prev_lease) if prev_lease is not None else None))  # fmt: skip


def step(conn, wf: str, seq: int, epoch: int, created: float, kind: str = "step",
         output=None, fingerprint=None) -> None:  # fmt: skip
    conn.execute("insert into ilr.steps (workflow_id, seq, name, kind, fingerprint, output, epoch, "
                 "created_at) values (%s, %s, %s, %s, %s, %s, %s, %s)",
                 (wf, seq, f"s{seq}", kind, fingerprint, json.dumps(output), epoch, at(created)))  # fmt: skip


def effect(conn, eid: str = "eff_1", tier: int = 2, state: str = "committed", amount: int = 2000,
           grant: str | None = "g1", wf: str = "wf") -> None:  # fmt: skip
    payload = {"amount": amount}
    if grant is not None:
        conn.execute("insert into ilr.grants (id, principal, action, granted_by) values "
                     "(%s, 'agent', 'refund', 'policy') on conflict do nothing", (grant,))  # fmt: skip
    conn.execute("insert into ilr.effects (effect_id, workflow_id, target, tier, payload, "
                 "payload_hash, state, grant_id, dispatch_workflow_id, dispatch_epoch, sends) "
                 "values (%s, %s, 't', %s, %s, %s, %s, %s, %s, 1, 1)",
                 (eid, wf, tier, json.dumps(payload), journal.payload_hash(payload), state, grant,
                  wf))  # fmt: skip


def grant(conn, gid: str = "g1", revoked: float | None = None, expires: float | None = None,
          action: str | None = "refund", constraints: dict | None = None,
          approves: dict | None = None, principal: str = "agent") -> None:  # fmt: skip
    conn.execute("insert into ilr.grants (id, principal, action, granted_by, revoked_at, "
                 "expires_at, constraints, payload_hash) "
                 "values (%s, %s, %s, 'policy', %s, %s, %s, %s) "
                 "on conflict (id) do update set revoked_at = excluded.revoked_at, "
                 "expires_at = excluded.expires_at, action = excluded.action, "
                 "constraints = excluded.constraints, payload_hash = excluded.payload_hash, "
                 "principal = excluded.principal",
                 (gid, principal, action, at(revoked) if revoked is not None else None,
                  at(expires) if expires is not None else None,
                  json.dumps(constraints) if constraints is not None else None,
                  journal.payload_hash(approves) if approves is not None else None))  # fmt: skip


def timing(conn, eid: str = "eff_1", deadline: float = 0.0, settle: float = 0.0,
           sends: int = 1) -> None:  # fmt: skip
    """The effect row's send deadline (of its latest send), settle margin and send count."""
    conn.execute("update ilr.effects set send_deadline = %s, settle_margin = make_interval("
                 "secs => %s), sends = %s where effect_id = %s",
                 (at(deadline), settle, sends, eid))  # fmt: skip


def post(arrival: float, end: float | None, key: str = "eff_1", amount: int = 2000) -> dict:
    """One refund request in the target's access log, at T0-relative times."""
    return {"method": "POST", "path": "/refunds", "key": key, "arrival": at(arrival).timestamp(),
            "end": at(end).timestamp() if end is not None else None,
            "payload": json.dumps({"amount": amount})}  # fmt: skip


def resend(rechecked_at: float, **extra) -> dict:
    """A tier-1 resend's COMMITTED whose recorded re-check says the grant was fine."""
    rc = {"lease_live": True, "violations": [], "ts": at(rechecked_at).timestamp(), **extra}
    return {"kind": "COMMITTED", "via": "retry-idempotent", "result": {}, "rechecked": rc}


def chain(conn, eid: str, entries: list[dict]) -> None:
    prev = None
    for i, e in enumerate(entries):
        sealed = journal.seal({"ts": at(1 + i).timestamp(), "effect_id": eid, **e}, prev)
        conn.execute("insert into ilr.journal (effect_id, kind, body, prev, hash) values (%s, %s, %s, %s, %s)",
                     (eid, e["kind"], journal.body_text(sealed), prev, sealed["hash"]))  # fmt: skip
        prev = sealed["hash"]


def live_checks(violations=None, revoked=None) -> dict:
    return {"lease_live": revoked is None, "violations": violations or [],
            "lease": {"grant_id": "g1", "principal": "agent", "action": "refund", "constraints": None,
                      "payload_hash": None, "expires_at": None, "revoked": revoked,
                      "granted_by": "policy"}}  # fmt: skip


def dispatched(epoch: int = 1, amount: int = 2000, **checks) -> dict:
    return {
        "kind": "DISPATCHED",
        "effect": {"amount": amount},
        "lease": "g1",
        "premises": {},
        "checks": live_checks(**checks),
        "by": {"workflow_id": "wf", "epoch": epoch},
    }


# The target every synthetic effect went to, as Evidence.targets holds it, and its ledger
# holding one application of eff_1 (payment p).
TIER2 = {"http://t": {"tier": 2, "lookup": True}}
LANDED = [{"key": "eff_1", "amount": 2000, "payment": "p", "created": at(1.5).timestamp()}]


def run(conn, name: str, **evidence) -> list[str]:
    return INVARIANTS[name](Evidence(conn, **evidence))


def test_takeover_before_expiry_is_caught(conn) -> None:
    seed(conn)
    claim(conn, "wf", 1, 0)
    claim(conn, "wf", 2, 3, prev="running", prev_lease=5)
    assert run(conn, "TakeoverOnlyAfterExpiry") and run(conn, "LeaseMutex")


def test_write_outside_tenure_is_caught(conn) -> None:
    seed(conn)
    claim(conn, "wf", 1, 0)
    claim(conn, "wf", 2, 10, prev="running", prev_lease=9)
    step(conn, "wf", 1, 1, 12)  # epoch 1 wrote after epoch 2 claimed: a zombie write
    assert run(conn, "FencedWrites")
    assert run(conn, "TakeoverOnlyAfterExpiry") == []


def test_rerun_after_complete_is_caught_from_worker_events(conn) -> None:
    seed(conn)
    claim(conn, "wf", 1, 0)
    step(conn, "wf", 1, 1, 2)
    late_start = [
        {"event": "step_started", "wf": "wf", "seq": 1, "epoch": 1, "ts": at(3).timestamp()}
    ]
    assert run(conn, "NoRerunAfterComplete", events=late_start)
    with pytest.raises(MissingEvidence):
        run(conn, "NoRerunAfterComplete")


def test_double_application_and_overlapping_sends_are_caught(conn) -> None:
    seed(conn)
    effect(conn)
    ledger = [{"key": "eff_1", "amount": 2000}, {"key": "eff_1", "amount": 2000}]
    log = [{"method": "POST", "path": "/refunds", "key": "eff_1", "arrival": 1.0, "end": 3.0,
            "payload": json.dumps({"amount": 2000})},
           {"method": "POST", "path": "/refunds", "key": "eff_1", "arrival": 2.0, "end": 4.0,
            "payload": json.dumps({"amount": 2000})}]  # fmt: skip
    assert run(conn, "EffectAtMostOnceTier12", ledger=ledger, targets=TIER2)
    assert run(conn, "NoOverlappingSends", access_log=log)
    assert run(conn, "SendRequiresLiveClaim", access_log=log)  # 2 requests, 1 authorized send


def test_committed_without_application_is_caught(conn) -> None:
    seed(conn)
    effect(conn)
    assert run(conn, "CommittedImpliesApplied", ledger=[])
    assert run(conn, "CommittedImpliesApplied", ledger=[{"key": "eff_1", "amount": 2000}]) == []


def test_sends_under_revoked_grant_are_caught(conn) -> None:
    seed(conn)
    grant(conn, revoked=0.5)
    effect(conn, state="dispatched")
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, {"kind": "AUTHORIZED", "lease": "g1"},
                          dispatched(violations=["refunded_by_others changed: 0 -> 2000"])])  # fmt: skip
    assert run(conn, "RevokeLinearizable", revokes=[{"grant": "g1", "returned": ["eff_1"]}])
    assert run(conn, "NoSendUnderRevokedGrant")


def test_resend_without_recheck_and_second_commit_are_caught(conn) -> None:
    seed(conn)
    grant(conn, revoked=2.5)  # after the DISPATCHED at t=2, before the resend at t=3
    effect(conn, tier=1)
    claim(conn, "wf", 1, 0)
    conn.execute("drop index ilr.one_commit")  # what the partial index exists to prevent
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "COMMITTED", "via": "retry-idempotent", "result": {},
                           "rechecked": {"lease_live": False, "violations": []}},
                          {"kind": "COMMITTED", "result": {}}])  # fmt: skip
    assert run(conn, "RecoveryRechecks", ledger=[], access_log=[])
    assert run(conn, "AtMostOneCommit")


def test_unbound_payload_and_send_after_cancel_are_caught(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn, amount=2000)
    claim(conn, "wf", 1, 0)
    conn.execute("update ilr.workflows set cancel_requested_at = %s", (at(0.5),))
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(amount=3000)])
    assert run(conn, "PayloadBound")
    assert run(conn, "NoSendAfterCancel")


def test_ambiguous_at_tier2_and_a_broken_chain_are_caught(conn) -> None:
    seed(conn)
    effect(conn, state="ambiguous")
    chain(
        conn,
        "eff_1",
        [{"kind": "PROPOSED", "lease": "g1"}, {"kind": "AMBIGUOUS", "reason": "why not"}],
    )
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=TIER2)
    conn.execute("alter table ilr.journal disable trigger journal_append_only")
    conn.execute("update ilr.journal set body = replace(body, 'why not', 'edited')")
    assert run(conn, "ReceiptChainLinear")


def test_ambiguous_is_judged_by_the_target_and_the_grant_not_by_its_reason(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn, tier=1, state="ambiguous")
    # The reason claims what the runtime may not claim by itself: the target says otherwise.
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "AMBIGUOUS", "reason": "tier 3: no lookup and no dedup"}])  # fmt: skip
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=TIER2)
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED,
                   targets={"http://t": {"tier": 3, "lookup": False}})  # fmt: skip
    # No lookup, but nothing barred the tier-1 resend: the outcome was knowable.
    no_lookup = {"http://t": {"tier": 1, "lookup": False}}
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=no_lookup)
    # A read-back that disagrees with the ledger (no application) is unknowable too.
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=[], targets=TIER2)
    with pytest.raises(MissingEvidence):
        run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED)
    grant(conn, revoked=2.5)  # the grant row: revoked before the AMBIGUOUS entry (ts 4)
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=no_lookup)
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=TIER2)


def _ambiguous_at_recovery(conn, premises: dict) -> None:
    """A tier-1 effect marked AMBIGUOUS at +3 s by a recovery that found a check failing; the
    workflow's lease runs to +9 s."""
    seed(conn)
    grant(conn)
    effect(conn, tier=1, state="ambiguous")
    claim(conn, "wf", 1, 0)
    conn.execute("update ilr.workflows set lease_expires_at = %s", (at(9),))
    sent = dict(dispatched(), premises=premises)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, sent,
                          {"kind": "AMBIGUOUS", "reason": "a check failed at recovery"}])  # fmt: skip


NO_LOOKUP = {"http://t": {"tier": 1, "lookup": False}}


def test_a_lapsed_lease_bars_a_resend(conn) -> None:
    _ambiguous_at_recovery(conn, {"payment": "p"})
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=NO_LOOKUP)
    conn.execute("update ilr.workflows set lease_expires_at = %s", (at(2.5),))
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=NO_LOOKUP)


def test_a_changed_premise_bars_a_resend_and_a_blind_target_sees_its_own_refund(conn) -> None:
    """A target without lookups cannot tell the effect's own refund from another's: a premise
    re-read after it landed finds refunded_by_others changed, as the application's check does."""
    _ambiguous_at_recovery(conn, {"payment": "p", "refunded_by_others": 0})
    landed_later = [dict(LANDED[0], created=at(3.5).timestamp())]  # after the AMBIGUOUS at +3
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=landed_later, targets=NO_LOOKUP)
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=NO_LOOKUP)
    hand = {"key": None, "amount": 500, "payment": "p", "created": at(2).timestamp()}
    ledger = [*landed_later, hand]
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=ledger, targets=NO_LOOKUP)


def test_effective_tier3_comes_from_the_targets_configuration(conn) -> None:
    seed(conn)
    effect(conn, tier=2)
    twice = [*LANDED, dict(LANDED[0], created=at(5).timestamp())]
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "AMBIGUOUS", "reason": "no lookup"}])  # fmt: skip
    assert run(conn, "EffectAtMostOnceTier12", ledger=twice, targets=TIER2)
    assert not run(conn, "EffectAtMostOnceTier12", ledger=twice,
                   targets={"http://t": {"tier": 3, "lookup": False}})  # fmt: skip


def test_a_key_older_than_declared_safe_makes_tier1_unknowable(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn, tier=1, state="ambiguous")
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "AMBIGUOUS", "reason": "anything"}])  # fmt: skip
    # DISPATCHED at +2 s, AMBIGUOUS at +3 s: the key is 1 s old.
    young = {"http://t": {"tier": 1, "lookup": False, "key_age": 5.0}}
    old = {"http://t": {"tier": 1, "lookup": False, "key_age": 0.5}}
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=young)
    assert not run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED, targets=old)
    # Past the key's age a target that answers lookups is tier 2: still knowable.
    assert run(conn, "AmbiguousOnlyWhenUnknowable", ledger=LANDED,
               targets={"http://t": {**old["http://t"], "lookup": True}})  # fmt: skip


def test_a_compensation_counts_only_when_the_application_declared_it(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn)
    claim(conn, "wf", 1, 0)
    conn.execute("update ilr.workflows set cancel_requested_at = %s", (at(0.5),))
    comp = dispatched()
    comp["by"] = {**comp["by"], "compensation": True}
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, comp])
    assert run(conn, "NoSendAfterCancel")
    assert not run(conn, "NoSendAfterCancel", compensations={"wf"})


def test_untruthful_receipt_and_checkpoint_gap_are_caught(conn) -> None:
    seed(conn, status="running")
    effect(conn)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "COMMITTED", "result": {}}])  # fmt: skip
    assert run(conn, "ReceiptTruthful", ledger=[])  # says happened, the ledger says no
    conn.execute("update ilr.effects set dispatch_epoch = 2")
    assert run(conn, "EffectCheckpointAtomic")  # committed, no step row, claim still current


def test_signal_timer_and_wakeup_violations_are_caught(conn) -> None:
    seed(conn, status="sleeping")
    step(conn, "wf", 1, 1, 5, kind="sleep", output={"until": at(9).isoformat()})
    step(conn, "wf", 2, 1, 6, kind="signal", output={"n": 1})
    conn.execute("insert into ilr.signals (workflow_id, name, payload, consumed_seq) "
                 "values ('wf', 'go', '{\"n\": 2}', 2)")  # fmt: skip
    conn.execute(
        "insert into ilr.signals (workflow_id, name, payload) values ('wf', 'approve', '{}')"
    )
    conn.execute("update ilr.workflows set available_at = 'infinity', "
                 "waiting = '{\"kind\": \"signal\", \"signal\": \"approve\"}'")  # fmt: skip
    assert run(conn, "TimerNotEarly")
    assert run(conn, "SignalExactlyOnceConsumed")
    assert run(conn, "NoLostWakeup")


def test_claims_beyond_a_queue_limit_are_caught(conn) -> None:
    """Three runs of a queue of two: q0 claimed at 0 and ended at 3, q1 at 1, q2 at 2 (still
    holding): three claims at once. Ended before q2's claim, q0 leaves two."""
    conn.execute("insert into ilr.queues (name, concurrency) values ('mq', 2)")
    for i in range(3):
        seed(conn, f"q{i}")
        conn.execute("update ilr.workflows set queue = 'mq', updated_at = %s where id = %s",
                     (at(3), f"q{i}"))  # fmt: skip
        claim(conn, f"q{i}", 1, i)
    assert run(conn, "QueueConcurrencyBounded") == [f"queue mq: 3 claims held at {at(2)}, limit 2"]
    conn.execute("update ilr.workflows set updated_at = %s where id = 'q0'", (at(1.5),))
    assert not run(conn, "QueueConcurrencyBounded")
    # q0's worker died and its lease ran to 1.5; q0 taken over at 2.5, after q2 (2-2.4) ended:
    # 0-1.5 and 2.5-4 beside q1 (1-3) and q2, never three
    conn.execute("update ilr.workflows set updated_at = %s where id = 'q0'", (at(4),))
    conn.execute("update ilr.workflows set updated_at = %s where id = 'q2'", (at(2.4),))
    claim(conn, "q0", 2, 2.5, prev="running", prev_lease=1.5)
    assert not run(conn, "QueueConcurrencyBounded")
    conn.execute("update ilr.claims set prev_lease_expires_at = %s where epoch = 2", (at(2.2),))
    assert run(conn, "QueueConcurrencyBounded")  # the dead claim to 2.2 meets q1 and q2 at 2


def test_a_tick_started_twice_is_caught(conn) -> None:
    tick = {"schedule_id": "s", "source": "schedule", "scheduled_at": at(5).isoformat()}
    seed(conn, "s@1")
    conn.execute("update ilr.workflows set input = %s", (json.dumps(tick),))
    assert not run(conn, "TickStartsAtMostOnce")
    seed(conn, "s@1#again")
    conn.execute("update ilr.workflows set input = %s where id = 's@1#again'", (json.dumps(tick),))
    assert run(conn, "TickStartsAtMostOnce") == [
        f"schedule s (schedule) tick {at(5).isoformat()}: 2 runs"
    ]
    conn.execute("update ilr.workflows set input = %s where id = 's@1#again'",
                 (json.dumps({**tick, "source": "trigger"}),))  # fmt: skip
    assert not run(conn, "TickStartsAtMostOnce")  # a trigger at the same time is another fire


def test_a_timeout_before_its_deadline_is_caught(conn) -> None:
    seed(conn, status="timed_out")
    conn.execute("update ilr.workflows set execution_deadline = %s, updated_at = %s",
                 (at(3), at(3)))  # fmt: skip
    assert not run(conn, "ExecutionTimeoutNotEarly")
    conn.execute("update ilr.workflows set updated_at = %s", (at(2.9),))
    assert run(conn, "ExecutionTimeoutNotEarly")


def test_a_run_ended_by_a_database_fault_is_caught(conn) -> None:
    seed(conn, status="failed")
    conn.execute('update ilr.workflows set error = \'{"type": "ValueError"}\'')
    assert not run(conn, "DatabaseFaultNeverEnds")
    for fault in ("OperationalError", "AdminShutdown", "DatabaseUnreachable"):
        conn.execute("update ilr.workflows set error = %s", (f'{{"type": "{fault}"}}',))
        assert run(conn, "DatabaseFaultNeverEnds"), fault


def test_version_nondeterminism_and_fork_violations_are_caught(conn) -> None:
    seed(conn, status="stuck")
    claim(conn, "wf", 1, 0)
    conn.execute("update ilr.claims set version = '9'")
    conn.execute(
        'update ilr.workflows set epoch = 1, error = \'{"type": "NonDeterminism", "seq": 1}\''
    )
    step(conn, "wf", 2, 1, 1)
    assert run(conn, "VersionPinned")
    assert run(conn, "NonDeterminismLoud")
    effect(conn)
    chain(
        conn,
        "eff_1",
        [{"kind": "PROPOSED", "lease": "g1"}, dispatched(), {"kind": "COMMITTED", "result": {}}],
    )
    conn.execute("insert into ilr.workflows (id, name, version, input, forked_from, created_at) "
                 "values ('wf2', 'refund', '1', '{}', 'wf', %s)", (at(30),))  # fmt: skip
    step(conn, "wf2", 1, 1, 31, kind="effect", output={"status": "COMMITTED"},
         fingerprint="eff_1:h")  # fmt: skip
    assert run(conn, "ForkNeverResends")


def test_late_result_column_and_entries_must_agree(conn) -> None:
    seed(conn)
    effect(conn)
    conn.execute("update ilr.effects set late_result = '{\"result\": {}}'")
    assert run(conn, "LateResultPreserved")


def test_step_rows_without_the_append_only_trigger_are_caught(conn) -> None:
    conn.execute("drop trigger steps_append_only on ilr.steps")
    assert run(conn, "StepResultUnique")


def test_every_check_holds_on_an_empty_database_or_says_what_it_needs(conn) -> None:
    results = check_all(Evidence(conn, ledger=[], access_log=[], events=[]))
    assert set(results) == set(INVARIANTS) and all(v == [] for v in results.values()), results


# -- the runtime's self-report says fine, the ground truth says otherwise ----------------------
# Each journal below records a passing check (lease_live true, no violations): only the grant
# rows, the journal's timestamps, the effect row and the target's access log show the fault.


@pytest.mark.parametrize(
    "grant_row",
    [
        {"expires": 2.5},  # expired before the send at t=3
        {"constraints": {"amount": {"max": 1000}}},  # the payload is above the grant's bound
        {"approves": {"amount": 1500}},  # an approval of another payload
        {"action": "payout"},  # the target did a refund
        {"principal": "workflow:other"},  # an approval of another workflow's proposal
    ],
    ids=["expired", "constraint", "other_payload", "other_action", "other_workflow"],
)
def test_send_the_grant_row_does_not_cover_is_caught(conn, grant_row: dict) -> None:
    seed(conn)
    grant(conn, **grant_row)
    effect(conn, state="dispatched")
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, {"kind": "AUTHORIZED", "lease": "g1"},
                          dispatched()])  # fmt: skip
    assert run(conn, "NoSendUnderRevokedGrant", access_log=[post(3.1, 3.2)])


def test_a_covered_send_passes(conn) -> None:
    seed(conn)
    grant(conn, expires=9, constraints={"amount": {"max": 2000}}, approves={"amount": 2000})
    effect(conn, state="dispatched")
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched()])
    assert run(conn, "NoSendUnderRevokedGrant", access_log=[post(2.1, 2.2)]) == []


def test_resend_after_the_grant_was_revoked_is_caught(conn) -> None:
    seed(conn)
    grant(conn, revoked=3.5)  # after the DISPATCHED at t=2, before the T_resolve at t=4
    effect(conn, tier=1)
    claim(conn, "wf", 1, 0)
    claim(conn, "wf", 2, 3.2, prev="running", prev_lease=3)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {**resend(4), "ts": at(4.5).timestamp()}])  # fmt: skip
    assert run(conn, "RecoveryRechecks", ledger=[], access_log=[])
    assert run(conn, "NoSendUnderRevokedGrant")


def test_a_send_open_when_the_revoke_committed_must_be_returned(conn) -> None:
    seed(conn, status="running")
    grant(conn, revoked=5)
    effect(conn, state="dispatched")
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched()])  # open since t=2
    log = [post(2.1, None)]
    assert run(
        conn, "RevokeLinearizable", access_log=log, revokes=[{"grant": "g1", "returned": []}]
    )
    returned = [{"grant": "g1", "returned": ["eff_1"]}]
    assert run(conn, "RevokeLinearizable", access_log=log, revokes=returned) == []
    with pytest.raises(MissingEvidence):  # a revoked grant whose revoke() result is unknown
        run(conn, "RevokeLinearizable", access_log=log, revokes=[])


def test_a_grant_that_ended_with_its_workflow_needs_no_revoke_call(conn) -> None:
    seed(conn)  # completed
    grant(conn, revoked=5, principal="workflow:wf")
    effect(conn, tier=1)
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "COMMITTED", "result": {}}])  # fmt: skip
    assert run(conn, "RevokeLinearizable", access_log=[post(2.1, 2.2)]) == []
    # a send authorized after that revoke is still caught (DISPATCHED at +2 s, revoked at +1.5)
    grant(conn, revoked=1.5, principal="workflow:wf")
    assert run(conn, "RevokeLinearizable", access_log=[post(2.1, 2.2)])
    # a running workflow's revoked grant was a revoke() call, whose result must be known
    conn.execute("update ilr.workflows set status = 'running'")
    with pytest.raises(MissingEvidence):
        run(conn, "RevokeLinearizable", access_log=[post(2.1, 2.2)])


def test_a_request_landing_after_the_revoke_must_be_returned(conn) -> None:
    seed(conn)
    grant(conn, revoked=5)
    effect(conn, tier=1)
    claim(conn, "wf", 1, 0)
    # resolved before the revoke (COMMITTED at t=3), yet a request still reached the target at 6
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "COMMITTED", "result": {}}])  # fmt: skip
    log = [post(2.1, 2.2), post(6, 6.1)]
    assert run(
        conn, "RevokeLinearizable", access_log=log, revokes=[{"grant": "g1", "returned": []}]
    )
    assert run(conn, "RevokeLinearizable", access_log=log[:1],
               revokes=[{"grant": "g1", "returned": []}]) == []  # fmt: skip


def test_revoke_returning_an_effect_never_sent_under_the_grant_is_caught(conn) -> None:
    seed(conn)
    grant(conn, revoked=5)
    grant(conn, "g2")
    effect(conn, grant="g2")
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g2"},
                          {**dispatched(), "lease": "g2"}])  # fmt: skip
    assert run(conn, "RevokeLinearizable", revokes=[{"grant": "g1", "returned": ["eff_1"]}])


def test_resend_inside_the_settle_window_is_caught(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn, tier=1)
    claim(conn, "wf", 1, 0)
    claim(conn, "wf", 2, 2.5, prev="running", prev_lease=2.4)
    # DISPATCHED at t=2 with a 1 s send timeout and a 5 s settle margin: no resend before t=8;
    # the resend's T_resolve ran at t=3.5 (the deadline it set: 4.5). The requests never
    # overlapped at the target, so only the settle rule sees it.
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {**resend(3.5), "ts": at(4).timestamp()}])  # fmt: skip
    timing(conn, deadline=4.5, settle=5, sends=2)
    log = [post(2.1, 2.2), post(3.6, 3.7)]
    assert run(conn, "NoOverlappingSends", access_log=log)
    effect(conn, "eff_2", tier=1)  # the same, resent after send_deadline + settle_margin
    chain(conn, "eff_2", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {**resend(8.5), "ts": at(9).timestamp()}])  # fmt: skip
    timing(conn, "eff_2", deadline=9.5, settle=5, sends=2)
    later = [post(2.1, 2.2, key="eff_2"), post(8.6, 8.7, key="eff_2")]
    assert [
        v for v in run(conn, "NoOverlappingSends", access_log=log + later) if "eff_2" in v
    ] == []


def test_a_request_from_a_sender_without_a_claim_is_caught(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn)
    claim(conn, "wf", 1, 0, owner="w1")
    claim(conn, "wf", 2, 10, prev="running", prev_lease=9, owner="w2")
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(),
                          {"kind": "COMMITTED", "result": {}}])  # fmt: skip
    # the journal says epoch 1 dispatched, the target says who really sent the one request
    for sender in ({"worker": "w9", "epoch": "1"}, {"worker": "w2", "epoch": "2"}):
        assert run(conn, "SendRequiresLiveClaim", access_log=[{**post(2.1, 2.2), **sender}])
    good = {**post(2.1, 2.2), "worker": "w1", "epoch": "1"}
    assert run(conn, "SendRequiresLiveClaim", access_log=[good]) == []


def _read(arrival: float, payment: str = "pay_1", target: str | None = None) -> dict:
    return {"method": "GET", "path": f"/payments/{payment}", "key": None, "target": target,
            "arrival": at(arrival).timestamp(), "end": at(arrival + 0.01).timestamp()}  # fmt: skip


def _hand(created: float, amount: int = 500, target: str | None = None) -> dict:
    return {"payment": "pay_1", "amount": amount, "key": None, "source": "hand",
            "created": at(created).timestamp(), "target": target}  # fmt: skip


def _decided(others: int) -> dict:
    d = dispatched()  # the runtime's own record: no violations
    d["premises"] = {"payment": "pay_1", "refunded_by_others": others}
    return d


@pytest.mark.parametrize(
    ("hand_at", "read_at", "stale"),
    [
        (2.0, 3.0, True),  # refunded by hand, then read, then sent: the read saw it
        (3.5, 3.0, False),  # refunded by hand after the read: inside A3's window, not stale
        (2.9, 3.0, False),  # within the margin before the read: it may not have seen it
        (None, 3.0, False),  # nothing changed
    ],
)
def test_a_send_after_a_read_that_saw_the_premise_change_is_caught(
    conn, hand_at, read_at, stale
) -> None:
    """The journal's recorded check says the premises held ({violations: []}); only the target's
    access log (the read) and ledger (the hand refund) tell."""
    seed(conn)
    effect(conn)
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, _decided(0)])  # DISPATCHED at t=2
    ledger = [_hand(hand_at)] if hand_at is not None else []
    log = [_read(read_at), post(4.0, 4.1)]
    ledger.append({"payment": "pay_1", "amount": 2000, "key": "eff_1", "source": "api",
                   "created": at(4.05).timestamp(), "target": None})  # fmt: skip
    got = run(conn, "NoSendOnStalePremise", ledger=ledger, access_log=log)
    assert bool(got) == stale, got


def test_a_read_at_another_target_says_nothing_about_this_one(conn) -> None:
    seed(conn)
    effect(conn)
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, _decided(0)])
    sent = dict(post(4.0, 4.1), target="A")
    log = [_read(3.0, target="A"), sent]
    assert run(conn, "NoSendOnStalePremise", ledger=[_hand(1.0, target="B")], access_log=log) == []
    assert run(conn, "NoSendOnStalePremise", ledger=[_hand(1.0, target="A")], access_log=log)


def test_a_resend_after_a_read_that_saw_the_change_is_caught_by_recovery_rechecks(conn) -> None:
    seed(conn)
    grant(conn)
    effect(conn, tier=1)
    claim(conn, "wf", 1, 0)
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, _decided(0), resend(5.0)])
    log = [_read(1.5), post(2.5, None), _read(5.5), post(6.0, 6.1)]  # the first send was lost
    ledger = [_hand(4.0)]
    assert run(conn, "RecoveryRechecks", ledger=ledger, access_log=log)
    assert run(conn, "RecoveryRechecks", ledger=[], access_log=log) == []


def test_world_times_are_read_on_the_primary_clock(conn) -> None:
    # A failover at t=5 to a server whose clock runs 0.5 s ahead of this machine's: the claim
    # of epoch 2 says 10.0 on that clock, which is 9.5 on the target's. A request that reached
    # the target at 9.7 came 0.2 s after the claim, and one at 9.3 came 0.2 s before it.
    seed(conn)
    grant(conn)
    effect(conn)
    claim(conn, "wf", 1, 0, owner="w1")
    claim(conn, "wf", 2, 10, prev="running", prev_lease=9, owner="w2")
    chain(conn, "eff_1", [{"kind": "PROPOSED", "lease": "g1"}, dispatched(epoch=2),
                          {"kind": "COMMITTED", "result": {}}])  # fmt: skip
    clock = [(at(-1).timestamp(), 0.0), (at(5).timestamp(), 0.5)]
    after = [{**post(9.7, 9.8), "worker": "w2", "epoch": "2"}]
    before = [{**post(9.3, 9.4), "worker": "w2", "epoch": "2"}]
    assert run(conn, "SendRequiresLiveClaim", access_log=after)  # one clock: a false finding
    assert run(conn, "SendRequiresLiveClaim", access_log=after, db_clock=clock) == []
    assert run(conn, "SendRequiresLiveClaim", access_log=before, db_clock=clock)
    # before the failover the first node's clock (offset 0) applies: nothing moves
    ev = Evidence(conn, access_log=[{**post(2.1, 2.2)}], db_clock=clock)
    assert ev.access_log[0]["arrival"] == at(2.1).timestamp()
