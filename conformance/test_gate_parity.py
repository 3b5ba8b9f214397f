"""The differential parity test of the gated effect (docs/design.md#overview item 4, 5.7; issue "Gated effects").

For each fault at tiers 1, 2 and 3 the same scenario drives two worlds:
- the runtime: real worker subprocesses, the real local target (world/target.py), real
  SIGKILL at the kill points effect_after_dispatch / effect_after_send, then a successor worker;
- the reference (conformance/gate_reference.py): the decision table written from the spec,
  in memory, with a simulated clock.
Both see the same pre-recovery state and the same world events (hand refund, revoke, prune keys,
the clock past send_deadline + settle_margin and past the dedup window). Then: equal statuses,
equal verify() fields (ts and hashes aside), equal ledgers, equal journal kinds, equal effect
state; a worker killed before the send made no request (the target's access log).

Cells of one tier run side by side in one fresh database, each with its own target and its
own workflow names (conformance/parity_flows.py), so the waits for lease expiry and settle
overlap. `python -m conformance.test_gate_parity --table [--tier N] [--mode async]` prints the
parity table.

Mode (conformance/conftest.py MODES): every cell runs with plain workflows on the plain worker
("sync") and with their `async def` twins on the asyncio worker ("async"), against the same
reference: the same body (world/refund_agent.py), the same expected outcome. `make test` runs
every sync cell and ASYNC_DEFAULT of the async ones (a kill after the send at tiers 1 and 2, a
kill before it, a revoke during the outage); ILR_LONG=1 runs every async cell.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance import parity_flows as pf
from conformance.conftest import LONG, MODES, conformance_template, start_worker
from conformance.gate_reference import CRASHED, GateReference, RefTarget
from interlock_runtime import Runtime, db, journal, receipts, testing
from interlock_runtime.testing import WorkerProcess, wait_for
from world.target import Target
from world.target_client import TargetAdmin

DYING_TTL = 1.5  # lease of a worker that will be killed: the successor claims soon after
LIVE_TTL = 5.0  # lease of the workers that finish the cells (no takeover from them)
POLL = 0.2
TIMEOUT = 60.0
VERIFY_FIELDS = ("valid", "tamper_evident", "happened", "happened_once", "authorized_when_fired",
                 "assumptions_held", "refused", "sends", "rechecked_at_recovery")  # fmt: skip
KILL_POINT = {
    "crash_before_send": "effect_after_dispatch",
    "refund_during_outage": "effect_after_dispatch",
    "revoked_during_outage": "effect_after_dispatch",
    "crash_before_ack": "effect_after_send",
    "model_redecides": "effect_after_send",
    "key_expired": "effect_after_send",
}

# Cells where the runtime and the reference disagree, with the reason (xfail strict: a cell
# that starts to agree fails until it is removed from here).
DISAGREE: dict[str, str] = {}

# The async cells of the default suite; ILR_LONG=1 runs them all.
ASYNC_DEFAULT = ("crash_before_ack-t1", "crash_before_ack-t2", "crash_before_send-t1",
                 "revoked_during_outage-t2")  # fmt: skip


def selected(mode: str, cell: pf.Cell) -> bool:
    """Whether this run of the suite runs the cell in this mode."""
    return mode == "sync" or LONG or cell.id in ASYNC_DEFAULT


def wf_id(cell: pf.Cell, role: str) -> str:
    return f"{cell.id}.{role}"


@dataclass
class Observed:
    """What one world shows for one cell."""

    statuses: dict[str, str] = field(default_factory=dict)
    pre: dict | None = None  # the pre-recovery snapshot (crash cells)
    killed_posts: int | None = None  # POST /refunds made by the killed worker (access log)
    may_still_land: int | None = None  # how many effects the revoke returned
    verify: dict = field(default_factory=dict)
    ledger: list = field(default_factory=list)
    kinds: list = field(default_factory=list)
    shape: list = field(default_factory=list)  # each entry's kind, via, resolves, checks passed
    state: str | None = None


@dataclass
class Outcome:
    cell: pf.Cell
    runtime: Observed | None = None
    reference: Observed | None = None
    error: str | None = None
    seconds: float = 0.0


# -- the scenarios: one script per fault, run against either world ----------------------------


def scenario(cell: pf.Cell, w: Any) -> None:
    fault = cell.fault
    if fault == "grant_revoked":  # a standing grant revoked before the workflow runs
        grant = w.policy_grant()
        w.revoke(grant)
        w.start("a", grant=grant)
        w.result("a")
        return
    kill = KILL_POINT.get(fault)
    w.start("a", kill=kill)
    facts = w.decided("a")
    if fault == "stale_eligibility":  # a person refunds between the decision and the dispatch
        w.hand_refund(pf.AMOUNT)
    grant = w.approve("a", pf.AMOUNT, facts)
    if kill:
        w.killed("a", kill)
        # world events during the outage
        if fault == "refund_during_outage":
            w.hand_refund(pf.AMOUNT)
        if fault == "revoked_during_outage":
            w.revoke(grant)
        if fault == "key_expired":
            w.wait_dedup_age()
            w.prune_keys()
        w.snapshot()
        if fault == "model_redecides":  # a second decision offers 3000 for the same key
            w.start("b")
            w.approve("b", pf.REDECIDED, w.decided("b"))
            w.result("b")
        w.successor("a")
    w.result("a")
    if fault in ("duplicate_submit", "conflicting_payload"):
        w.start("b")
        amount = pf.AMOUNT if fault == "duplicate_submit" else pf.REDECIDED
        w.approve("b", amount, w.decided("b"))
        w.result("b")


# -- the reference world -----------------------------------------------------------------------


class ReferenceWorld:
    def __init__(self, cell: pf.Cell):
        self.cell = cell
        self.target = RefTarget(cell.tier, pf.PAYMENT, pf.PAID, cell.queryable)
        dedup = (
            {"dedup_window": pf.SHORT_DEDUP_WINDOW, "dedup_margin": pf.SHORT_DEDUP_MARGIN}
            if cell.short_dedup
            else {}
        )
        self.ref = GateReference(f"refund:{cell.id}", self.target, send_timeout=pf.SEND_TIMEOUT,
                                 settle_margin=pf.SETTLE_MARGIN, **dedup)  # fmt: skip
        self.calls: dict[str, dict] = {}
        self.out = Observed()

    def _call(self, role: str) -> None:
        c = self.calls[role]
        status = self.ref.call(wf_id(self.cell, role), c["payload"], c["facts"], c["grant"],
                               crash=c.pop("kill", None))  # fmt: skip
        self.out.statuses[role] = status

    def start(self, role: str, kill: str | None = None, grant: str | None = None) -> None:
        wf = wf_id(self.cell, role)
        self.ref.claim(wf)
        premises = self.target.capture()  # ctx.decide captures the premises (no effect id)
        self.calls[role] = {"kill": kill, "premises": premises}
        if grant:  # no approval step: straight to the effect
            payload = {"payment": pf.PAYMENT, "amount": pf.AMOUNT}
            self.calls[role].update(payload=payload, facts=premises, grant=grant)
            self._call(role)

    def decided(self, role: str) -> dict:
        return self.calls[role]["premises"]

    def approve(self, role: str, amount: int, facts: dict) -> str:
        payload = {"payment": pf.PAYMENT, "amount": amount}
        gid = self.ref.approve(f"grant-{role}", wf_id(self.cell, role), payload, facts, "alice")
        self.calls[role].update(payload=payload, facts=facts, grant=gid)
        self._call(role)  # the approval wakes the workflow; it reaches the effect
        return gid

    def policy_grant(self) -> str:
        return self.ref.grant("grant-policy")

    def revoke(self, gid: str) -> None:
        self.out.may_still_land = len(self.ref.revoke(gid))

    def hand_refund(self, amount: int) -> None:
        self.target.hand_refund(amount)

    def prune_keys(self) -> None:
        self.target.prune_keys()

    def wait_dedup_age(self) -> None:
        row = self.ref.row
        age = self.ref.clock - row.first_dispatched_at
        self.ref.advance(max(0.0, pf.SHORT_DEDUP_WINDOW - pf.SHORT_DEDUP_MARGIN - age) + 0.1)

    def killed(self, role: str, point: str) -> None:
        assert self.out.statuses.pop(role) == CRASHED, self.out.statuses
        wf = wf_id(self.cell, role)
        self.out.killed_posts = len(self.target.posts(f"{wf}@{self.ref.epochs[wf]}"))

    def snapshot(self) -> None:
        row, posts = self.ref.row, len(self.target.posts())
        self.out.pre = {"state": row.state, "sends": row.sends, "kinds": self.ref.kinds(),
                        "ledger": self.target.ledger(), "posts": posts}  # fmt: skip

    def successor(self, role: str) -> None:
        self.ref.claim(wf_id(self.cell, role))
        self._call(role)

    def result(self, role: str) -> str:
        return self.out.statuses[role]

    def finish(self) -> Observed:
        v = receipts.verify(self.ref.bundle())
        self.out.verify = {k: v[k] for k in VERIFY_FIELDS}
        self.out.ledger = self.target.ledger()
        self.out.kinds = self.ref.kinds()
        self.out.shape = shape(self.ref.entries)
        self.out.state = self.ref.row.state
        return self.out


# -- the runtime world ---------------------------------------------------------------------------


class Batch:
    """One fresh database, the shared worker for the cells without a crash, and a record of
    every process started, for the cells of one tier run side by side."""

    def __init__(self, dsn: str, log_dir: Path, cells: list[pf.Cell], mode: str = "sync"):
        self.dsn, self.log_dir, self.mode = dsn, log_dir, mode
        self.procs: list[WorkerProcess] = []
        self.lock = threading.Lock()
        shared = [pf.flow_name(c.id, "b", mode) for c in cells]
        shared += [pf.flow_name(c.id, "a", mode) for c in cells if not c.crash]
        self.worker("shared", only=shared, lease_ttl=LIVE_TTL, concurrency=8)

    def worker(self, worker_id: str, **kwargs: Any) -> WorkerProcess:
        kwargs.setdefault("poll", POLL)
        kwargs.setdefault("mode", self.mode)
        w = start_worker(self.dsn, worker_id, self.log_dir, **kwargs)
        with self.lock:
            self.procs.append(w)
        return w

    def close(self) -> None:
        for w in self.procs:
            w.close()


class RuntimeWorld:
    def __init__(self, cell: pf.Cell, batch: Batch):
        self.cell, self.batch = cell, batch
        self.target = Target(cell.tier, db=str(batch.log_dir / f"{cell.id}.sqlite")).start()
        self.admin = TargetAdmin(self.target.url)
        self.admin.create_payment(pf.PAYMENT, pf.PAID)
        self.rt = Runtime(batch.dsn, create_schema=False)
        self.dying: dict[str, WorkerProcess] = {}
        self.eid = journal.effect_id_for(f"refund:{cell.id}")
        self.out = Observed()

    def close(self) -> None:
        self.rt.close()
        self.target.close()

    def _flow(self, role: str) -> str:
        return pf.flow_name(self.cell.id, role, self.batch.mode)

    def start(self, role: str, kill: str | None = None, grant: str | None = None) -> None:
        if kill:
            self.dying[role] = self.batch.worker(f"{wf_id(self.cell, role)}-dying", kill_at=kill,
                                                 only=[self._flow(role)], lease_ttl=DYING_TTL,
                                                 concurrency=1)  # fmt: skip
        case = pf.case_input(self.cell, role, self.target.url, grant=grant)
        self.rt.start(pf.FLOWS[self._flow(role)], wf_id(self.cell, role), case)

    def decided(self, role: str) -> dict:
        wf = wf_id(self.cell, role)
        wait_for(lambda: (self.rt.describe(wf)["waiting"] or {}).get("signal") == "approve",
                 TIMEOUT, f"{wf} to wait for its approval")  # fmt: skip
        return self.rt.describe(wf)["steps"][0]["output"]["premises"]

    def approve(self, role: str, amount: int, facts: dict) -> str:
        payload = {"payment": pf.PAYMENT, "amount": amount}
        return self.rt.approve(wf_id(self.cell, role), payload, facts, by="alice")

    def policy_grant(self) -> str:
        return self.rt.grant("agent", "refund", by="policy")

    def revoke(self, gid: str) -> None:
        self.out.may_still_land = len(self.rt.revoke(gid, by="alice"))

    def hand_refund(self, amount: int) -> None:
        self.admin.hand_refund(pf.PAYMENT, amount)

    def prune_keys(self) -> None:
        self.admin.prune_keys()

    def wait_dedup_age(self) -> None:
        """Until the database-clock age of the first dispatch passes dedup_window - margin."""
        limit = pf.SHORT_DEDUP_WINDOW - pf.SHORT_DEDUP_MARGIN
        wf = wf_id(self.cell, "a")

        sql = ("select extract(epoch from now() - first_dispatched_at)::float8 as age "
               "from ilr.effects where effect_id = %s")  # fmt: skip
        with db.connect(self.batch.dsn) as conn:
            wait_for(lambda: conn.execute(sql, (self.eid,)).fetchone()["age"] > limit, TIMEOUT,
                     f"{wf}: the dispatch to age past {limit}s on the database clock")  # fmt: skip

    def killed(self, role: str, point: str) -> None:
        dying = self.dying[role]
        assert dying.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL, dying.events()[-5:]
        self.out.killed_posts = len([p for p in self._posts() if p["worker"] == dying.worker_id])

    def _posts(self) -> list[dict]:
        return self.admin.log(path="/refunds", method="POST")

    def _ledger(self) -> list[tuple[int, str]]:
        refunds = self.admin.ledger()["refunds"]
        return [(r["amount"], r["source"]) for r in refunds if r["payment"] == pf.PAYMENT]

    def _kinds(self) -> list[str]:
        return [e["kind"] for e in self.rt.receipt(self.eid)["entries"]]

    def snapshot(self) -> None:
        row = self.rt.effects(wf_id(self.cell, "a"))[0]
        self.out.pre = {"state": row["state"], "sends": row["sends"], "kinds": self._kinds(),
                        "ledger": self._ledger(), "posts": len(self._posts())}  # fmt: skip

    def successor(self, role: str) -> None:
        self.batch.worker(f"{wf_id(self.cell, role)}-successor", only=[self._flow(role)],
                          lease_ttl=LIVE_TTL, concurrency=1)  # fmt: skip

    def result(self, role: str) -> str:
        status = self.rt.result(wf_id(self.cell, role), timeout=TIMEOUT)["status"]
        self.out.statuses[role] = status
        return status

    def finish(self) -> Observed:
        entries = self.rt.receipt(self.eid)["entries"]
        v = receipts.verify(self.rt.receipt(self.eid))
        self.out.verify = {k: v[k] for k in VERIFY_FIELDS}
        self.out.ledger = self._ledger()
        self.out.kinds = [e["kind"] for e in entries]
        self.out.shape = shape(entries)
        self.out.state = self.rt.effects(wf_id(self.cell, "a"))[0]["state"]
        return self.out


def shape(entries: list[dict]) -> list[tuple]:
    """The decisions an entry records, without ts, hashes or wording: kind, via, resolves, and
    whether its grant check passed and its premise check found violations."""
    out = []
    for e in entries:
        checks = e.get("checks") or e.get("rechecked") or {}
        violated = bool(checks["violations"]) if "violations" in checks else None
        out.append((e["kind"], e.get("via"), e.get("resolves"), checks.get("lease_live"), violated))
    return out


def _tuples(obs: Observed) -> Observed:
    obs.ledger = [tuple(x) for x in obs.ledger]
    obs.statuses = dict(sorted(obs.statuses.items()))
    if obs.pre:
        obs.pre["ledger"] = [tuple(x) for x in obs.pre["ledger"]]
    return obs


def run_cell(cell: pf.Cell, batch: Batch) -> Outcome:
    out = Outcome(cell)
    t0 = time.monotonic()
    try:
        ref = ReferenceWorld(cell)
        scenario(cell, ref)
        out.reference = _tuples(ref.finish())
        world = RuntimeWorld(cell, batch)
        try:
            scenario(cell, world)
            out.runtime = _tuples(world.finish())
        finally:
            world.close()
    except Exception:  # noqa: BLE001 - reported by the cell's test
        out.error = traceback.format_exc()
    out.seconds = time.monotonic() - t0
    return out


def run_batch(cells: list[pf.Cell], admin: str, template: str, log_dir: Path,
              mode: str = "sync") -> dict:  # fmt: skip
    """Run the cells side by side in one fresh database; returns {cell id: Outcome}."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with testing.fresh_database(admin, template) as dsn:
        batch = Batch(dsn, log_dir, cells, mode)
        try:
            with ThreadPoolExecutor(len(cells)) as pool:
                done = list(pool.map(lambda c: run_cell(c, batch), cells))
        finally:
            batch.close()
    return {o.cell.id: o for o in done}


