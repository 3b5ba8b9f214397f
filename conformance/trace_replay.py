"""Model-based trace replay (issue 6, docs/design.md#beyond): TLC behaviours replayed on the real runtime.

A TLC trace (results/tlc_traces/*.json: broken-config and baseline counterexamples;
.data/tlc/traces/*.json: the same format, every violation of any `python -m models.tlc` run;
conformance/sim_traces/*.json: seeded random behaviours of the correct model) is translated
action by action into a real schedule, and a driver replays it against real Postgres, real
worker subprocesses and the real local target (in its own process):

- the model's workers are worker processes; which one acted is read from the state diff;
- a worker that must stand still while something else happens is SIGSTOPped at the
  instrumented point of its program counter (ILR_STOP_AT, docs/design.md#kill-points) and SIGCONTed when the
  trace moves it again; Crash = SIGKILL there; Restart = a new process;
- a request that stays on the wire (Send ... Progress) is held by the target's service delay
  for the ticks between them (capped by A2 unless the config lifts it); Progress waits for it;
- Tick = real time: the model clock is aligned to the wall clock at TICK seconds per tick,
  and lease, send timeout, settle margin and the tier-1 window are the model constants x TICK;
- Revoke(g) = rt.revoke of grant g, HandRefund = a refund at the target by hand (on every
  effect's payment), Cancel = rt.cancel, PruneKeys = the target's key pruning (EMULATED),
  Redecide = the workflow's next offer becomes 3000 (the payload is read outside any step, as
  a re-decision would produce it);
- LocalChange = the replay's own table behind the flow's local SQL premise (LOCAL_PREMISE) is
  updated so the premise stops holding; afterwards no send authorized after that change may
  reach the target (local_premise_violations, the local half of NoSendOnStalePremise);
- Heartbeat = nothing: the real workers renew their leases by themselves (see translate);
- TWO_EFFECTS traces: the flow runs a second effect right after the first, on its own
  payment, under the second grant (or the first: SHARED_GRANT); the model's per-effect
  variables (lists since the model's commit 024297c; one scalar in older traces) are read
  through per_effect;
- a step the runtime cannot be made to take (an early takeover: the claim statement takes over
  only an expired lease) is driven all the same and listed in `not_reproducible`;
- the Temporal baselines' actions map to the runtime's nearest (TPick = a claim, TRead = the
  premise read, TSend = dispatch and send, TTimeout = nothing: the runtime has no server-side
  attempt timeout, the next claim waits for the lease).

Where a model position has no instrumented point, the nearest one is used and the schedule
says so (`notes`). An action this module does not know raises UnknownAction: a new model
action must be mapped, never skipped. After the schedule the world runs freely to a settled
state and every catalog invariant of layer C (invariants.check_all) is checked on the evidence.

    python -m conformance.trace_replay --report [--all] [--mode sync|async|both]
                                                          # results/trace_replay.{md,json}
    python -m conformance.trace_replay results/tlc_traces/X.json   # one replay, printed
    python -m conformance.trace_replay .data/tlc/traces/X.json     # a fresh --only run's

Workers serve the two flows below (`--module conformance.trace_replay --only ...`) in one of
two modes: "sync", plain workflows on the plain worker, or "async", their `async def` twins on
the asyncio worker (`--async`, docs/async.md). One body per flow drives both; the schedule, the
stop points and the checks are the same, since the instrumented points are the same code in
both (the async effect runs the sync gate in a thread; the claim loop is the sync worker's).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock_runtime import workflow
from interlock_runtime.vocabulary import TERMINAL_STATUSES
from world import gitstate, refund_agent

REPO = Path(__file__).resolve().parents[1]
# ILR_TLC_TRACES: another directory of TLC traces (e.g. a fresh `make tlc` run's) in its place
TRACES = Path(os.environ.get("ILR_TLC_TRACES") or REPO / "results" / "tlc_traces")
SIM_TRACES = Path(__file__).resolve().parent / "sim_traces"
# Seconds per model tick. The runtime refuses to start a send with less than 1 s of budget
# (effects.MIN_SEND_BUDGET), and SendTimeout is 1 tick, so a tick must exceed 1 s.
TICK = float(os.environ.get("ILR_REPLAY_TICK", "1.3"))
PAYMENT = "pay_replay"
PAYMENT2 = "pay_replay_2"  # the second effect's payment (TWO_EFFECTS)
# The local SQL premise (Runtime.tla localOk): a registered function over a row of the replay's
# own table; LocalChange flips the row, after which the premise reports a violation.
LOCAL_PREMISE = "ilr_replay.payment_open"
LOCAL_SQL = """
create schema if not exists ilr_replay;
create table if not exists ilr_replay.payments (payment text primary key,
                                               open boolean not null default true);
create or replace function ilr_replay.payment_open(args jsonb, eid text) returns jsonb
language sql as $$
  select coalesce(jsonb_agg('payment ' || payment || ' was closed locally'), '[]'::jsonb)
    from ilr_replay.payments where payment = args->>'payment' and not open $$;
