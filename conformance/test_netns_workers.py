"""Workers on separate hosts (issue 20): two worker groups, each in a network namespace of its
own (world/netns.py), reach a private primary and standby pair (world/pg_pair.py, listening on
the namespaces' gateways) over their own links. Group A holds every run mid-step, two refunds
among them with their requests in flight at the target, when it is partitioned from Postgres
(both nodes' ports; the target stays reachable). Its leases run out by the database clock,
group B takes over, then A is healed and its held writes arrive.

What must hold, exactly as with processes on one host: B claims a run only after A's lease
expired by the database clock and under a higher epoch; A's stale writes are fenced (worker
events `fenced`, no row written by A's epochs after the partition); no step is recorded twice
(the body of the step A was in runs again on B, and only B's result is recorded); each refund
in flight lands once at the target; every catalog invariant holds over the run."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import datetime

import pytest

from conformance.invariants import Evidence, check_all, target_config
from conformance.run_sources import FLOWS, flows
from interlock_runtime import Runtime, db, migrations
from interlock_runtime.testing import WorkerProcess, read_jsonl, wait_for
from world import netns
from world.pg_pair import PgPair
from world.target import Target
from world.target_client import TargetAdmin

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(netns.available() is not None, reason=str(netns.available())),
]

TTL = 3.0  # every worker's lease time-to-live
STEP_S = 7.0  # s2's body on its first invocation: A is inside it when partitioned, and it
# ends (so A's write of it waits in the network) before the heal
S3_S = 20.0  # s3's body on its first invocation (on B): B holds a live lease when A heals
POST_MS = 6000  # the target's service time: A's refunds are in flight when partitioned
SEND = {"send_timeout": 9.0, "settle_margin": 1.0}  # POST_MS fits in the send budget
STEPS = [f"n-steps-{i}" for i in range(4)]
ALONE = "n-alone"  # a run of a workflow only group A serves: nobody takes it over
REFUNDS = {tier: f"n-refund-t{tier}" for tier in (1, 2)}
LANDED = {1: "COMMITTED_BY_RETRY", 2: "COMMITTED_ON_QUERY"}  # B's recovery, by tier


def _ts(value: datetime) -> float:
    return value.timestamp()


def events_of(events: list[dict], workers: set[str], wf: str, by: str) -> list[dict]:
    """The `fenced` events of these workers for one run, by write or by heartbeat."""
    return [e for e in events if e["event"] == "fenced" and e["worker"] in workers
            and e["wf"] == wf and e.get("by") == by]  # fmt: skip


def test_a_partitioned_group_is_fenced_and_taken_over_only_after_its_leases_expire(
    tmp_path,
) -> None:
    with ExitStack() as stack:
        world = stack.enter_context(netns.NetWorld("a", "b"))
        a = world["a"]
        pair = stack.enter_context(PgPair(listen=tuple(world.gateways), trust=tuple(world.subnets)))
        dsn = pair.dsn()  # the test's own connections, in the root namespace
        with db.connect(dsn) as conn:
            migrations.ensure(conn)
        targets, urls = {}, {}
        for tier in REFUNDS:
            t = Target(tier, db=str(tmp_path / f"ledger{tier}.db"), delay_ms=POST_MS).start()
            t.delay_count = 1  # A's request is slow; B's resend, if any, is not
            stack.callback(t.stop)
            # the target binds loopback only: both groups reach it through a relay on a gateway
            relay = stack.enter_context(netns.Relay(a.gateway, t.port))
            targets[tier], urls[tier] = t, relay.url
            TargetAdmin(t.url).create_payment(f"pay_{tier}", 10000)
        workers: dict[str, list[WorkerProcess]] = {"a": [], "b": []}

        def group(label: str, *extra: str) -> None:
            space = world[label]
            for i in range(2):
                w = WorkerProcess(pair.dsn(host=space.gateway), f"{label.upper()}{i}", tmp_path,
                                  "flows", pythonpath=str(FLOWS), cwd=str(FLOWS), lease_ttl=TTL,
                                  poll=0.2, concurrency=4, popen=space.popen,
                                  extra_args=extra)  # fmt: skip
                stack.callback(w.close)
                workers[label].append(w)

        def events(label: str) -> list[dict]:
            return [e for w in workers[label] for e in w.events()]

        inv = {wf: str(tmp_path / f"{wf}.inv.jsonl") for wf in (*STEPS, ALONE)}
        group("a")
        with Runtime(dsn) as rt:
            grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
            for wf in STEPS:
                rt.start(flows.three_steps, wf, {"log": inv[wf],
                                                 "sleep": {"s2": STEP_S, "s3": S3_S}})  # fmt: skip
            rt.start(flows.zombie_steps, ALONE, {"log": inv[ALONE], "sleep": {"s2": STEP_S}})
            for tier, wf in REFUNDS.items():
                rt.start(flows.policy_refund, wf, {
                    "id": wf, "target_url": urls[tier], "payment": f"pay_{tier}", "tier": tier,
                    "payload": {"amount": 100, "payment": f"pay_{tier}"}, "grant": grant,
                    **SEND})  # fmt: skip
            held = {*STEPS, *REFUNDS.values(), ALONE}
            wait_for(lambda: {e["wf"] for e in events("a") if e["event"] == "claimed"} >= held,
                     60, "group A to claim every run")  # fmt: skip
            group("b", "--only", "three_steps@1,policy_refund@1")  # idle: A holds every lease

            def posts() -> list[dict]:
                return [r for t in targets.values()
                        for r in TargetAdmin(t.url).log(method="POST", path="/refunds")]  # fmt: skip

            wait_for(lambda: len(posts()) == 2 and all(
                any(e["event"] == "step_started" and e["wf"] == wf and e.get("name") == "s2"
                    for e in events("a")) for wf in (*STEPS, ALONE))
                and all(any(e["event"] == "registered" for e in w.events()) for w in workers["b"]),
                60, "A inside s2 everywhere, both refunds sent, group B up")  # fmt: skip
            assert all(r["end"] is None for r in posts()), "a refund finished before the partition"

            with db.connect(dsn) as conn:
                t_part = _ts(conn.execute("select clock_timestamp() as t").fetchone()["t"])
            a.partition([pair.primary.port, pair.standby.port])
            stack.callback(a.heal)
            with pytest.raises(OSError):  # A cannot reach Postgres; the target it still can
                a.connect(a.gateway, pair.primary.port, timeout=1).close()
            a.connect(a.gateway, int(urls[1].rsplit(":", 1)[1])).close()

            # Heal once B has finished the refunds and is inside s3 everywhere, holding live
            # leases at higher epochs: A's held s2 writes arrive under B's tenure.
            results = {wf: rt.result(wf, timeout=60) for wf in REFUNDS.values()}
            wait_for(lambda: all(any(e["event"] == "step_started" and e["wf"] == wf
                                     and e.get("name") == "s3" for e in events("b"))
                                 for wf in STEPS), 60, "B inside s3 everywhere")  # fmt: skip
            with db.connect(dsn) as conn:
                t_heal = _ts(conn.execute("select clock_timestamp() as t").fetchone()["t"])
            a.heal()

            def fenced() -> set[str]:  # a write refused: A's held write arrived (a refund's
                # late result is kept first); a heartbeat's fencing may come earlier
                return {e["wf"] for e in events("a")
                        if e["event"] == "fenced" and e["by"] == "write"}  # fmt: skip

            wait_for(lambda: fenced() >= held, 60, "a write of every run A held to be fenced")
            results.update({wf: rt.result(wf, timeout=60) for wf in (*STEPS, ALONE)})
            assert all(w.proc.poll() is None for ws in workers.values() for w in ws), (
                "a worker died"
            )
            t_fenced = {wf: min(e["ts"] for e in events("a")
                                if e["event"] == "fenced" and e["wf"] == wf) for wf in held}  # fmt: skip

        all_events = [e for ws in workers.values() for w in ws for e in w.events()]
        ledger = [dict(r, target=urls[tier]) for tier, t in targets.items()
                  for r in TargetAdmin(t.url).ledger()["refunds"]]  # fmt: skip
        log = [dict(r, target=urls[tier]) for tier, t in targets.items()
               for r in TargetAdmin(t.url).log()]  # fmt: skip
        with db.connect(dsn) as conn:
            ev = Evidence(conn, ledger=ledger, access_log=log, events=all_events,
                          targets={urls[tier]: target_config(t.url)
                                   for tier, t in targets.items()})  # fmt: skip
            violations = {k: v for k, v in check_all(ev).items() if v}
            claims = conn.execute("select * from ilr.claims order by workflow_id, epoch").fetchall()
            steps = conn.execute("select workflow_id, seq, name, epoch, created_at, output "
                                 "from ilr.steps").fetchall()  # fmt: skip
            late = conn.execute("select effect_id, late_result from ilr.effects "
                                "where late_result is not null").fetchall()  # fmt: skip

    a_ids = {w.worker_id for w in workers["a"]}
    b_ids = {w.worker_id for w in workers["b"]}
    by_wf: dict[str, list[dict]] = {}
    for c in claims:
        by_wf.setdefault(c["workflow_id"], []).append(c)
    takeovers = []  # (wf, seconds from the partition, seconds after the lease expired)
    for wf in held:
        cl = by_wf[wf]
        assert [c["epoch"] for c in cl] == sorted({c["epoch"] for c in cl}), (wf, cl)
        for prev, c in zip(cl, cl[1:], strict=False):
            assert c["claimed_at"] > prev["claimed_at"], (wf, cl)  # epochs in claim order
            if c["prev_status"] == "running":  # a takeover (not a wake-up from a suspend)
                # only after the lease expired, by the database clock
                assert c["claimed_at"] >= c["prev_lease_expires_at"], (wf, c)
        first, second = cl[0], cl[1]
        assert first["owner"] in a_ids and _ts(first["claimed_at"]) < t_part, (wf, cl)
        if wf == ALONE:  # nobody else serves it: A claims it again once healed
            assert [c["owner"] in a_ids for c in cl] == [True, True], (wf, cl)
            assert _ts(second["claimed_at"]) > t_heal, (wf, cl)
        else:  # B took it over, and any later claim (after a suspend) is B's too
            assert [c["owner"] in b_ids for c in cl] == [False] + [True] * (len(cl) - 1), cl
        assert second["prev_status"] == "running", (wf, second)
        takeovers.append((wf, _ts(second["claimed_at"]) - t_part,
                          _ts(second["claimed_at"]) - _ts(second["prev_lease_expires_at"])))  # fmt: skip
    stale_epochs = {(wf, by_wf[wf][0]["epoch"]) for wf in held}  # A's, from before the partition
    stale = [s for s in steps if (s["workflow_id"], s["epoch"]) in stale_epochs
             and _ts(s["created_at"]) >= t_part]  # fmt: skip
    assert stale == [], stale  # nothing A wrote under them reached the database after it

    # s2 ran twice (A's body, then its successor's), recorded once, by the successor
    recorded = {(s["workflow_id"], s["name"]): s for s in steps}
    fenced_under_b = []  # seconds from A's refused write to B's s3 row (B's lease was live)
    for wf in (*STEPS, ALONE):
        runs = [r for r in read_jsonl(tmp_path / f"{wf}.inv.jsonl") if r["step"] == "s2"]
        successor = by_wf[wf][1]
        assert t_part - STEP_S < runs[0]["t"] < t_heal - STEP_S, (wf, runs[0], t_part, t_heal)
        assert [(r["worker"] in a_ids, r["epoch"]) for r in runs] == [
            (True, by_wf[wf][0]["epoch"]), (successor["owner"] in a_ids, successor["epoch"])
        ], (wf, runs)  # fmt: skip
        s2 = recorded[(wf, "s2")]
        assert (s2["epoch"], s2["output"]["worker"]) == (successor["epoch"], successor["owner"])
        assert [r["step"] for r in results[wf]] == ["s1", "s2", "s3"], results[wf]
        if wf != ALONE:
            refused = min(e["ts"] for e in events_of(all_events, a_ids, wf, "write"))
            fenced_under_b.append(_ts(recorded[(wf, "s3")]["created_at"]) - refused)
    assert all(dt > 0 for dt in fenced_under_b), fenced_under_b
    keys = sorted((s["workflow_id"], s["seq"]) for s in steps)
    assert len(keys) == len(set(keys))  # no step recorded twice

    # each refund in flight landed once, and B's recovery said how
    for tier, wf in REFUNDS.items():
        assert results[wf]["status"] == LANDED[tier], (tier, results[wf])
    assert sorted(r["key"] for r in ledger) == sorted({r["key"] for r in ledger})
    assert len(ledger) == len(REFUNDS)
    assert {r["late_result"]["state_at_arrival"] for r in late} == {"committed"}, late
    assert len(late) == len(REFUNDS)  # A's responses kept as late results, not dropped

    fenced_events = [e for e in all_events if e["event"] == "fenced" and e["worker"] in a_ids]
    assert {e["wf"] for e in fenced_events} == held
    alone = events_of(all_events, a_ids, ALONE, "write")
    assert {e["epoch"] for e in alone} == {by_wf[ALONE][0]["epoch"]}  # its own lapsed lease
    assert all(t >= t_heal for t in t_fenced.values())  # A learned it only once healed
    assert violations == {}
    summary = {
        "takeover_after_partition_s": sorted(round(t[1], 2) for t in takeovers if t[0] != ALONE),
        "claimed_after_expiry_ms": sorted(
            round(t[2] * 1000, 1) for t in takeovers if t[0] != ALONE
        ),
        "alone_reclaimed_after_heal_s": [
            round(t[1] - (t_heal - t_part), 2) for t in takeovers if t[0] == ALONE
        ],
        "partition_s": round(t_heal - t_part, 2),
        "fenced_after_heal_s": sorted(round(t - t_heal, 2) for t in t_fenced.values()),
        "fenced_events": {
            by: sum(e.get("by") == by for e in fenced_events) for by in ("write", "heartbeat")
        },  # fmt: skip
        "late_results": len(late),
        "refused_before_b_s3_recorded_s": sorted(round(t, 2) for t in fenced_under_b),
    }
    print(f"netns takeover: {summary}")
    assert summary["fenced_events"]["write"] >= len(held)  # every held run's write was refused