class ParityRuns:
    """Runs the selected cells of a tier in a mode once, on first use, and keeps the outcomes."""

    def __init__(self, admin: str, template: str, log_dir: Path, every: bool = False):
        """`every`: every cell in every mode (the table command), not the suite's selection."""
        self.admin, self.template, self.log_dir, self.every = admin, template, log_dir, every
        self.by_tier: dict[tuple[str, int], dict[str, Outcome]] = {}

    def outcome(self, cell: pf.Cell, mode: str = "sync") -> Outcome:
        key = (mode, cell.tier)
        if key not in self.by_tier:
            cells = [c for c in pf.CELLS
                     if c.tier == cell.tier and not c.skip
                     and (self.every or selected(mode, c))]  # fmt: skip
            try:
                self.by_tier[key] = run_batch(cells, self.admin, self.template,
                                              self.log_dir / f"{mode}-tier{cell.tier}", mode)  # fmt: skip
            except Exception:  # noqa: BLE001 - the batch itself failed: every cell reports it
                error = traceback.format_exc()
                self.by_tier[key] = {c.id: Outcome(c, error=error) for c in cells}
        return self.by_tier[key][cell.id]


# -- the table ----------------------------------------------------------------------------------


def _status(obs: Observed | None) -> str:
    if obs is None:
        return "-"
    return ", ".join(f"{r}={s}" for r, s in obs.statuses.items()) if len(obs.statuses) > 1 \
        else next(iter(obs.statuses.values()), "-")  # fmt: skip


