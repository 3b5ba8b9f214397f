"""docs/design.md#model-findings C1: the local lease deadline, checked before every step body.

Between a claim and the first body there is no fenced write. If the load of a run's history
stalls past the lease, a successor can claim and record the next steps meanwhile; the stale
load then lacks them and, without the local check, the first worker would run a body again
after its row committed (NoRerunAfterComplete). Here the stall is real: worker A reaches
Postgres through the fault proxy, whose responses are held (delay_response) from right after
A's claim until B has recorded the rest. A's query ran on the server before B claimed, so its
answer is stale. (A fresh run's first claim reads no history, so the run here has one.)
"""

from __future__ import annotations

import signal

from flows import echo, sleeper
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from conftest import read_jsonl, wait_for
from interlock_runtime import Runtime
from world.fault_proxy import FaultProxy

TTL = 2.0


def _through(dsn: str, proxy: FaultProxy) -> str:
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=str(proxy.port))
    return make_conninfo(**params)


def test_a_stalled_load_past_the_lease_never_reruns_a_recorded_step(dsn, workers, tmp_path) -> None:
    params = conninfo_to_dict(dsn)
    log = tmp_path / "inv.jsonl"
    with FaultProxy(upstream=(params["host"], int(params["port"]))) as proxy, Runtime(dsn) as rt:
        # A warm-up run gives A's only run thread an open connection, so that the stalled load
        # below is a query whose bytes reach the server, not a connection handshake.
        rt.start(echo, "wf-warm", {"x": 1})
        a = workers("A", dsn=_through(dsn, proxy), lease_ttl=TTL, concurrency=1,
                    env={"ILR_STOP_AT": "claimed@3"})  # fmt: skip
        assert rt.result("wf-warm", timeout=20) == {"x": 1}

        # A records `before` (claim 2), sleeps; its third claim wakes the run. A run with
        # history must load it (a fresh run's first claim reads nothing), and that load stalls.
        rt.start(sleeper, "wf-c1", {"log": str(log), "seconds": 0.5})
        a.wait_stopped()  # A holds the claim of wf-c1 (epoch 2) and is paused right after it
        proxy.set_mode("delay_response", ms=600_000)  # every answer to A is now held
        a.signal(signal.SIGCONT)
        wait_for(lambda: proxy.status()["held_bytes_down"] > 0, 10, "A's load to reach Postgres")

        workers("B", lease_ttl=TTL)
        wait_for(lambda: any(s["name"] == "after" for s in rt.describe("wf-c1")["steps"]), 30,
                 "B to record the rest")  # fmt: skip
        proxy.set_mode("pass")  # the partition heals: A gets its stale step-row load

        event = a.wait_event("fenced", wf="wf-c1", by="write", timeout=20)
        # `after` ran once, by B: with its stale history A never started a body.
        assert [(i["step"], i["worker"]) for i in read_jsonl(log)] == [
            ("before", "A"), ("after", "B")]  # fmt: skip
        assert "local lease deadline" in event["reason"]
        assert [r["worker"] for r in rt.result("wf-c1", timeout=20)] == ["A", "B"]
        claims = rt.claim_history("wf-c1")
        steps = rt.describe("wf-c1")["steps"]

    assert [(c["owner"], c["epoch"]) for c in claims] == [("A", 1), ("A", 2), ("B", 3)]
    assert claims[2]["claimed_at"] >= claims[2]["prev_lease_expires_at"]
    assert [(s["name"], s["epoch"]) for s in steps] == [("before", 1), ("sleep", 3), ("after", 3)]
