"""Run sources for the conformance checks: real runs whose evidence the invariants judge.

Each source drives real worker subprocesses (runtime/tests/flows.py) against a fresh database
and the real local target, with real SIGKILL and SIGSTOP, then returns everything the run left
behind: the database, the target ledgers and access logs, and the worker event logs. The
Prove harness adds its own runs as another source.

A source runs in a mode (conformance/conftest.py MODES): "sync", the plain workflows on the
plain worker, or "async", their `async def` twins (conformance/source_flows_async.py: the same
names, steps and bodies) on the asyncio worker. The script, the faults and what it expects at
the end are the same.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from conformance.conftest import REPO as ROOT
from conformance.conftest import mode_args
from conformance.invariants import record_revoke, target_config
from interlock_runtime import Runtime, testing
from interlock_runtime.testing import WorkerProcess, wait_for
from world.target import Target
from world.target_client import TargetAdmin

REPO = Path(__file__).resolve().parents[1]
FLOWS = REPO / "runtime" / "tests"


def _flows() -> ModuleType:
    """runtime/tests/flows.py under the name `flows`, the module name the workers import it by
    (their PYTHONPATH holds FLOWS); the one already imported when pytest collected it."""
    if "flows" not in sys.modules:
        spec = importlib.util.spec_from_file_location("flows", FLOWS / "flows.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["flows"] = module
        spec.loader.exec_module(module)
    return sys.modules["flows"]


flows = _flows()


def flows_for(mode: str) -> ModuleType:
    """The workflows of a mode: runtime/tests/flows.py, or their async twins."""
    if mode == "sync":
        return flows
    mode_args(mode)  # a known mode
    return importlib.import_module("conformance.source_flows_async")


PAYMENT = "pay_881"


@dataclass
class RunRecord:
    """What one source produced: counts that prove it was not vacuous, and the evidence."""

    dsn: str
    workers: list[WorkerProcess] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    revokes: list[dict] = field(default_factory=list)  # what each rt.revoke() returned

    def events(self) -> list[dict]:
        return [e for w in self.workers for e in w.events()]

    # Each row names its target: the same payment lives on several targets here, and a premise
    # read at one says nothing about another's ledger (invariants._stale_sends).
    def ledger(self) -> list[dict]:
        return [dict(r, target=t.url) for t in self.targets
                for r in TargetAdmin(t.url).ledger()["refunds"]]  # fmt: skip

    def access_log(self) -> list[dict]:
        return [dict(r, target=t.url) for t in self.targets for r in TargetAdmin(t.url).log()]

    def target_configs(self) -> dict[str, dict]:
        return {t.url: target_config(t.url) for t in self.targets}


class _Session:
    def __init__(self, record: RunRecord, log_dir: Path, stack: ExitStack, mode: str = "sync"):
        self.record, self.log_dir, self.stack, self.mode = record, log_dir, stack, mode
        self.flows = flows_for(mode)

    def worker(self, worker_id: str, **kwargs) -> WorkerProcess:
        kwargs.setdefault("lease_ttl", 1.5)
        kwargs["extra_args"] = mode_args(self.mode) + tuple(kwargs.get("extra_args", ()))
        module = "flows" if self.mode == "sync" else "conformance.source_flows_async"
        path = str(FLOWS) if self.mode == "sync" else os.pathsep.join((str(ROOT), str(FLOWS)))
        w = WorkerProcess(self.record.dsn, worker_id, self.log_dir, module, pythonpath=path,
                          cwd=str(FLOWS), **kwargs)  # fmt: skip
        self.stack.callback(w.close)
        self.record.workers.append(w)
        return w

    def target(self, tier: int) -> Target:
        t = Target(tier, db=str(self.log_dir / f"ledger{len(self.record.targets)}.db")).start()
        self.stack.callback(t.stop)
        TargetAdmin(t.url).create_payment(PAYMENT, 10000)
        self.record.targets.append(t)
        return t


def _approve(rt: Runtime, wf: str, amount: int = 2000) -> str:
    wait_for(
        lambda: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve", 30, f"{wf} to wait"
    )
    decided = rt.describe(wf)["steps"][0]["output"]
    return rt.approve(wf, {"payment": PAYMENT, "amount": amount}, decided["premises"], by="alice")


def durable_source(s: _Session, rt: Runtime) -> None:
    """Takeover after SIGKILL, a SIGSTOPped zombie, timers, signals, fork, continue-as-new."""

    def log(wf: str) -> str:  # one invocation log per workflow: bodies sleep on first call only
        return str(s.log_dir / f"{wf}.inv.jsonl")

    rt.start(s.flows.three_steps, "d-kill", {"log": log("d-kill"), "sleep": {"s2": 30}})
    rt.start(s.flows.waiter, "d-sig", {"timeout": 0.5})
    rt.signal("d-sig", "go", {"n": 1})
    rt.signal("d-sig", "go", {"n": 2})
    rt.start(s.flows.sleeper, "d-timer", {"log": log("d-timer"), "seconds": 1})
    rt.start(s.flows.counter, "d-count", {"n": 0, "until": 3})
    rt.start(s.flows.forkable, "d-fork", {"log": log("d-fork")})
    a = s.worker("A")
    wait_for(lambda: any(e.get("event") == "step_started" and e.get("wf") == "d-kill"
                         and e.get("seq") == 2 for e in a.events()), 30, "d-kill s2")  # fmt: skip
    a.signal(signal.SIGKILL)
    a.proc.wait(10)
    # Z serves d-zombie alone: it is SIGSTOPped at a moment nobody chooses, and a pause inside
    # another run it held (between its local lease check and a step body) would lift A1 there.
    z = s.worker("Z", lease_ttl=1.5, extra_args=("--only", "zombie_steps@1"))
    rt.start(s.flows.zombie_steps, "d-zombie", {"log": log("d-zombie"), "sleep": {"s1": 4}})
    wait_for(lambda: any(e.get("wf") == "d-zombie" and e.get("event") == "step_started"
                         for e in z.events()), 30, "d-zombie s1")  # fmt: skip
    z.signal(signal.SIGSTOP)
    z.wait_stopped()
    s.worker("B")
    for wf in ("d-kill", "d-sig", "d-timer", "d-count", "d-fork", "d-zombie"):
        rt.result(wf, timeout=60)
    z.signal(signal.SIGCONT)
    z.wait_event("fenced", wf="d-zombie", by="write", timeout=30)
    rt.fork("d-fork", at_seq=2, new_id="d-fork2")
    rt.result("d-fork2", timeout=30)


def effects_source(s: _Session, rt: Runtime) -> None:
    """Crash after send at each tier, a hand refund and a revoke during outages, a fork that
    reaches a committed effect, a cancelled workflow's effect."""
    targets = {tier: s.target(tier) for tier in (1, 2, 3)}
    outage = s.target(2)  # S02's hand refund must not touch the other cases' payment

    def case(tier: int, cid: str, target: Target | None = None, **extra) -> dict:
        return {
            "id": cid,
            "target_url": (target or targets[tier]).url,
            "payment": PAYMENT,
            "tier": tier,
            **extra,
        }

    dying = s.worker("K1", env={"ILR_KILL_AT": "effect_after_send"}, concurrency=1)
    for tier in (1, 2, 3):
        rt.start(s.flows.refund, f"e-s01-t{tier}", case(tier, f"s01-t{tier}"))
        if tier == 1:
            _approve(rt, "e-s01-t1")
            dying.proc.wait(30)
    s.worker("K2", env={"ILR_KILL_AT": "effect_after_dispatch"}, concurrency=1)
    rt.start(s.flows.refund, "e-s02", case(2, "s02", outage))
    rt.start(s.flows.refund, "e-s03", case(1, "s03"))
    k2 = s.record.workers[-1]
    _approve(rt, "e-s02")
    k2.proc.wait(30)
    TargetAdmin(outage.url).hand_refund(PAYMENT, 2000)
    k3 = s.worker("K3", env={"ILR_KILL_AT": "effect_after_dispatch"}, concurrency=1)
    g = _approve(rt, "e-s03")
    k3.proc.wait(30)
    record_revoke(rt, g, "alice", s.record.revokes)
    s.worker("W")
    for tier in (2, 3):
        _approve(rt, f"e-s01-t{tier}")
    grant = rt.grant("agent", "refund", by="policy")
    rt.start(
        s.flows.cancel_then_refund, "e-cancel", case(1, "cx", payload={"amount": 500}, grant=grant)
    )
    wait_for(lambda: rt.describe("e-cancel")["status"] == "sleeping", 30, "e-cancel to wait")
    rt.cancel("e-cancel", by="ops")
    expected = {"e-s01-t1": "COMMITTED_BY_RETRY", "e-s01-t2": "COMMITTED", "e-s01-t3": "COMMITTED",
                "e-s02": "REFUSED:stale_premise_at_recovery", "e-s03": "REFUSED:authority_at_recovery",
                "e-cancel": "REFUSED:cancelled"}  # fmt: skip
    rt.fork("e-s01-t2", at_seq=3, new_id="e-fork") if rt.result("e-s01-t2", timeout=60) else None
    expected["e-fork"] = "DUPLICATE_IGNORED"
    got = {wf: rt.result(wf, timeout=60)["status"] for wf in expected}
    assert got == expected, got  # the source exercised what it claims to


SOURCES: dict[str, Callable[[_Session, Runtime], None]] = {
    "durable": durable_source,
    "effects": effects_source,
}


@contextmanager
def run_source(name: str, admin: str, template: str, log_dir: Path,
               mode: str = "sync") -> Iterator[RunRecord]:  # fmt: skip
    """Run one source in a fresh database, its workflows in `mode`; yield its record while
    everything is still up."""
    with testing.fresh_database(admin, template) as dsn, ExitStack() as stack:
        record = RunRecord(dsn)
        session = _Session(record, log_dir, stack, mode)
        with Runtime(dsn) as rt:
            SOURCES[name](session, rt)
        yield record