def _fields(obs: Observed | None) -> str:
    if obs is None:
        return "-"
    v = obs.verify
    short = {True: "T", False: "F", None: "-", "unknown": "?"}
    flags = "".join(short.get(v[k], str(v[k])) for k in (
        "happened", "happened_once", "authorized_when_fired", "assumptions_held", "refused",
        "rechecked_at_recovery"))  # fmt: skip
    return f"{flags} s={v['sends']}{'' if v['valid'] else ' INVALID'}"


def _amounts(obs: Observed | None) -> str:
    return "-" if obs is None else str([amount for amount, _ in obs.ledger])


def table(outcomes: list[Outcome]) -> str:
    """fault x tier: runtime status / reference status, ledger, the verify fields."""
    head = (f"{'fault':<24}{'tier':<6}{'runtime status':<52}{'reference status':<52}"
            f"{'ledger (rt | ref)':<30}verify rt | ref")  # fmt: skip
    lines = [head, "-" * len(head),
             "verify flags: happened, happened_once, authorized_when_fired, assumptions_held, "
             "refused, rechecked_at_recovery (T/F, ? unknown, - none); s = sends"]  # fmt: skip
    for o in outcomes:
        tier = f"t{o.cell.tier}" + ("nq" if o.cell.queryable is False else "")
        if o.cell.skip:
            lines.append(f"{pf.FAULTS[o.cell.fault]:<24}{tier:<6}n/a: {o.cell.skip}")
            continue
        fault = pf.FAULTS[o.cell.fault]
        if o.error:
            lines.append(f"{fault:<24}{tier:<6}ERROR {o.error.splitlines()[-1]}")
            continue
        ledgers = f"{_amounts(o.runtime)} | {_amounts(o.reference)}"
        verify = f"{_fields(o.runtime)} | {_fields(o.reference)}"
        mark = "" if _agree(o) else "   <-- DISAGREE"
        statuses = f"{_status(o.runtime):<52}{_status(o.reference):<52}"
        lines.append(f"{fault:<24}{tier:<6}{statuses}{ledgers:<30}{verify}{mark}")
    return "\n".join(lines)


