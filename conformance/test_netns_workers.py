"""Workers on separate hosts (issue 20): two worker groups, each in a network namespace of its
own (world/netns.py), reach a private primary and standby pair (world/pg_pair.py, listening on
the namespaces' gateways) over their own links. Group A holds every run, inside its last,
slow step or with a refund request in flight at the target, when it is partitioned from
Postgres (both nodes' ports; the target stays reachable). Its leases run out by the database
clock, group B takes over, then A is healed and the writes the network held arrive.

What must hold, exactly as with processes on one host: B claims a run only after A's lease
expired by the database clock, under a higher epoch; A's held writes are refused by the
database's fence (worker events `fenced`), both under B's live lease (the epoch) and, for a run
nobody took over, under A's own lapsed lease; nothing is written under A's old epochs after the
partition; no step is recorded twice (the slow step's body runs on A and on B, only B's result
is recorded); each refund in flight lands once at the target and A's late response is kept;
every catalog invariant holds over the run.

Mode (conformance/conftest.py MODES): "sync" runs the plain workflows; "async" (ILR_LONG=1) their
`async def` twins on asyncio workers (conformance/netns_flows.py's *_async,
conformance/source_flows_async.py's policy_refund), with the same assertions."""

from __future__ import annotations

import os
import signal
from contextlib import ExitStack
from datetime import datetime

import pytest

from conformance import netns_flows
from conformance.conftest import LONG, REPO, mode_args
from conformance.invariants import Evidence, check_all, target_config
from conformance.run_sources import FLOWS, flows_for
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
FIRST_S = 8.0  # the slow step's body on A: cut off inside it, A sends its write before the heal
AGAIN_S = 14.0  # the same body on B: B holds a live lease when A's held write arrives
POST_MS = 4000  # the target's service time for A's refund requests: in flight at the partition
SEND = {"send_timeout": 6.0, "settle_margin": 1.0}  # POST_MS fits in the send budget
HOLDS = [f"n-hold-{i}" for i in range(3)]
ALONE = "n-alone"  # a workflow only worker A0 serves: nobody takes it over
REFUNDS = {tier: f"n-refund-t{tier}" for tier in (1, 2)}
LANDED = {1: "COMMITTED_BY_RETRY", 2: "COMMITTED_ON_QUERY"}  # B's recovery, by tier
A_IDS, B_IDS = {"A0", "A1"}, {"B0", "B1"}  # the worker ids group() gives
DB_FENCE = "no longer holds a live claim"  # db.fenced's refusal, as the worker logs it


def _ts(value: datetime) -> float:
    return value.timestamp()


def _db_now(dsn: str) -> float:
    with db.connect(dsn) as conn:
        return _ts(conn.execute("select clock_timestamp() as t").fetchone()["t"])


# What each mode's workers serve: their refund module, and the two netns workflows' names.
SERVES = {"sync": ("flows", "netns_alone", "netns_hold"),
          "async": ("conformance.source_flows_async", "netns_alone_async", "netns_hold_async")}  # fmt: skip