"""
CENTS = 100  # model amounts (20, 30; hand refunds 10, 20) are in units of 100 cents


class UnknownAction(Exception):
    """The trace holds an action this translator has no mapping for."""


# ------------------------------------------------------------------ flows served by workers
MODES = ("sync", "async")
# The workflows a replay starts, by mode: plain ones on the plain worker, their `async def`
# twins (the same body, driven by refund_agent.drive_async) on the asyncio worker.
FLOW_NAMES = {"sync": {"refund": "replay_refund", "signals": "replay_signals"},
              "async": {"refund": "replay_refund_async", "signals": "replay_signals_async"}}  # fmt: skip


def _replay_refund_steps(ctx, case):
    """The model's workflow: one plain step, then one gated effect under a policy grant of
    max 2000 cents (the model's Payload0; a redecided 3000 is not covered), or two in sequence
    (TWO_EFFECTS: the second refunds its own payment, under the second grant or the same one
    with SHARED_GRANT). The shared refund body (world/refund_agent.py) with no decision, the
    model's constant premises and the local SQL premise LOCAL_PREMISE (the model's localOk),
    which T_dispatch and T_resolve re-read inside their transactions. A generator of durable
    calls (refund_agent.refund_steps), driven by either mode."""
    case = {**case, "payment": PAYMENT}

    def offer() -> int:  # not a step on purpose: Redecide changes what a later call offers
        return json.loads(Path(case["offer_file"]).read_text())["amount"]

    local = [(LOCAL_PREMISE, {"payment": PAYMENT})]
    premises = {"payment": PAYMENT, "eligible": True, "refunded_by_others": 0}
    _, r = yield from refund_agent.refund_steps(ctx, case, target=refund_agent.refund_target(case),
                                                capture=True, amount=offer, authority="grant",
                                                premises=premises, local_premises=local)  # fmt: skip
    out = {"status": r.status, "effect_id": r.effect_id}
    if case.get("effects", 1) == 2:
        # effect 2 right after effect 1 (the model's NextPc), no plain step between them
        second = {**case, "payment": PAYMENT2}
        r2 = yield ctx.effect(refund_agent.refund_target(second), key=f"refund:{case['id']}:2",
                              payload=refund_agent.payload_for(second, offer()),
                              premises={**premises, "payment": PAYMENT2}, grant=case["grant2"],
                              local_premises=local)  # fmt: skip
        out["second"] = {"status": r2.status, "effect_id": r2.effect_id}
    return out


def _replay_signals_steps(ctx, case):
    """models/Signals.tla: wait_signal, sleep, wait_signal."""
    first = yield ctx.wait_signal("approve")
    yield ctx.sleep(case["sleep"])
    second = yield ctx.wait_signal("approve")
    return {"signals": [first, second]}


@workflow(name="replay_refund", version="1")
def replay_refund(ctx, case):
    return refund_agent.drive(_replay_refund_steps(ctx, case))


@workflow(name="replay_signals", version="1")
def replay_signals(ctx, case):
    return refund_agent.drive(_replay_signals_steps(ctx, case))


@workflow(name="replay_refund_async", version="1")
async def replay_refund_async(ctx, case):
    return await refund_agent.drive_async(_replay_refund_steps(ctx, case))


@workflow(name="replay_signals_async", version="1")
async def replay_signals_async(ctx, case):
    return await refund_agent.drive_async(_replay_signals_steps(ctx, case))


# ------------------------------------------------------------------ traces
def _const(text: str) -> Any:
    t = str(text).strip()
    if t in ("TRUE", "FALSE"):
        return t == "TRUE"
    if t.startswith('"'):
        return json.loads(t)
    if t.startswith("{"):
        return [json.loads(x) if x.strip().startswith('"') else x.strip()
                for x in t[1:-1].split(",") if x.strip()]  # fmt: skip
    try:
        return int(t)
    except ValueError:
        return t


# The specs whose traces this module can play on the real runtime. models/Queues.tla and
# models/Schedules.tla are checked against the code by the fault matrix (docs/matrix.md) and by
# their mutants instead: their actions (queue claims, firing passes) have no translation here.
REPLAYED_SPECS = ("Runtime", "Signals")


@dataclass
class Trace:
    name: str
    path: Path
    config: str
    invariant: str | None
    kind: str
    consts: dict[str, Any]
    states: list[dict]
    seed: int | None = None

    @property
    def spec(self) -> str:
        return "Signals" if "SleepFor" in self.consts else "Runtime"

    @property
    def mode(self) -> str:
        return self.consts.get("MODE", "interlock")

    @property
    def category(self) -> str:
        if self.kind == "simulation":
            return "simulated"
        if self.config.startswith("Broken_"):
            return "broken"
        if self.mode != "interlock":
            return "temporal"
        return "assumption"  # a correct config whose assumption (A1, A2, A3) or clock is lifted


def load_trace(path: Path | str) -> Trace:
    path = Path(path)
    d = json.loads(path.read_text())
    return Trace(path.stem, path, d["config"], d.get("invariant"), d.get("kind", "safety"),
                 {k: _const(v) for k, v in d["constants"].items()}, d["states"],
                 d.get("seed"))  # fmt: skip


# The specs whose actions this module translates into real faults. A saved trace of another
# spec (Queues, Schedules: their broken configs are killed by their own conformance tests) is
# left out of every replay.
REPLAYED_SPECS = {"Runtime", "Signals"}


def _other_spec_configs() -> set[str]:
    import yaml

    matrix = yaml.safe_load((REPO / "models" / "matrix.yaml").read_text())
    return {c["name"] for c in matrix["configs"] if c.get("spec", "Runtime") not in REPLAYED_SPECS}


def saved_traces() -> list[Path]:
    """The saved counterexamples of results/tlc_traces/ that belong to a replayed spec."""
    other = _other_spec_configs()
    return [p for p in sorted(TRACES.glob("*.json")) if p.stem.split("__")[0] not in other]


def trace_paths(kind: str) -> list[Path]:
    if kind == "simulated":
        return sorted(SIM_TRACES.glob("*.json"))
    return [p for p in saved_traces() if load_trace(p).category == kind]


# ------------------------------------------------------------------ translation
WORKER_ACTIONS = {"Claim", "Load", "StartPlain", "LocalExpire", "RecordPlain", "ReadPremises",
                  "DispatchBegin", "DispatchCommit", "Send", "SendExpire", "TCommit",
                  "Checkpoint", "LateResult", "RecoverRead", "TResolve", "Complete",
                  "Frontier_"}  # fmt: skip
TEMPORAL_ACTIONS = {"TPlain", "TPick", "TRead", "TSend", "TComplete", "TGiveUp", "TTimeout",
                    "TFinish"}  # fmt: skip
WORLD_ACTIONS = {"Revoke", "HandRefund", "Cancel", "PruneKeys", "Redecide", "Crash", "Restart",
                 "Failover",
                 "Tick", "SignalBegin", "SignalCommit", "Signal", "Heartbeat",
                 "LocalChange"}  # fmt: skip
# TLC labels a step of `\E r \in wire : Process(r)` (the target handles a request) with the
# enclosing disjunct's name, Progress.
TARGET_ACTIONS = {"Progress"}
KNOWN = WORKER_ACTIONS | TEMPORAL_ACTIONS | WORLD_ACTIONS | TARGET_ACTIONS

# The instrumented point a worker passes on entering a program counter (Runtime.tla's pcs).
ENTRY_POINT = {"load": "claimed", "plain": "step_before_record", "dbegin": "effect_before_dispatch",
               "ckpt": "effect_after_commit"}  # fmt: skip


@dataclass
class Op:
    kind: str  # run | crash | restart | tick | revoke | hand_refund | cancel | prune |
    #            redecide | local_change | process | signal_begin | signal_commit | signal |
    #            none
    index: int  # the trace state this op realizes
    action: str
    worker: str | None = None
    pause: str | None = None  # run: the instrumented point to stop at afterwards ("target":
    #                           held at the target; None: runs on)
    arg: Any = None
    note: str = ""


@dataclass
class Schedule:
    trace: Trace
    ops: list[Op]
    workers: list[str]
    holds: dict[int, float]  # send id -> seconds the target holds that request
    stop_plans: dict[tuple[str, int], list[str]]  # (worker, incarnation) -> ILR_STOP_AT items
    notes: list[str] = field(default_factory=list)
    good_send: bool = False  # the model sends with every send check passing
    # Steps of the trace the real runtime cannot be made to take, each with the reason (the
    # fix is in the code: e.g. an early takeover, which the claim statement does not allow).
    # The replay still drives them (the runtime does what it allows instead) and reports them.
    not_reproducible: list[str] = field(default_factory=list)

    def actions(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.trace.states[1:]:
            out[s["action"]] = out.get(s["action"], 0) + 1
        return out


def _per_worker_changed(s0: dict, s1: dict, workers: list[str]) -> list[str]:
    out = []
    for w in workers:
        for key, v in s1.items():
            if isinstance(v, dict) and w in v and s0.get(key, {}).get(w) != v[w]:
                out.append(w)
                break
    return out


def effects_of(trace: Trace) -> int:
    """How many gated effects the trace's workflow runs (TWO_EFFECTS: 2)."""
    return 2 if trace.consts.get("TWO_EFFECTS") is True else 1


def per_effect(value: Any) -> list:
    """A per-effect model variable as a list indexed by effect - 1. The model since commit
    024297c keeps effState, ledger, grantRevoked, ... as functions over 1..N (TLC prints a
    tuple, a JSON list); earlier traces had one scalar."""
    return list(value) if isinstance(value, list) else [value]


def _revoked_grant(s0: dict, s1: dict) -> int:
    """The grant (1 or 2) a Revoke step revoked: the one whose grantRevoked turned TRUE."""
    before, after = per_effect(s0["grantRevoked"]), per_effect(s1["grantRevoked"])
    pairs = enumerate(zip(before, after, strict=True))
    return next((g + 1 for g, (a, b) in pairs if b and not a), 1)