def _comparable(obs: Observed) -> dict:
    return {"statuses": obs.statuses, "verify": obs.verify, "ledger": obs.ledger,
            "kinds": obs.kinds, "shape": obs.shape, "state": obs.state, "pre": obs.pre,
            "killed_posts": obs.killed_posts, "may_still_land": obs.may_still_land}  # fmt: skip


def _agree(o: Outcome) -> bool:
    return (o.error is None and o.runtime is not None and o.reference is not None
            and _comparable(o.runtime) == _comparable(o.reference))  # fmt: skip


# -- the tests -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parity(admin_dsn: str, template_db: str, tmp_path_factory) -> ParityRuns:
    return ParityRuns(admin_dsn, template_db, tmp_path_factory.mktemp("gate_parity"))


def _params() -> list:
    out = []
    for mode in MODES:
        for cell in pf.CELLS:
            marks = [pytest.mark.slow]
            if cell.skip:
                marks.append(pytest.mark.skip(reason=cell.skip))
            elif not selected(mode, cell):
                marks.append(pytest.mark.skip(reason="async cell outside the default subset "
                                              "(ASYNC_DEFAULT): run with ILR_LONG=1"))  # fmt: skip
            if cell.id in DISAGREE:
                marks.append(pytest.mark.xfail(strict=True, reason=DISAGREE[cell.id]))
            out.append(pytest.param(mode, cell, id=f"{mode}-{cell.id}", marks=marks))
    return out