ASYNC_LONG = pytest.mark.skipif(not LONG, reason="async mode: ILR_LONG=1")


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=ASYNC_LONG)])
def test_a_partitioned_group_is_fenced_and_taken_over_only_after_its_leases_expire(
    tmp_path, mode
) -> None:
    refund_module, alone_name, hold_name = SERVES[mode]
    flows = flows_for(mode)
    alone_flow = netns_flows.alone if mode == "sync" else netns_flows.alone_async
    hold_flow = netns_flows.hold if mode == "sync" else netns_flows.hold_async
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

        def group(label: str, *workers_of: tuple[int, str]) -> None:  # (slots, --only)
            space = world[label]
            for i, (n, only) in enumerate(workers_of):
                extra = ("--module", "conformance.netns_flows", "--only", only, *mode_args(mode))
                w = WorkerProcess(pair.dsn(host=space.gateway), f"{label.upper()}{i}", tmp_path,
                                  refund_module, pythonpath=f"{REPO}{os.pathsep}{FLOWS}",
                                  cwd=str(FLOWS), lease_ttl=TTL,
                                  poll=0.2, concurrency=n, popen=space.popen,
                                  extra_args=extra)  # fmt: skip
                stack.callback(w.close)
                workers[label].append(w)

        def pause(*ws: WorkerProcess) -> None:
            for w in ws:
                w.signal(signal.SIGSTOP)
                w.wait_stopped()

        def resume(*ws: WorkerProcess) -> None:
            for w in ws:
                w.signal(signal.SIGCONT)

        def events(label: str, event: str, **match: object) -> list[dict]:
            return [e for w in workers[label] for e in w.events() if e["event"] == event
                    and all(e.get(k) == v for k, v in match.items())]  # fmt: skip

        inv = {wf: str(tmp_path / f"{wf}.inv.jsonl") for wf in (*HOLDS, ALONE)}
        # Every worker holds as many runs as it has slots, so none claims anything while cut
        # off: A0 (one slot) the run only it serves, A1 (five) the others; B (3 + 3) is idle.
        shared = f"{hold_name}@1,policy_refund@1"
        group("a", (1, f"{alone_name}@1"), (5, shared))
        group("b", (3, shared), (3, shared))
        (a0, a1), (b0, b1) = workers["a"], workers["b"]
        for w in (a0, a1, b0, b1):
            w.wait_event("registered", timeout=60)
        with Runtime(dsn) as rt:
            grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
            pause(a1, b0, b1)  # paused while the runs are handed out, holding nothing
            rt.start(alone_flow, ALONE, {"log": inv[ALONE], "first": FIRST_S, "again": 0})
            a0.wait_event("claimed", wf=ALONE)
            resume(a1)
            for wf in HOLDS:
                rt.start(hold_flow, wf, {"log": inv[wf], "first": FIRST_S,
                                                "again": AGAIN_S})  # fmt: skip
            for tier, wf in REFUNDS.items():
                rt.start(flows.policy_refund, wf, {
                    "id": wf, "target_url": urls[tier], "payment": f"pay_{tier}", "tier": tier,
                    "payload": {"amount": 100, "payment": f"pay_{tier}"}, "grant": grant,
                    **SEND})  # fmt: skip
            held = {*HOLDS, ALONE, *REFUNDS.values()}
            wait_for(lambda: {e["wf"] for e in a1.events() if e["event"] == "claimed"}
                     >= held - {ALONE}, 60, "A1 to claim the other five runs")  # fmt: skip
            resume(b0, b1)  # B cannot claim anything while A renews its leases

            def posts() -> list[dict]:
                return [r for t in targets.values()
                        for r in TargetAdmin(t.url).log(method="POST", path="/refunds")]  # fmt: skip

            def a_inside_slow() -> set[str]:
                return {e["wf"] for e in events("a", "step_started", name="slow")}

            wait_for(lambda: len(posts()) == 2 and a_inside_slow() >= {*HOLDS, ALONE}, 60,
                     "A inside the slow step everywhere and both refunds sent")  # fmt: skip
            assert all(r["end"] is None for r in posts()), "a refund finished before the partition"

            t_part = _db_now(dsn)
            a.partition([pair.primary.port, pair.standby.port])
            stack.callback(a.heal)
            with pytest.raises(OSError):  # A cannot reach Postgres; the target it still can
                a.connect(a.gateway, pair.primary.port, timeout=1).close()
            a.connect(a.gateway, int(urls[1].rsplit(":", 1)[1])).close()

            # Heal once B has resolved both refunds, is inside the slow step of every run it
            # took over (live leases at higher epochs), and A's slow bodies have all returned
            # (their finishing writes are out, held by the network).
            results = {wf: rt.result(wf, timeout=60) for wf in REFUNDS.values()}
            wait_for(lambda: {e["wf"] for e in events("b", "step_started", name="slow")}
                     >= set(HOLDS), 60, "B inside the slow step everywhere")  # fmt: skip
            slow_a = {wf: read_jsonl(tmp_path / f"{wf}.inv.jsonl") for wf in (*HOLDS, ALONE)}
            last_body_end = max(r["t"] for runs in slow_a.values() for r in runs
                                if r["step"] == "slow" and r["worker"] in A_IDS) + FIRST_S  # fmt: skip
            wait_for(lambda: _db_now(dsn) > last_body_end + 0.3, 30, "A's slow bodies to return")
            t_heal = _db_now(dsn)
            a.heal()

            def refused() -> set[str]:  # A's held write arrived and was refused (a refund's
                # late result is kept first); a heartbeat's fencing may come earlier
                return {e["wf"] for e in events("a", "fenced", by="write")}

            wait_for(lambda: refused() >= held, 60, "a write of every run A held to be refused")
            results.update({wf: rt.result(wf, timeout=60) for wf in (*HOLDS, ALONE)})
            assert all(w.proc.poll() is None for ws in workers.values() for w in ws), (
                "a worker died"
            )

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
    assert (a_ids, b_ids) == (A_IDS, B_IDS)
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
        assert second["prev_status"] == "running", (wf, second)
        if wf == ALONE:  # nobody else serves it: A0 claims it again once healed
            assert [c["owner"] for c in cl] == ["A0", "A0"], (wf, cl)
            assert _ts(second["claimed_at"]) > t_heal, (wf, cl)
        else:  # B took it over, and any later claim (after a suspend) is B's too
            assert [c["owner"] in b_ids for c in cl] == [False] + [True] * (len(cl) - 1), cl
        takeovers.append((wf, _ts(second["claimed_at"]) - t_part,
                          _ts(second["claimed_at"]) - _ts(second["prev_lease_expires_at"])))  # fmt: skip
    old = {(wf, by_wf[wf][0]["epoch"]) for wf in held}  # A's epochs from before the partition
    stale = [s for s in steps
             if (s["workflow_id"], s["epoch"]) in old and _ts(s["created_at"]) >= t_part]  # fmt: skip
    assert stale == [], stale  # nothing written under them reached the database after it

    # The slow step ran on A, then on its successor, and is recorded once, by the successor;
    # A's finishing write was refused by the database's fence (not by A's own checks), for a
    # taken-over run while B's lease was live (B recorded the step later).
    recorded = {(s["workflow_id"], s["name"]): s for s in steps}
    keys = [(s["workflow_id"], s["seq"]) for s in steps]
    assert len(keys) == len(set(keys))  # no step recorded twice
    under_live_b = []  # seconds from A's refused write to B's row of the slow step
    for wf in (*HOLDS, ALONE):
        runs = [r for r in slow_a[wf] if r["step"] == "slow"]
        assert t_part - FIRST_S < runs[0]["t"] < t_heal - FIRST_S, (wf, runs, t_part, t_heal)
        successor = by_wf[wf][1]
        got = [(r["worker"], r["epoch"]) for r in read_jsonl(tmp_path / f"{wf}.inv.jsonl")
               if r["step"] == "slow"]  # fmt: skip
        assert got == [(by_wf[wf][0]["owner"], by_wf[wf][0]["epoch"]),
                       (successor["owner"], successor["epoch"])], got  # fmt: skip
        row = recorded[(wf, "slow")]
        assert row["epoch"] == successor["epoch"], (wf, row)
        assert results[wf] == f"{successor['owner']}@{successor['epoch']}", (wf, results[wf])
        refusals = [e for e in all_events if e["event"] == "fenced" and e.get("by") == "write"
                    and e["worker"] in a_ids and e["wf"] == wf]  # fmt: skip
        assert [e["epoch"] for e in refusals] == [by_wf[wf][0]["epoch"]], refusals
        assert DB_FENCE in refusals[0]["reason"], refusals  # the database refused it
        assert refusals[0]["ts"] >= t_heal, refusals  # it was held by the network until then
        if wf != ALONE:
            under_live_b.append(_ts(row["created_at"]) - refusals[0]["ts"])
        else:  # refused under A's own epoch, lease lapsed, before anyone claimed it again
            assert refusals[0]["ts"] < _ts(successor["claimed_at"]), (refusals, successor)
    assert all(dt > 0 for dt in under_live_b), under_live_b

    # each refund in flight landed once, B's recovery said how, A's response was kept
    for tier, wf in REFUNDS.items():
        assert results[wf]["status"] == LANDED[tier], (tier, results[wf])
    assert sorted(r["key"] for r in ledger) == sorted({r["key"] for r in ledger})
    assert len(ledger) == len(REFUNDS)
    assert len(late) == len(REFUNDS), late
    assert {r["late_result"]["state_at_arrival"] for r in late} == {"committed"}, late

    assert violations == {}
    fenced = [e for e in all_events if e["event"] == "fenced" and e["worker"] in a_ids]
    refused_at = {wf: min(e["ts"] for e in fenced if e["wf"] == wf and e["by"] == "write")
                  for wf in held}  # fmt: skip
    summary = {
        "takeover_after_partition_s": sorted(round(t[1], 2) for t in takeovers if t[0] != ALONE),
        "claimed_after_expiry_ms": sorted(
            round(t[2] * 1000, 1) for t in takeovers if t[0] != ALONE
        ),
        "alone_reclaimed_after_heal_s": [
            round(t[1] - (t_heal - t_part), 2) for t in takeovers if t[0] == ALONE
        ],
        "partition_s": round(t_heal - t_part, 2),
        "refused_after_heal_s": sorted(round(t - t_heal, 2) for t in refused_at.values()),
        "refused_before_b_recorded_s": sorted(round(t, 2) for t in under_live_b),
        "fenced_events": {by: sum(e["by"] == by for e in fenced) for by in ("write", "heartbeat")},
        "late_results": len(late),
    }
    print(f"netns takeover: {summary}")