def _early_takeover(s0: dict) -> bool:
    """A claim in this state would take over a lease that has not expired."""
    return s0.get("wfStatus") == "running" and s0.get("leaseExp", 0) > s0.get("now", 0)


def _pc(state: dict, w: str) -> str:
    if "ws" in state:
        return state["ws"][w]["pc"]
    return state.get("pc", {}).get(w, "idle")


def _pause_point(trace: Trace, pc: str, prev: str, via: str) -> tuple[str | None, str]:
    """Where a worker at `pc` (reached by action `prev`) is stopped, and a note when the
    position has no instrumented point of its own."""
    if trace.spec == "Signals":
        if prev == "Claim":
            return "claimed", ""
        if prev == "Frontier_":
            return "wait_after_suspend", "nearest: after the suspend commits"
        return None, ""
    if pc in ("idle",):
        return None, ""
    if pc == "load":
        return "claimed", ""
    if pc == "run":
        return "claimed", ("nearest: the stale step-row load (C1) cannot be held by a point; "
                           "stopped right after the claim, before the load")  # fmt: skip
    if pc == "plain":
        return "step_before_record", ""
    if pc == "effect":
        if prev == "RecordPlain":
            return "step_after_record", ""
        if prev == "TCommit":  # TWO_EFFECTS: committed effect 1, at effect 2
            return "effect_after_commit", ""
        if prev in ("Load", "Claim"):
            return "claimed", "nearest: stopped after the claim (the load found the plain row)"
        return None, f"no point after {prev} at pc effect: runs on"
    if pc in ("dbegin", "dcommit"):
        note = "" if pc == "dbegin" else ("nearest: T_dispatch cannot be held open by a point; "
                                          "stopped before it begins")  # fmt: skip
        return "effect_before_dispatch", note
    if pc == "send":
        return ("resolve_after_commit" if prev == "TResolve" else "effect_after_dispatch"), ""
    if pc == "await":
        return "target", ""
    if pc == "tcommit":
        return ("effect_after_send" if via == "send" else "resolve_after_send"), ""
    if pc in ("ckpt", "finish"):
        if prev in ("TCommit", "Checkpoint"):
            return "effect_after_commit", ("nearest: T_commit writes the step row too"
                                           if pc == "ckpt" else "")  # fmt: skip
        return None, f"no point after {prev} at pc {pc}: runs on"
    if pc in ("recover", "resolve"):
        return None, f"no point at pc {pc} (between the recovery read and T_resolve): runs on"
    raise UnknownAction(f"{trace.name}: no mapping for program counter {pc!r}")


def translate(trace: Trace) -> Schedule:
    """The real schedule of a trace. Raises UnknownAction for an unmapped action."""
    states = trace.states
    workers = sorted(states[0]["vars"].get("up", {}).keys()) or ["w1", "w2"]
    notes: list[str] = []
    unforceable: list[str] = []
    raw: list[Op] = []
    sends_at: dict[int, int] = {}  # send id -> state index of the send
    processed_at: dict[int, int] = {}
    holder: str | None = None
    temporal = trace.mode != "interlock"
    for i in range(1, len(states)):
        s0, s1, action = states[i - 1]["vars"], states[i]["vars"], states[i]["action"]
        if action not in KNOWN:
            raise UnknownAction(f"{trace.name} state {i}: model action {action!r} has no real "
                                "counterpart in conformance/trace_replay.py")  # fmt: skip
        changed = _per_worker_changed(s0, s1, workers)
        if s1.get("sends", 0) > s0.get("sends", 0):
            sends_at[s1["sends"]] = i
        if action == "Progress":
            gone = {r["id"] for r in s0["wire"]["set"]} - {r["id"] for r in s1["wire"]["set"]}
            for rid in gone:
                processed_at[rid] = i
            # the sender still waiting on that connection gets the answer and runs on
            got = [w for w in workers if _pc(s0, w) in ("await", "tawait")
                   and _pc(s1, w) in ("tcommit", "tdone")]  # fmt: skip
            via = s1["ws"][got[0]]["via"] if got and "ws" in s1 else "send"
            raw.append(Op("process", i, action, worker=got[0] if got else None,
                          arg=min(gone) if gone else None,
                          note=via))  # fmt: skip
            continue
        if action == "Tick":
            raw.append(Op("tick", i, action, arg=s1["now"]))
            continue
        if action == "Crash":
            raw.append(Op("crash", i, action, worker=changed[0]))
            continue
        if action == "Restart":
            raw.append(Op("restart", i, action, worker=changed[0]))
            continue
        if action == "Heartbeat":
            # The real workers renew their leases by themselves (worker.py: one fenced UPDATE
            # every lease_ttl/3 while the process runs; one that matches no row marks the run
            # fenced, as the model's fenced Heartbeat does). A worker the trace holds still is
            # SIGSTOPped and cannot renew, and the driver cannot renew for it: the renewal also
            # re-arms the process's local deadline, which only its own thread can do. No
            # invariant rests on a heartbeat (Runtime.tla: a world action that may happen or
            # not), so the step is a no-op; a renewal the model makes and the replay does not
            # only lets a lease run out earlier than in the model.
            raw.append(Op("none", i, action, note="the workers heartbeat by themselves"))
            continue
        if action == "Revoke":
            raw.append(Op("revoke", i, action, arg=_revoked_grant(s0, s1)))
            continue
        if action in ("Cancel", "PruneKeys", "Redecide", "Signal", "SignalBegin",
                      "SignalCommit", "LocalChange"):  # fmt: skip
            kind = {"Cancel": "cancel", "PruneKeys": "prune", "Redecide": "redecide",
                    "Signal": "signal", "SignalBegin": "signal_begin",
                    "SignalCommit": "signal_commit", "LocalChange": "local_change"}[action]  # fmt: skip
            raw.append(Op(kind, i, action))
            continue
        if action == "HandRefund":
            raw.append(Op("hand_refund", i, action, arg=s1["handRefund"] * CENTS))
            continue
        if action == "Failover":
            # One database, one clock here: the jump is the failover soak's to run for real
            # (prove/soak.py --failover --standby-clock-offset, results/failover_clock.md).
            unforceable.append(
                f"state {i} (Failover): a failover moves the database clock by "
                f"{s1['now'] - s0['now']:+d} ticks; the replay runs on one database with one "
                "clock, so the jump is not reproduced and the time after it is driven as is")  # fmt: skip
            raw.append(Op("none", i, action, note="a clock jump at a failover (not reproduced)"))
            continue
        if action in ("TTimeout", "TFinish"):
            raw.append(Op("none", i, action, note="the runtime has no server-side attempt "
                          "timeout; the next claim waits for the lease" if action == "TTimeout"
                          else "the holder completes the workflow on its own"))  # fmt: skip
            continue
        # a worker's own step
        if temporal:
            w, pc, prev = _temporal_step(trace, i, action, changed, workers, holder)
            if action in ("TPlain", "TPick"):
                if action == "TPick" and w == holder:
                    raw.append(Op("none", i, action, note="the attempt runs on the claim held"))
                    continue
                holder = w
            raw.append(Op("run", i, action, worker=w, arg=(pc, prev, "send")))
            continue
        if not changed:
            raise UnknownAction(f"{trace.name} state {i}: cannot tell which worker did {action}")
        w = changed[0]
        if action == "Claim" and _early_takeover(s0):
            unforceable.append(
                f"state {i} (Claim by {w}): an early takeover at now={s0['now']} of a lease that "
                f"runs until {s0['leaseExp']}; the runtime's claim statement takes over a running "
                "workflow only once its lease has expired, so the claim is driven and happens "
                "after the expiry instead")  # fmt: skip
        via = s1["ws"][w]["via"] if "ws" in s1 else "send"
        raw.append(Op("run", i, action, worker=w, arg=(_pc(s1, w), action, via)))

    # Pauses: a worker stops where it is whenever something else happens before its next step.
    ops: list[Op] = []
    for k, op in enumerate(raw):
        if op.kind == "process" and op.worker is not None:
            # the answered sender must stand still at its after-send point if something else
            # happens before its next step (the trace's end included: the live check)
            nxt = next((o for o in raw[k + 1 :] if o.kind != "none"), None)
            if nxt is None or not (nxt.kind == "run" and nxt.worker == op.worker):
                op.pause = "effect_after_send" if op.note == "send" else "resolve_after_send"
            op.note = ""
            ops.append(op)
            continue
        if op.kind != "run":
            ops.append(op)
            continue
        nxt = next((o for o in raw[k + 1 :] if o.kind != "none"), None)
        if nxt is not None and nxt.kind == "run" and nxt.worker == op.worker:
            continue  # the worker goes on by itself: the steps merge
        # the trace's last step pauses too: the invariants are checked there, live, before the
        # world runs on to a settled state
        pc, prev, via = op.arg
        point, note = _pause_point(trace, pc, prev, via)
        op.pause = point
        op.note = note
        if note:
            notes.append(f"state {op.index} ({op.action}, {op.worker} at {pc}): {note}")
        ops.append(op)

    # Stop plans per incarnation: the nth hit of a point in that process.
    stop_plans: dict[tuple[str, int], list[str]] = {}
    inc = {w: 0 for w in workers}
    hits: dict[tuple[str, int], dict[str, int]] = {}
    for op in ops:
        if op.kind == "restart":
            inc[op.worker] += 1
        if op.kind not in ("run", "process") or op.worker is None:
            continue
        key = (op.worker, inc[op.worker])
        h = hits.setdefault(key, {})
        for j in range(_prev_run_index(ops, op), op.index + 1):
            a = states[j]["action"] if j > 0 else "Init"
            if j == 0 or a not in WORKER_ACTIONS | TEMPORAL_ACTIONS | TARGET_ACTIONS:
                continue
            p = _entered_point(trace, states, j, op.worker)
            if p:
                h[p] = h.get(p, 0) + 1
        if op.pause and op.pause != "target":
            n = max(h.get(op.pause, 0), 1)
            item = f"{op.pause}@{n}"
            plan = stop_plans.setdefault(key, [])
            if item in plan and op.kind == "run":
                # The worker is held at this very hit already (a step no point can hold, such
                # as a load, mapped to the point before it): a SIGCONT would let it run free
                # past the next op's point, so the op leaves it where it is.
                op.kind = "none"
                op.note = (op.note + "; " if op.note else "") + f"held at {item} already"
            else:
                plan.append(item)
    holds = _holds(trace, sends_at, processed_at)
    good = False
    first = next((i for i in range(1, len(states)) if states[i]["vars"].get("sends", 0) >= 1), None)
    if first is not None:
        good = not any(states[first]["vars"]["sendBad"].values())
    return Schedule(trace, ops, workers, holds, stop_plans, notes, good, unforceable)