@pytest.mark.parametrize(("mode", "cell"), _params())
def test_gate_parity(parity: ParityRuns, mode: str, cell: pf.Cell) -> None:
    o = parity.outcome(cell, mode)
    assert o.error is None, o.error
    rt, ref = o.runtime, o.reference
    assert rt.verify["valid"] and ref.verify["valid"], (rt.verify, ref.verify)
    assert rt.statuses == ref.statuses
    if cell.crash:
        assert rt.pre == ref.pre, "the pre-recovery states differ"
        assert CRASHED not in ref.statuses.values()
    if KILL_POINT.get(cell.fault) == "effect_after_dispatch":
        assert rt.killed_posts == ref.killed_posts == 0, "killed before the send, yet it sent"
    elif cell.crash:
        assert rt.killed_posts == ref.killed_posts == 1, "killed after the send: one request"
    assert rt.may_still_land == ref.may_still_land  # rt.revoke: the effects that may still land
    assert rt.verify == ref.verify
    assert rt.ledger == ref.ledger
    assert rt.kinds == ref.kinds
    assert rt.shape == ref.shape
    assert rt.state == ref.state


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_parity_table(parity: ParityRuns, mode: str, capsys) -> None:
    """Print fault x tier for the issue's closing note (runs after the cells, reusing them)."""
    cells = [c for c in pf.CELLS if c.skip or selected(mode, c)]
    outcomes = [Outcome(c) if c.skip else parity.outcome(c, mode) for c in cells]
    text = table(_order(outcomes))
    with capsys.disabled():
        print(f"\n{mode} workflows\n{text}")
    assert all(o.cell.skip or o.error is None for o in outcomes)


