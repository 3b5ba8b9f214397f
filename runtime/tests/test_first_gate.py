"""The first gate (docs/design.md#concessions R1): takeover after a real SIGKILL, and a SIGSTOPped zombie fenced.

Everything is asserted from the database: the claim history with database timestamps, the
step rows, and the invocation log the step bodies write.
"""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import read_jsonl, wait_for
from interlock_runtime import Runtime

TTL = 3.0


def _claims(rt: Runtime, wf: str) -> list[dict]:
    return rt.claim_history(wf)


def _steps(rt: Runtime, wf: str) -> list[dict]:
    return rt.describe(wf)["steps"]


def assert_claim_history_safe(claims: list[dict]) -> None:
    """LeaseMutex and TakeoverOnlyAfterExpiry over the claim history (database clock)."""
    assert [c["epoch"] for c in claims] == list(range(1, len(claims) + 1))
    for c in claims:
        if c["prev_status"] == "running":
            assert c["claimed_at"] >= c["prev_lease_expires_at"], c


def assert_no_rerun_after_complete(steps: list[dict], invocations: list[dict]) -> None:
    """NoRerunAfterComplete: no body of a step started after its row committed."""
    recorded_at = {s["name"]: s["created_at"].timestamp() for s in steps}
    for inv in invocations:
        if inv["step"] in recorded_at:
            assert inv["t"] < recorded_at[inv["step"]], (inv, recorded_at)


def test_takeover_after_sigkill_waits_for_lease_expiry(dsn: str, workers, tmp_path: Path) -> None:
    log = tmp_path / "invocations.jsonl"
    with Runtime(dsn) as rt:
        from flows import three_steps

        rt.start(three_steps, "wf-gate", {"log": str(log), "sleep": {"s2": 60}})
        a = workers("A", lease_ttl=TTL)
        b = workers("B", lease_ttl=TTL)
        first = wait_for(
            lambda: [i for i in read_jsonl(log) if i["step"] == "s2"], 30, "s2 to start"
        )
        holder, other = (a, b) if first[0]["worker"] == "A" else (b, a)
        holder.signal(signal.SIGKILL)
        assert holder.proc.wait(timeout=10) == -signal.SIGKILL

        assert rt.result("wf-gate", timeout=30) == [
            {"step": "s1", "worker": holder.worker_id},
            {"step": "s2", "worker": other.worker_id},
            {"step": "s3", "worker": other.worker_id},
        ]
        claims = _claims(rt, "wf-gate")
        steps = _steps(rt, "wf-gate")

    invocations = read_jsonl(log)
    assert [(i["step"], i["worker"]) for i in invocations] == [
        ("s1", holder.worker_id),
        ("s2", holder.worker_id),  # killed mid-body: at least once, like an activity
        ("s2", other.worker_id),
        ("s3", other.worker_id),
    ]
    assert [(c["owner"], c["prev_status"]) for c in claims] == [
        (holder.worker_id, "pending"),
        (other.worker_id, "running"),
    ]
    assert_claim_history_safe(claims)
    # The successor waited for the dead holder's lease, which was live when it died.
    killed_lease = claims[1]["prev_lease_expires_at"].timestamp()
    assert killed_lease > first[0]["t"]
    assert [(s["name"], s["epoch"]) for s in steps] == [("s1", 1), ("s2", 2), ("s3", 2)]
    assert_no_rerun_after_complete(steps, invocations)


def test_sigstopped_zombie_is_fenced_and_changes_nothing(dsn: str, workers, tmp_path: Path) -> None:
    from flows import three_steps

    log = tmp_path / "invocations.jsonl"
    with Runtime(dsn) as rt:
        rt.start(three_steps, "wf-zombie", {"log": str(log), "sleep": {"s1": 4}})
        zombie = workers("Z", lease_ttl=TTL)
        wait_for(lambda: read_jsonl(log), 30, "Z to start s1")
        zombie.signal(signal.SIGSTOP)
        zombie.wait_stopped()

        successor = workers("S", lease_ttl=TTL)
        assert rt.result("wf-zombie", timeout=30) == [
            {"step": "s1", "worker": "S"},
            {"step": "s2", "worker": "S"},
            {"step": "s3", "worker": "S"},
        ]
        before = rt.describe("wf-zombie")

        zombie.signal(signal.SIGCONT)
        event = zombie.wait_event("fenced", by="write", timeout=30)
        assert event["epoch"] == 1 and event["wf"] == "wf-zombie"
        after = rt.describe("wf-zombie")
        claims = _claims(rt, "wf-zombie")

    assert after == before  # the zombie's write changed nothing
    assert all(s["epoch"] == 2 for s in after["steps"])
    assert [(c["owner"], c["epoch"]) for c in claims] == [("Z", 1), ("S", 2)]
    assert_claim_history_safe(claims)
    assert_no_rerun_after_complete(after["steps"], read_jsonl(log))
    assert [i["worker"] for i in read_jsonl(log)] == ["Z", "S", "S", "S"]
    assert successor.proc.poll() is None