def _prev_run_index(ops: list[Op], op: Op) -> int:
    earlier = [o.index for o in ops if o.kind in ("run", "process") and o.worker == op.worker
               and o.index < op.index]  # fmt: skip
    return (max(earlier) + 1) if earlier else 1


def _entered_point(trace: Trace, states: list[dict], j: int, w: str) -> str | None:
    s0, s1 = states[j - 1]["vars"], states[j]["vars"]
    if "ws" not in s1:
        return "claimed" if states[j]["action"] in ("Claim", "TPick", "TPlain") else None
    a, pc0, pc1 = states[j]["action"], _pc(s0, w), _pc(s1, w)
    if pc1 == pc0:
        return None
    if pc1 in ENTRY_POINT:
        return ENTRY_POINT[pc1]
    if pc1 == "effect" and a == "RecordPlain":
        return "step_after_record"
    if pc1 == "send":
        return "resolve_after_commit" if a == "TResolve" else "effect_after_dispatch"
    if pc1 in ("tcommit", "tdone"):
        via = s1["ws"][w]["via"]
        return "effect_after_send" if via == "send" else "resolve_after_send"
    if pc1 in ("finish", "effect") and a == "TCommit":  # "effect": TWO_EFFECTS, at effect 2
        return "effect_after_commit"
    return None


def _temporal_step(trace: Trace, i: int, action: str, changed: list[str], workers: list[str],
                   holder: str | None) -> tuple[str, str, str]:  # fmt: skip
    """(worker, runtime pc after, runtime action) for a Temporal baseline step."""
    if action == "TPlain":  # the server runs the plain step: some worker claims and records it
        later = [s for s in trace.states[i + 1 :] if s["action"] == "TPick"]
        w = workers[0]
        if later:
            nxt = later[0]
            k = trace.states.index(nxt)
            c = _per_worker_changed(trace.states[k - 1]["vars"], nxt["vars"], workers)
            w = c[0] if c else w
        return w, "effect", "RecordPlain"
    w = changed[0] if changed else (holder or workers[0])
    return w, {"TPick": "effect", "TRead": "dbegin", "TSend": "await", "TComplete": "finish",
               "TGiveUp": "idle"}[action], {"TPick": "Claim", "TRead": "ReadPremises",
               "TSend": "Send", "TComplete": "TCommit", "TGiveUp": "SendExpire"}[action]  # fmt: skip


def _holds(
    trace: Trace, sends_at: dict[int, int], processed_at: dict[int, int]
) -> dict[int, float]:
    """Seconds the target holds each request: the ticks between its send and its processing,
    or the trace's end (half a tick when other steps come between them in the same tick).
    Without SERVER_SLOW the hold stays inside A2 (before send_deadline + settle_margin)."""
    out: dict[int, float] = {}
    c = trace.consts
    cap = (c.get("SendTimeout", 1) + c.get("SettleMargin", 1)) * TICK - 0.4
    for sid, at in sends_at.items():
        done = processed_at.get(sid)
        if done is None:  # still on the wire when the trace ends: held through its end
            done = len(trace.states)
        if done == at + 1:
            continue
        ticks = sum(1 for s in trace.states[at + 1 : done] if s["action"] == "Tick")
        hold = (ticks + 0.5) * TICK
        out[sid] = hold if c.get("SERVER_SLOW") else min(hold, cap)
    return out


# ------------------------------------------------------------------ the driver
TERMINAL = TERMINAL_STATUSES
RUN_ENDS = ("completed", "fenced", "suspended", "abandoned", "cancelled", "failed", "stuck",
            "released", "continued")  # fmt: skip