# -- the reference alone: branches the parity cells do not reach ------------------------------


def _reference(tier: int, **kwargs: Any) -> tuple[GateReference, RefTarget]:
    target = RefTarget(tier, pf.PAYMENT, pf.PAID)
    ref = GateReference("refund:unit", target, send_timeout=pf.SEND_TIMEOUT,
                        settle_margin=pf.SETTLE_MARGIN, **kwargs)  # fmt: skip
    ref.grant("g")
    return ref, target


PAYLOAD = {"payment": pf.PAYMENT, "amount": pf.AMOUNT}


def test_reference_refuses_a_cancelled_call_and_a_rejected_send() -> None:
    ref, target = _reference(2)
    ref.cancel("wf")
    assert ref.call("wf", PAYLOAD, target.capture(), "g") == "REFUSED:cancelled"
    ref, target = _reference(2)
    target.hand_refund(pf.PAID - 1000)  # 1000 left: the target refuses 2000 (a definite 4xx)
    assert ref.call("wf", PAYLOAD, target.capture(), "g") == "REFUSED:target_error"
    v = receipts.verify(ref.bundle())
    assert v["valid"] and v["refused"] and v["happened"] is False and v["sends"] == 1
    assert ref.row.state == "proposed" and target.ledger() == [(pf.PAID - 1000, "hand")]


def test_reference_lost_response_is_resolved_by_the_same_workflow_after_the_settle() -> None:
    ref, target = _reference(2)
    target.drop_responses = 1  # the refund lands, the response is lost (a timeout)
    assert ref.call("wf", PAYLOAD, target.capture(), "g") == "COMMITTED_ON_QUERY"
    assert ref.epochs["wf"] == 2  # it suspended until send_deadline + settle, then was reclaimed
    assert target.ledger() == [(pf.AMOUNT, "api")] and len(target.posts()) == 1


def test_reference_tier1_without_the_age_downgrade_applies_twice_after_pruning() -> None:
    """Why recovery (a) downgrades an old tier-1 effect: a resend after the target forgot the
    key applies again (here the window is infinite, so nothing downgrades)."""
    ref, target = _reference(1)
    premises = target.capture()
    assert ref.call("wf", PAYLOAD, premises, "g", crash="effect_after_send") == CRASHED
    target.prune_keys()
    ref.claim("wf")
    assert ref.call("wf", PAYLOAD, premises, "g") == "COMMITTED_BY_RETRY"
    assert target.ledger() == [(pf.AMOUNT, "api"), (pf.AMOUNT, "api")]


def test_reference_refuses_a_thin_dedup_margin() -> None:
    with pytest.raises(ValueError, match="C2"):
        _reference(1, dedup_window=100.0, dedup_margin=pf.SEND_TIMEOUT + pf.SETTLE_MARGIN)


def _order(outcomes: list[Outcome]) -> list[Outcome]:
    faults = list(pf.FAULTS)
    return sorted(outcomes, key=lambda o: (faults.index(o.cell.fault), o.cell.tier,
                                           o.cell.queryable is False))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m conformance.test_gate_parity")
    ap.add_argument("--table", action="store_true", help="run the cells and print the table")
    ap.add_argument("--tier", type=int, action="append", choices=(1, 2, 3))
    ap.add_argument("--mode", choices=MODES, default="sync",
                    help="plain workflows (sync) or their async twins on the asyncio worker")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None,
                    help="also write the table as markdown here, with the commit it ran at")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.table:
        ap.print_help()
        return 2
    tiers = args.tier or [1, 2, 3]
    admin = testing.admin_dsn()
    t0 = time.monotonic()
    with conformance_template(admin) as template, tempfile.TemporaryDirectory() as tmp:
        runs = ParityRuns(admin, template, Path(tmp), every=True)
        outcomes = [Outcome(c) if c.skip else runs.outcome(c, args.mode)
                    for c in pf.CELLS if c.tier in tiers]  # fmt: skip
    text = table(_order(outcomes))
    wall = time.monotonic() - t0
    print(text)
    print(f"\n{len(outcomes)} cells in {wall:.1f} s")
    unexpected = [o.cell.id for o in outcomes
                  if not o.cell.skip and _agree(o) == (o.cell.id in DISAGREE)]  # fmt: skip
    if unexpected:
        print(f"unexpected (dis)agreement: {', '.join(unexpected)}")
    if args.out:
        _write_table(args.out, text, args, len(outcomes), wall, unexpected)
    return 1 if unexpected else 0


def _write_table(path: Path, text: str, args: argparse.Namespace, cells: int, wall: float,
                 unexpected: list[str]) -> None:  # fmt: skip
    import platform

    import psycopg

    from world import gitstate  # one rule for every report: results/ does not make it dirty

    dirty = gitstate.dirty()
    tiers = " ".join(f"--tier {t}" for t in args.tier or [])
    out = f" --out {path}" if not path.is_absolute() else ""
    command = (
        f"python -m conformance.test_gate_parity --table --mode {args.mode} {tiers}".strip() + out
    )
    agree = "every cell agrees with the reference" if not unexpected else (
        "UNEXPECTED (dis)agreement: " + ", ".join(unexpected))  # fmt: skip
    path.write_text(
        f"# Gate parity, {args.mode} workflows\n\n"
        f"Generated by `{command}` at commit `{gitstate.commit()[:12]}`"
        f"{' (dirty: the code differed from it)' if dirty else ''} (python "
        f"{platform.python_version()}, psycopg {psycopg.__version__}); {cells} cells in "
        f"{wall:.1f} s; {agree}.\n\n"
        "Each cell drives the same scenario against the runtime (real worker subprocesses, the "
        "real local target, real SIGKILL at the kill point, then a successor) and against the "
        "reference decision table (conformance/gate_reference.py); the runtime's statuses, "
        "verify() fields, ledger, journal kinds and effect state must equal the reference's. "
        + ("Mode async: every workflow is the `async def` twin (parity_async.<cell>.<role>) on "
           "the asyncio worker.\n\n" if args.mode == "async" else "\n\n")
        + "```\n" + text + "\n```\n")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