class _TargetProcess:
    """The payment target in its own process, as in the harness."""

    def __init__(self, tier: int, db_path: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "world.target", "--tier", str(tier),
                                      "--port", "0", "--db", str(db_path)], cwd=str(REPO),
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.url = json.loads(self.proc.stdout.readline())["url"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


@dataclass
class ReplayResult:
    trace: str
    config: str
    category: str
    model_invariant: str | None
    seed: int | None
    actions: dict[str, int]
    counts: dict[str, int]
    violations: dict[str, list[str]]
    checked: list[str]
    status: str | None
    sends_seen: int
    applied: int
    good_send: bool
    divergences: list[str]
    notes: list[str]
    seconds: float
    not_reproducible: list[str] = field(default_factory=list)
    mode: str = "sync"  # the worker kind that ran the flow (reports before modes: sync)


class Replay:
    def __init__(self, schedule: Schedule, admin: str, template: str, log_dir: Path,
                 mode: str = "sync"):  # fmt: skip
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.s, self.admin, self.template, self.log_dir = schedule, admin, template, log_dir
        self.mode = mode
        self.flows = FLOW_NAMES[mode]
        self.t = schedule.trace
        self.case: dict[str, Any] = {}  # the refund workflow's input (none for Signals traces)
        self.procs: dict[str, Any] = {}
        self.inc = {w: 0 for w in schedule.workers}
        self.all_procs: list[Any] = []
        self.counts = {"workers": 0, "sigstops": 0, "sigconts": 0, "sigkills": 0, "revokes": 0,
                       "revoke_returned": 0, "hand_refunds": 0, "cancels": 0, "prunes": 0,
                       "redecides": 0, "local_changes": 0, "signals": 0, "ticks": 0,
                       "holds": 0}  # fmt: skip
        self.divergences: list[str] = []
        self.revokes: list[dict] = []  # what each rt.revoke() returned (RevokeLinearizable)
        self.grants: list[str] = []  # the model's grants 1 and 2 (one id twice if shared)
        self.local_changed_at: float | None = None  # database time the local premise broke
        self.origin: float | None = None
        self.posts_seen = 0
        self._signal_thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self.live_results: dict = {}
        self.timeline: list[tuple[str, float]] = []

    def mark(self, what: str) -> None:
        self.timeline.append((what, round(time.monotonic() - self._t0, 2)))

    # -- helpers ----------------------------------------------------------------------------
    def _consts(self, name: str, default: int = 1) -> int:
        return int(self.t.consts.get(name, default))

    def _spawn(self, w: str) -> Any:
        from interlock_runtime.testing import WorkerProcess

        plan = self.s.stop_plans.get((w, self.inc[w]), [])
        env = {"ILR_STOP_AT": ",".join(plan)} if plan else {}
        only = ",".join(f"{n}@1" for n in self.flows.values())
        extra = ("--only", only) + (("--async",) if self.mode == "async" else ())
        p = WorkerProcess(self.dsn, f"{w}.{self.inc[w]}.{len(self.all_procs)}", self.log_dir,
                          "conformance.trace_replay", pythonpath=str(REPO), cwd=str(REPO),
                          lease_ttl=self._consts("LeaseTTL", 2) * TICK, poll=0.1, concurrency=1,
                          env=env, extra_args=extra)  # fmt: skip
        self.procs[w] = p
        self.all_procs.append(p)
        self.counts["workers"] += 1
        return p

    def _alive(self, p: Any) -> bool:
        return p is not None and p.proc.poll() is None

    def _stopped(self, p: Any) -> bool:
        try:
            return p.state() == "T"
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False

    def _ended_since(self, p: Any, mark: int) -> bool:
        return any(e.get("event") in RUN_ENDS for e in p.events()[mark:])

    def _posts(self) -> list[dict]:
        from world.target_client import TargetAdmin

        return [r for r in TargetAdmin(self.target.url).log(method="POST")
                if r["path"].rstrip("/").endswith("refunds") and r.get("key")]  # fmt: skip

    def _over(self) -> bool:
        """The workflow reached a terminal status: nothing more of the schedule can happen."""
        return self.rt.describe(self.wf)["status"] in TERMINAL

    def _wait(self, pred, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.03)
        return False

    def _step_timeout(self) -> float:
        c = self.t.consts
        return (
            c.get("LeaseTTL", 2) + c.get("SendTimeout", 1) + c.get("SettleMargin", 1) + 2
        ) * TICK

    # -- ops --------------------------------------------------------------------------------
    def do(self, op: Op) -> None:
        from interlock_runtime import WorkflowFinished
        from world.target_client import TargetAdmin

        admin = TargetAdmin(self.target.url)
        self.mark(f"{op.kind}@{op.index}")
        if op.kind == "run":
            self._run(op)
        elif op.kind == "crash":
            p = self.procs.get(op.worker)
            if self._alive(p):
                p.signal(signal.SIGKILL)
                p.proc.wait(10)
                self.counts["sigkills"] += 1
            else:
                self.divergences.append(f"state {op.index}: {op.worker} already gone at Crash")
        elif op.kind == "restart":
            self.inc[op.worker] += 1
            self.procs[op.worker] = None  # spawned at its next step
        elif op.kind == "tick":
            self.counts["ticks"] += 1
            if self.origin is None:
                time.sleep(TICK)  # before the first claim: time passes all the same
            elif not self._over():  # a finished workflow has no clock left to wait for
                delay = self.origin + op.arg * TICK - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        elif op.kind == "revoke":
            from conformance.invariants import record_revoke

            grant = self.grants[(op.arg or 1) - 1]
            returned = record_revoke(self.rt, grant, "replay", self.revokes)
            self.counts["revoke_returned"] += len(returned)
            self.counts["revokes"] += 1
        elif op.kind == "hand_refund":
            # the model's one handRefund is the premise of every effect: each effect's payment
            for payment in (PAYMENT, PAYMENT2)[: effects_of(self.t)]:
                admin.hand_refund(payment, op.arg)
            self.counts["hand_refunds"] += 1
        elif op.kind == "local_change":
            self._local_change()
        elif op.kind == "cancel":
            try:
                self.rt.cancel(self.wf, by="replay")
            except WorkflowFinished:
                self.divergences.append(f"state {op.index}: the workflow had finished at Cancel")
            self.counts["cancels"] += 1
        elif op.kind == "prune":
            admin.prune_keys()
            self.counts["prunes"] += 1
        elif op.kind == "redecide":
            self.offer.write_text(json.dumps({"amount": 30 * CENTS}))
            self.counts["redecides"] += 1
        elif op.kind == "process":
            # the target answers the held request: wait until it has ended
            if op.arg is not None:
                # a request the runtime never sent (the fix refused it) is not waited for long
                sent = self._wait(lambda: len(self._posts()) >= op.arg or self._over(), TICK)
                sent = sent and len(self._posts()) >= op.arg
                ended = sent and self._wait(
                    lambda: len([r for r in self._posts() if r.get("end")]) >= op.arg,
                    self._step_timeout())  # fmt: skip
                if not ended:
                    self.divergences.append(f"state {op.index}: request {op.arg} was "
                                            + ("sent but never ended" if sent else "not sent"))  # fmt: skip
                p = self.procs.get(op.worker) if op.worker else None
                if ended and op.pause and p is not None:
                    stopped = self._wait(lambda: self._stopped(p) or not self._alive(p)
                                         or self._over(), self._step_timeout())  # fmt: skip
                    if stopped and self._stopped(p):
                        self.counts["sigstops"] += 1
                    else:
                        self.divergences.append(f"state {op.index}: {op.worker} did not stop at "
                                                f"{op.pause}")  # fmt: skip
            admin.set_delay(0)
        elif op.kind in ("signal", "signal_begin"):
            # rt.signal locks the row and commits in one call; begin starts it concurrently
            # with what follows (the suspend it races), commit joins it.
            self._signal_thread = threading.Thread(target=self.rt_signal.signal,
                                                   args=(self.wf, "approve", {"n": op.index}))  # fmt: skip
            self._signal_thread.start()
            self.counts["signals"] += 1
            if op.kind == "signal":
                self._signal_thread.join(30)
        elif op.kind == "signal_commit":
            if self._signal_thread is not None:
                self._signal_thread.join(30)
        elif op.kind == "none":
            pass
        else:  # pragma: no cover - translate() produces only the kinds above
            raise UnknownAction(op.kind)

    def _local_change(self) -> None:
        """LocalChange: the application closes the payment in its own table, so the local
        premise (LOCAL_PREMISE) reports a violation from now on. The database time after the
        commit bounds the change from above (local_premise_violations judges by it)."""
        from interlock_runtime import db

        with db.connect(self.dsn) as conn:
            conn.execute("update ilr_replay.payments set open = false")
            at = conn.execute("select clock_timestamp() as t").fetchone()["t"]
        self.local_changed_at = at.timestamp()
        self.counts["local_changes"] += 1

    def _run(self, op: Op) -> None:
        from world.target_client import TargetAdmin

        w = op.worker
        p = self.procs.get(w)
        if not self._alive(p):
            if p is not None:
                self.divergences.append(f"state {op.index}: {w}'s process had exited; respawned")
                self.inc[w] += 1
            p = self._spawn(w)
        mark = len(p.events())
        # the holds of the sends this worker makes now
        sid = len(self._posts()) + 1
        hold = self.s.holds.get(sid)
        if hold:
            TargetAdmin(self.target.url).set_delay(hold * 1000)
            self.counts["holds"] += 1
        if self._stopped(p):
            p.signal(signal.SIGCONT)
            self.counts["sigconts"] += 1
        if self.origin is None:  # the model clock starts at the first claim
            ok = self._wait(lambda: self.rt.claim_history(self.wf), self._step_timeout() + 20)
            if ok:
                now = self.t.states[op.index]["vars"].get("now", 0)
                self.origin = time.monotonic() - now * TICK
        if op.pause is None:
            return
        if op.pause == "target":
            # sent at once, or after a takeover claim (the lease) and its send budget
            c = self.t.consts
            budget = (c.get("LeaseTTL", 2) + c.get("SendTimeout", 1)) * TICK + 1
            ok = self._wait(lambda: len(self._posts()) >= sid or not self._alive(p)
                            or self._ended_since(p, mark) or self._over(), budget)  # fmt: skip
        else:
            ok = self._wait(lambda: self._stopped(p) or not self._alive(p)
                            or self._ended_since(p, mark) or self._over(), self._step_timeout() + 10)  # fmt: skip
            if self._stopped(p):
                self.counts["sigstops"] += 1
        if not ok or not (self._stopped(p) or op.pause == "target"):
            self.divergences.append(f"state {op.index} ({op.action}): {w} did not reach "
                                    f"{op.pause}")  # fmt: skip

    # -- the whole replay -------------------------------------------------------------------
    def run(self) -> ReplayResult:
        from conformance.invariants import check_all, snapshot
        from interlock_runtime import Runtime, db, testing
        from world.target_client import TargetAdmin

        t0 = time.monotonic()
        c = self.t.consts
        with testing.fresh_database(self.admin, self.template) as dsn:
            self.dsn = dsn
            self.target = _TargetProcess(int(c.get("Tier", 2)), self.log_dir / "ledger.db")
            admin = TargetAdmin(self.target.url)
            admin.create_payment(PAYMENT, 10000)
            admin.create_payment(PAYMENT2, 10000)
            with db.connect(dsn) as conn:  # the local premise's table and function
                conn.execute(LOCAL_SQL)
                conn.execute("insert into ilr_replay.payments values (%s), (%s)",
                             (PAYMENT, PAYMENT2))  # fmt: skip
            self.offer = self.log_dir / "offer.json"
            self.offer.write_text(json.dumps({"amount": 20 * CENTS}))
            try:
                with Runtime(dsn) as rt, Runtime(dsn) as rt_signal:
                    self.rt, self.rt_signal = rt, rt_signal
                    status = self._drive(rt)
                    events = [e for p in self.all_procs for e in p.events()]

                    def world():
                        return admin.ledger()["refunds"], admin.log()

                    with (
                        db.connect(dsn) as conn,
                        snapshot(conn, world, events, self.revokes, self._target_configs()) as ev,
                    ):
                        results = check_all(ev)
                        for name, found in self.live_results.items():
                            if found and isinstance(found, list):
                                results[name] = [f"at the trace's last state: {x}" for x in found
                                                 ] + list(results[name] or [])  # fmt: skip
                        claims = conn.execute("select count(*) as n from ilr.claims").fetchone()[
                            "n"
                        ]
                        steps = conn.execute("select count(*) as n from ilr.steps").fetchone()["n"]
                        local = local_premise_violations(ev, self.local_changed_at)
                        if local:  # the local half of the model's NoSendOnStalePremise
                            results["NoSendOnStalePremise"] = list(
                                results.get("NoSendOnStalePremise") or []) + local  # fmt: skip
                    ledger = [r for r in admin.ledger()["refunds"] if r.get("key")]
                    posts = self._posts()
            finally:
                for p in self.all_procs:
                    p.close()
                self.target.stop()
        self.counts["claims"] = claims
        self.counts["steps"] = steps
        self.counts["step_started"] = sum(e.get("event") == "step_started" for e in events)
        self.counts["sends"] = len(posts)
        violations = {k: v for k, v in results.items() if v}
        return ReplayResult(self.t.name, self.t.config, self.t.category, self.t.invariant,
                            self.t.seed, self.s.actions(), self.counts, violations,
                            sorted(results), status, len(posts), len(ledger), self.s.good_send,
                            self.divergences, self.s.notes, round(time.monotonic() - t0, 1),
                            self.s.not_reproducible, self.mode)  # fmt: skip

    def _drive(self, rt) -> str | None:
        c = self.t.consts
        # every model worker's first process, started before the workflow exists and stopped
        # until the trace moves it (so no worker claims before the trace says so)
        first = [self._spawn(w) for w in self.s.workers]
        for p in first:
            p.wait_event("registered", timeout=60)
            p.signal(signal.SIGSTOP)
            p.wait_stopped()
        self.mark("workers up")
        self.wf = f"replay-{self.t.name[:40]}".replace("_", "-").lower()
        if self.t.spec == "Signals":
            rt.start(self.flows["signals"], self.wf, {"sleep": self._consts("SleepFor", 2) * TICK})
            self.grant = ""
        else:
            tier = int(c.get("Tier", 2))
            self.grant = rt.grant(
                "agent", "refund", constraints={"amount": {"max": 20 * CENTS}}, by="replay"
            )
            self.grants = [self.grant, self.grant]
            if effects_of(self.t) == 2 and c.get("SHARED_GRANT") is not True:
                self.grants[1] = rt.grant(
                    "agent", "refund", constraints={"amount": {"max": 20 * CENTS}}, by="replay"
                )
            margin = c.get("DedupMargin", 3)
            if self.t.mode != "interlock":
                # The Temporal configs shrink the dedup constants to keep TLC's space small; a
                # Temporal worker has no margin to check. On the runtime the margin is its own
                # configuration, which must pass the C2 check (else nothing would run at all).
                margin = max(margin, c.get("SendTimeout", 1) + c.get("SettleMargin", 1) + 1)
            window = (c.get("DedupAge", 3) + margin) * TICK
            self.case = {
                "id": self.wf, "target_url": self.target.url, "tier": tier,
                "queryable": bool(c.get("Queryable", tier != 3)) and tier != 3,
                "send_timeout": c.get("SendTimeout", 1) * TICK,
                "settle_margin": c.get("SettleMargin", 1) * TICK,
                "dedup_window": window if tier == 1 else 1e9,
                "dedup_margin": margin * TICK if tier == 1 else 600.0,
                "grant": self.grant, "offer_file": str(self.offer),
                "effects": effects_of(self.t), "grant2": self.grants[1]}  # fmt: skip
            rt.start(self.flows["refund"], self.wf, self.case)
        for op in self.s.ops:
            self.do(op)
        self.mark("schedule done")
        self.live_results = self._live_check()
        status = self._settle(rt)
        self.mark("settled")
        return status

    def _target_configs(self) -> dict[str, dict]:
        """The target as it reports itself, narrowed by the model's Queryable constant (the
        replayed application never asks a target the trace calls non-queryable)."""
        from conformance.invariants import target_config

        case = self.case
        cfg = target_config(self.target.url, case.get("queryable"), case.get("dedup_window"),
                            case.get("dedup_margin"))  # fmt: skip
        return {self.target.url: cfg}

    def _live_check(self) -> dict:
        """Every check at the trace's last state, the processes still where the model left
        them (the model's violation, if any, is in that state)."""
        from conformance.invariants import check_all, snapshot
        from interlock_runtime import db
        from world.target_client import TargetAdmin

        admin = TargetAdmin(self.target.url)
        events = [e for p in self.all_procs for e in p.events()]
        with db.connect(self.dsn) as conn:
            with snapshot(
                conn,
                lambda: (admin.ledger()["refunds"], admin.log()),
                events,
                self.revokes,
                self._target_configs(),
            ) as ev:
                return check_all(ev)

    def _settle(self, rt) -> str | None:
        """After the schedule the world runs freely: every process goes on, a healthy worker
        joins if none is left, and the workflow ends (or waits on a signal the model's
        Signals workflow needs)."""
        from world.target_client import TargetAdmin

        TargetAdmin(self.target.url).set_delay(0)
        if self._signal_thread is not None:
            self._signal_thread.join(30)
        for p in self.all_procs:
            if self._alive(p) and self._stopped(p):
                p.signal(signal.SIGCONT)
                self.counts["sigconts"] += 1
        if not any(self._alive(p) for p in self.all_procs):
            self.inc["settle"] = 0
            self.s.stop_plans.pop(("settle", 0), None)
            self._spawn("settle")
        deadline = time.monotonic() + self._step_timeout() * 3 + 20
        status = None
        while time.monotonic() < deadline:
            status = rt.describe(self.wf)["status"]
            if status in TERMINAL:
                break
            if self.t.spec == "Signals" and status == "sleeping":
                waiting = rt.describe(self.wf)["waiting"] or {}
                if waiting.get("signal") == "approve":
                    rt.signal(self.wf, "approve", {"n": "settle"})
                    self.counts["signals"] += 1
            time.sleep(0.1)
        return status


def local_premise_violations(ev: Any, changed_at: float | None) -> list[str]:
    """The local half of NoSendOnStalePremise (Runtime.tla: T_dispatch and T_resolve read the
    local premise inside their transaction): no send may be authorized by a transaction that
    began after LocalChange committed, and then reach the target. Judged from the ground truth:
    the database time of each authorization (the journal's DISPATCHED ts, a resend's T_resolve
    ts) against the time the replay's own update of the premise's table committed, and the
    target's access log; never from the runtime's recorded checks. A transaction that began
    before the change may have read the premise before it (not a violation; the model reads it
    at the commit and leaves that window out)."""
    from conformance.invariants import _authorizations

    if changed_at is None:
        return []
    out, effects, posts = [], ev.effects(), ev.posts()
    for eid, entries in ev.entries().items():
        for a in _authorizations(entries, effects[eid]):
            if a["ts"] <= changed_at:
                continue
            reached = [r for r in posts[eid] if r["arrival"] > a["ts"]]
            if reached:
                kind = "a resend" if a["resend"] else "a dispatch"
                out.append(f"{eid}: {kind} authorized at {a['ts']:.3f}, after the local premise "
                           f"stopped holding at {changed_at:.3f}, reached the target at "
                           f"{reached[0]['arrival']:.3f}")  # fmt: skip
    return out


def replay(trace: Trace | Path | str, admin: str, template: str, log_dir: Path,
           mode: str = "sync") -> ReplayResult:  # fmt: skip
    """Translate and replay one trace in a fresh database with the workflow of `mode` (sync:
    a plain workflow on the plain worker, async: its `async def` twin on the asyncio worker);
    return what happened."""
    t = trace if isinstance(trace, Trace) else load_trace(trace)
    log_dir.mkdir(parents=True, exist_ok=True)
    return Replay(translate(t), admin, template, log_dir, mode).run()


# ------------------------------------------------------------------ report
# Categories whose traces must show no violation; an assumption-lifted trace shows what the
# model predicts for it (results/runtime_tlc.md), which is no finding about the runtime.
MUST_HOLD = ("broken", "simulated", "temporal")


def findings(results: list[ReplayResult]) -> list[ReplayResult]:
    """The replays that show a violation where none may be: the exit status's reason."""
    return [r for r in results if r.violations and r.category in MUST_HOLD]


def write_report(results: list[ReplayResult], wall: float, commit: str | None = None,
                 dirty: bool | None = None, command: str | None = None) -> tuple[Path, Path]:  # fmt: skip
    import platform
    from dataclasses import asdict

    import psycopg

    out = REPO / "results"
    totals: dict[str, int] = {}
    for r in results:
        for k, v in r.counts.items():
            totals[k] = totals.get(k, 0) + v
    by_cat: dict[str, list[ReplayResult]] = {}
    for r in results:
        by_cat.setdefault(r.category, []).append(r)
    modes = [m for m in MODES if any(r.mode == m for r in results)]
    tag = (lambda r: f"{r.mode}: ") if len(modes) > 1 else (lambda r: "")
    violations = [(f"{tag(r)}{r.trace}", k, v) for r in results for k, v in r.violations.items()]
    traces = list(dict.fromkeys(r.trace for r in results))
    doc = {
        "commit": commit or gitstate.commit(),
        # one rule for every report (world/gitstate.py): results/ does not make the code dirty
        "dirty": dirty if commit else gitstate.dirty(),
        "generated_by": command
        or "python -m conformance.trace_replay --report"
        + (f" --mode {modes[0]}" if len(modes) == 1 else " --mode both"),
        "modes": modes,
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "tick_seconds": TICK,
        "wall_seconds": round(wall, 1),
        "traces": len(traces),
        "replays": len(results),
        "by_category": {k: len({r.trace for r in v}) for k, v in sorted(by_cat.items())},
        "configs": sorted({r.config for r in results}),
        "seeds": sorted({r.seed for r in results if r.seed is not None}),
        "totals": totals,
        "violations": len(violations),
        "results": [asdict(r) for r in results],
    }
    jpath, mpath = out / "trace_replay.json", out / "trace_replay.md"
    jpath.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    lines = [
        "# Model-based trace replay on the real runtime",
        "",
        f"Generated by `{doc['generated_by']}` at commit `{doc['commit'][:12]}`"
        + (" (dirty: the code differed from it)" if doc["dirty"] else "")
        + f" (python {doc['python']}, psycopg {doc['psycopg']}); one model tick = {TICK} s; "
        f"wall {doc['wall_seconds']} s; modes: {', '.join(modes)}.",
        "",
        "Each TLC trace is translated action by action into real faults (SIGSTOP at the kill "
        "point of the worker's program counter, SIGKILL, target holds, rt.revoke, hand refunds, "
        "rt.cancel, key pruning, clock waits), replayed with real worker subprocesses against "
        "Postgres and the local target, and every catalog invariant of layer C is checked on "
        "the evidence afterwards. A broken config's counterexample must not reproduce on the "
        "runtime: that is the evidence that the fix the broken config removes is in the code.",
        "",
        "Mode: *sync* replays the model's workflow as a plain workflow on the plain worker, "
        "*async* as its `async def` twin on the asyncio worker (docs/async.md): the same body "
        "(world/refund_agent.py's refund_steps), the same schedule and stop points, the same "
        "checks on the same ground truth.",
        "",
        f"**{len(traces)} traces replayed in {', '.join(modes)}; invariant violations: "
        + "; ".join(
            f"{m}: "
            + ", ".join(
                f"{k} {sum(len(r.violations) for r in v if r.mode == m)}"
                for k, v in sorted(by_cat.items())
            )
            for m in modes
        )  # fmt: skip
        + ".** Broken, temporal and simulated traces must show none; an assumption-lifted "
        "trace (PAUSE lifts A1, SERVER_SLOW lifts A2, PremiseTrueAtSend shows A3's window) may "
        "show what the model predicts for it (results/runtime_tlc.md).",
        "",
        "| category | traces | configs |",
        "|---|---:|---|",
    ]
    for cat_name, rs in sorted(by_cat.items()):
        lines.append(f"| {cat_name} | {len({r.trace for r in rs})} | "
                     f"{', '.join(sorted({r.config for r in rs}))} |")  # fmt: skip
    per_mode = [f"{m} outcome | sends | applied | violations | divergences | s" for m in modes]
    lines += ["", "Real faults performed in total (all modes):", "",
              "| " + " | ".join(totals) + " |", "|" + "---:|" * len(totals),
              "| " + " | ".join(str(v) for v in totals.values()) + " |", "",
              "| trace | model invariant | steps | " + " | ".join(per_mode) + " |",
              "|---|---|---:|" + "---|---:|---:|---|---:|---:|" * len(modes)]  # fmt: skip
    by_key = {(r.trace, r.mode): r for r in results}
    for name in traces:
        first = next(r for r in results if r.trace == name)
        cells = []
        for m in modes:
            r = by_key.get((name, m))
            if r is None:
                cells.append("- | - | - | - | - | -")
                continue
            viol = ", ".join(r.violations) or "none"
            cells.append(f"{r.status} | {r.sends_seen} | {r.applied} | {viol} | "
                         f"{len(r.divergences)} | {r.seconds}")  # fmt: skip
        lines.append(f"| {name} | {first.model_invariant or '-'} | "
                     f"{sum(first.actions.values())} | " + " | ".join(cells) + " |")  # fmt: skip
    unforced = list(dict.fromkeys((r.trace, x) for r in results for x in r.not_reproducible))
    if unforced:
        lines += ["", "## Steps the runtime cannot be made to take", "",
                  "The replay drove these steps and the runtime did what it allows instead "
                  "(the fix the broken config removes is in the code):", ""]  # fmt: skip
        lines += [f"- `{trace}`: {why}" for trace, why in unforced]
    if violations:
        lines += ["", "## Violations found", ""]
        for trace, name, msgs in violations:
            lines.append(f"- `{trace}` {name}:")
            lines += [f"  - {m}" for m in msgs]
    if doc["seeds"]:
        lines += [
            "",
            f"Simulation seeds (conformance/sim_traces): {', '.join(map(str, doc['seeds']))}",
        ]
    lines += [
        "",
        "Divergences are places where the real system did not follow the model's "
        "schedule (for a broken trace: where the fix stopped it, e.g. a fenced write or "
        "a refused dispatch); the trace still ran to a settled world and was checked.",
        "",
    ]
    mpath.write_text("\n".join(lines))
    return jpath, mpath


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    import psycopg

    from interlock_runtime import testing

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="*", help="trace files to replay (printed, no report)")
    ap.add_argument("--report", action="store_true", help="replay and write results/trace_replay.*")
    ap.add_argument("--all", action="store_true", help="every saved and simulated trace")
    ap.add_argument("--mode", choices=(*MODES, "both"), default="sync",
                    help="the workflow's kind: plain (sync), its async def twin on the asyncio "
                         "worker (async), or each trace in both, side by side in the report")  # fmt: skip
    ap.add_argument("--render", action="store_true",
                    help="re-render results/trace_replay.md from results/trace_replay.json")  # fmt: skip
    opts = ap.parse_args(argv)
    if opts.render:
        doc = json.loads((REPO / "results" / "trace_replay.json").read_text())
        kept = [ReplayResult(**r) for r in doc["results"]]
        write_report(kept, doc["wall_seconds"], doc["commit"], doc.get("dirty"),
                     doc.get("generated_by"))  # fmt: skip
        return 0
    if opts.traces:
        paths = [Path(p) for p in opts.traces]
    elif opts.all:
        paths = saved_traces() + trace_paths("simulated")
    else:
        paths = trace_paths("broken") + trace_paths("simulated")
    modes = list(MODES) if opts.mode == "both" else [opts.mode]
    runs = [(p, m) for p in paths for m in modes]
    admin = testing.admin_dsn()
    results = []
    t0 = time.monotonic()
    with testing.template_database(admin) as template, tempfile.TemporaryDirectory() as tmp:
        for i, (p, mode) in enumerate(runs):
            try:
                r = replay(p, admin, template, Path(tmp) / f"r{i}", mode)
            except psycopg.OperationalError as exc:
                # The shared cluster was restarted under the replay (seen: another suite's
                # immediate restart). That is no finding about the trace: replay it once more
                # and say so in the report.
                print(f"{p.stem}: Postgres went away ({exc}); replaying once more", flush=True)
                testing.admin_dsn()  # waits for the cluster
                time.sleep(3)
                r = replay(p, admin, template, Path(tmp) / f"r{i}b", mode)
                r.divergences.append("replayed a second time: Postgres restarted under the first")
            results.append(r)
            print(
                f"{r.trace} ({r.mode}): {r.status}, sends {r.sends_seen}, applied {r.applied}, "
                f"violations {sorted(r.violations) or 'none'}, {r.seconds}s",
                flush=True,
            )
    if opts.report:
        args = sys.argv[1:] if argv is None else argv
        j, m = write_report(results, time.monotonic() - t0,
                            command=" ".join(["python -m conformance.trace_replay", *args]))  # fmt: skip
        print(f"wrote {j.relative_to(REPO)} and {m.relative_to(REPO)}")
    bad = findings(results)
    for r in bad:
        print(f"violation where none may be: {r.trace} ({r.mode}, {r.category}): "
              f"{sorted(r.violations)}", file=sys.stderr)  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
