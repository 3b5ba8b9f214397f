"""The mixed sweep of docs/design.md#prove as a driver scenario (scenarios/MIX.yaml): random plans of
crashes and world events, judged by the amount the event order allows.

Why: each S-scenario fixes one fault at one point. Real incidents mix them: a crash, then a
person refunds by hand while the workers are down, then the approval is revoked after the
recovery. The mixed sweep draws such plans at random, plays each one as an ordinary timeline of
the runner's actions against one system (prove.runner.Run builds and tears down its own target,
model stub, database and worker subprocesses), and judges the result with one rule set that
holds for every plan: the event-order oracle below. The runner's own per-scenario `evaluate` is
not the verdict (its `require` is empty here); ours is.

The plan (make_plan, from random.Random(plan_key(...))): 0-2 crashes, 0-2 world events with a
placement each, maybe a duplicate start. The key names the tier, seed and iteration but not the
system, so the three systems play the same plans (a paired comparison).

- crash 1: `waiting` (every worker SIGKILLed while the workflow waits for its approval; the
  approval arrives during the outage, as S11), `pre_send` (kill point runtime
  effect_after_dispatch / Temporal effect_before_dispatch), `post_send` (effect_after_send) or
  `external` (every worker SIGKILLed at a uniform random time in [0, 1.5) s after the approval).
  Crash 2 is always `external`, at a uniform time in [0, 8) s after the first restart (it spans
  the recovery): a second instrumented crash cannot be played, see "Runner limits" below.
- events: hand refund full (2000) or partial (1000), revoke, prune (EMULATED key expiry), cancel,
  re-approve (the same approval again). Placements: `before_decision` (before `start`: the
  hand refund is part of what the model and the approver saw; a cancel goes right after `start`
  and the plan then has no approval and no crash), `outage` (between a crash's `down` and its
  restart), `after_recovery` (after the last restart, or after the approval when nothing
  crashed, following a uniform [0, 1.5) s sleep), `after_result` (after the workflow ended).
- duplicate start: with probability 0.3, right after start, in an outage, after recovery or
  after the result.

The event-order oracle (judge) reads the target's ledger and access log, and the times of the
world events from the run's timeline (`t` relative to the Run's t0 = timings.started_at; the
access log's arrivals and the ledger's `created` are epoch seconds of the same clock). An agent
application is a ledger row not made by hand; its send time is the arrival of the POST the
target applied it for (200, not a replay), else the row's `created`. Rules, from docs/design.md#scenarios:

1. At most one application of the approved 2000 (`duplicate_applications` counts the rest; a
   re-approve, a duplicate start or a prune never licenses another), and each application is of
   the approved amount (`wrong_amount`).
2. No application whose send reached the target after a revoke returned
   (`sent_under_revoked_grant`); for the runtime an effect the revoke returned in its
   may-still-land list is exempt (rt.revoke's contract). A revoke that found no approval to
   revoke (the runtime's `skipped`, Temporal's update of 0 rows) changes nothing.
3. No application whose send reached the target after a hand refund that came after the decision
   (`sent_on_changed_premise`): that refund changed the premises the approval was given on. A
   hand refund before the decision (noted before `start`) is part of those premises.
4. No application whose send reached the target after a cancel returned (`sent_after_cancel`).
5. The allowed agent totals: {0} when no approval was given, or when a blocking event (rule 2 to
   4, a revoke counting only when it listed nothing) happened before the first application's
   send and before the workflow ended; otherwise {2000}, widened to {0, 2000} when a revoke
   that listed the effect came first (the effect may or may not land), and at tier 3 when a
   crash hit after the approval and before the end (the runtime surfaces AMBIGUOUS and never
   resends: blocked, an availability cost, not incorrect).

An iteration is correct when the agent total is in the allowed set and no application broke
rules 1-4. `blocked_never_sent` = the refund was due and never applied (the availability cost;
incorrect unless a tier-3 crash made 0 allowed). Due = approved, with no revoke (listing the
effect or not), cancel or changed premise before the first send and the end of the workflow.

Plan shapes (kept simple on purpose): a re-approve is placed in a `waiting` outage (approval
sent, not yet consumed); a second crash is an external SIGKILL (`sleep` + `down`); a cancel of
a workflow that already ended is refused by both systems and recorded as `cancel_refused` (the
timeline goes on; older run files recorded it as a run error, which `_refused_event` reads).
A prune makes the runtime's tier-1 key untrustworthy at any moment, so plans with a prune run
with dedup_window = 600 s (= the runtime's DEDUP_MARGIN): the runtime is told the truth that a
stored key may be gone at any time and recovers by query (as S04 after the real age wait).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import time
from collections import Counter
from typing import Any

from prove import driver
from prove.driver import DriverRun
from prove.scenario import FAMILY, Scenario, Variant

AMOUNT = 2000  # the approved refund (the model stub's answer)
HAND = {"hand_full": 2000, "hand_partial": 1000}
EVENT_KINDS = ("hand_full", "hand_partial", "revoke", "prune", "cancel", "reapprove")
PLACEMENTS = ("before_decision", "outage", "after_recovery", "after_result")
CRASH_KINDS = ("waiting", "pre_send", "post_send", "external")
DUP_PLACEMENTS = ("after_start", "outage", "after_recovery", "after_result")
KILL_POINTS = {
    "pre_send": {"runtime": "effect_after_dispatch", "temporal": "effect_before_dispatch"},
    "post_send": {"runtime": "effect_after_send", "temporal": "effect_after_send"},
}
# where each kind of event may go (see the module docstring for why some are left out)
VALID: dict[str, tuple[str, ...]] = {
    "hand_full": PLACEMENTS,
    "hand_partial": PLACEMENTS,
    "revoke": ("outage", "after_recovery", "after_result"),  # before the approval: a no-op
    "prune": PLACEMENTS,
    "cancel": ("before_decision", "outage", "after_recovery"),  # after the end: refused
    "reapprove": ("outage",),  # a `waiting` outage only
}
EXTERNAL_WINDOW = 1.5  # crash 1 `external`: uniform in [0, this) s after the approval
SECOND_WINDOW = 8.0  # crash 2: uniform in [0, this) s after the first restart
AFTER_RECOVERY_WINDOW = 1.5  # `after_recovery` events: uniform sleep in [0, this) s first
DUP_START_P = 0.3
SETTLE = 1.0  # after the result: a straggling send (a cancelled activity) still lands
PRUNE_DEDUP_WINDOW = 600  # = DEDUP_MARGIN: with a prune, no stored key is trusted at recovery


# -- plans ----------------------------------------------------------------------------------


def plan_key(tier: int, seed: int, i: int) -> str:
    """The RNG key of one iteration: the same for every system (paired plans)."""
    return f"MIX-t{tier}-s{seed}-i{i}"


def make_plan(rng: random.Random) -> dict:
    """One random plan: {crashes: [...], events: [...], duplicate_start: placement | None}."""
    crashes: list[dict] = []
    n_crash = rng.choice((0, 1, 2))
    if n_crash:
        kind = rng.choice(CRASH_KINDS)
        crashes.append({"kind": kind} if kind != "external"
                       else {"kind": kind, "after": round(rng.uniform(0, EXTERNAL_WINDOW), 3)})  # fmt: skip
    if n_crash == 2:
        crashes.append({"kind": "external", "after": round(rng.uniform(0, SECOND_WINDOW), 3)})
    events: list[dict] = []
    for _ in range(rng.choice((0, 1, 2))):
        kind = rng.choice(EVENT_KINDS)
        if kind == "reapprove" and not (crashes and crashes[0]["kind"] == "waiting"):
            # a re-approve needs the approval still unconsumed: an outage before it
            if crashes:
                crashes[0] = {"kind": "waiting"}
            else:
                crashes.append({"kind": "waiting"})
        places = [p for p in VALID[kind] if p != "outage" or crashes]
        place = rng.choice(places)
        ev: dict[str, Any] = {"kind": kind, "placement": place}
        if place == "outage":
            ev["outage"] = 0 if kind == "reapprove" else rng.randrange(len(crashes))
        if place == "after_recovery":
            ev["delay"] = round(rng.uniform(0, AFTER_RECOVERY_WINDOW), 3)
        events.append(ev)
    dup = None
    if rng.random() < DUP_START_P:
        dup = rng.choice([p for p in DUP_PLACEMENTS if p != "outage" or crashes])
    plan = {"crashes": crashes, "events": events, "duplicate_start": dup}
    if any(e["kind"] == "cancel" and e["placement"] == "before_decision" for e in events):
        plan = _cancel_early(plan)
    return plan


def _cancel_early(plan: dict) -> dict:
    """A cancel before the decision: no approval follows, so nothing crashes and nothing happens
    during an outage or a recovery; such events move after the result when they may."""
    events = []
    for e in plan["events"]:
        if e["placement"] in ("outage", "after_recovery"):
            if "after_result" not in VALID[e["kind"]]:
                continue
            e = {"kind": e["kind"], "placement": "after_result"}
        events.append(e)
    dup = plan["duplicate_start"]
    if dup in ("outage", "after_recovery"):
        dup = "after_result"
    return {"crashes": [], "events": events, "duplicate_start": dup, "cancel_early": True}


def _event_step(kind: str) -> dict:
    if kind in HAND:
        return {"hand_refund": {"amount": HAND[kind]}}
    return {{"revoke": "revoke", "prune": "prune_keys", "cancel": "cancel",
             "reapprove": "reapprove"}[kind]: None}  # fmt: skip


def timeline(plan: dict, family: str) -> list[dict]:
    """The plan as a timeline of the runner's actions for one system family."""
    evs = plan["events"]
    dup = plan.get("duplicate_start")

    def at(place: str, outage: int | None = None) -> list[dict]:
        out = [_event_step(e["kind"]) for e in evs if e["placement"] == place
               and (outage is None or e.get("outage") == outage)
               and not (place == "before_decision" and e["kind"] == "cancel")]  # fmt: skip
        return out

    steps: list[dict] = list(at("before_decision"))
    crashes = plan["crashes"]
    first = crashes[0] if crashes else None
    if first and first["kind"] in KILL_POINTS:
        steps.append({"workers": {"kill_at": KILL_POINTS[first["kind"]][family]}})
    else:
        steps.append({"workers": None})
    steps.append({"start": None})
    if dup == "after_start":
        steps.append({"duplicate_start": None})
    if plan.get("cancel_early"):
        steps.append({"cancel": None})
    else:
        if first is None:
            steps.append({"approve": {"amount": AMOUNT}})
        elif first["kind"] == "waiting":
            steps += [{"wait_decided": None}, {"down": None}, {"approve": {"amount": AMOUNT}}]
        elif first["kind"] in KILL_POINTS:
            steps += [{"approve": {"amount": AMOUNT}}, {"wait_crash": None}, {"down": None}]
        else:
            steps += [{"approve": {"amount": AMOUNT}}, {"sleep": {"seconds": first["after"]}},
                      {"down": None}]  # fmt: skip
        for k in range(len(crashes)):
            steps += at("outage", k)
            if dup == "outage" and k == len(crashes) - 1:
                steps.append({"duplicate_start": None})
            steps.append({"restart": None})
            if k + 1 < len(crashes):  # the next crash: external, during the recovery
                steps += [{"sleep": {"seconds": crashes[k + 1]["after"]}}, {"down": None}]
        for e in evs:
            if e["placement"] == "after_recovery":
                steps += [{"sleep": {"seconds": e["delay"]}}, _event_step(e["kind"])]
        if dup == "after_recovery":
            steps.append({"duplicate_start": None})
    steps.append({"wait_result": None})
    steps += at("after_result")
    if dup == "after_result":
        steps.append({"duplicate_start": None})
    steps.append({"sleep": {"seconds": SETTLE}})
    return steps


# -- the event-order oracle -----------------------------------------------------------------


def _is_refund_post(a: dict) -> bool:
    return a.get("method") == "POST" and str(a.get("path", "")).rstrip("/") in (
        "/refunds",
        "/v1/refunds",
    )


def _response(a: dict) -> dict:
    r = a.get("response")
    return r if isinstance(r, dict) else {}


def world_events(notes: list[dict], t0: float, ledger: list[dict]) -> dict:
    """The world events of a run's timeline with their epoch times (see judge)."""
    hand_rows = {r["id"]: r for r in ledger if r.get("source") == "hand"}
    i_start = next((k for k, n in enumerate(notes) if n["what"] == "start"), None)
    out: dict[str, Any] = {"approve": None, "result": None, "hands": [], "revokes": [],
                           "ignored_revokes": [], "cancels": [], "crashes": []}  # fmt: skip
    for k, n in enumerate(notes):
        t = t0 + float(n["t"])
        what = n["what"]
        if what == "approve" and out["approve"] is None:
            out["approve"] = t
        elif what == "result" and out["result"] is None:
            out["result"] = t
        elif what == "hand_refund":
            row = hand_rows.get(n.get("refund"))
            out["hands"].append({"t": float(row["created"]) if row else t,
                                 "amount": n.get("amount"),
                                 "before_decision": i_start is None or k < i_start})  # fmt: skip
        elif what == "revoke":
            if n.get("skipped") or n.get("rows") == 0:
                out["ignored_revokes"].append({"t": t, "why": n.get("skipped") or "0 rows"})
            else:
                out["revokes"].append({"t": t, "listed": list(n.get("may_still_land") or [])})
        elif what == "cancel":
            out["cancels"].append({"t": t})
        elif what in ("crashed", "sigkill"):
            out["crashes"].append(t)
    return out


def applications(ledger: list[dict], access: list[dict]) -> list[dict]:
    """The agent's applications (ledger rows not made by hand), oldest first, each with the
    arrival of the POST the target applied it for."""
    posts = [a for a in access if _is_refund_post(a)]
    out = []
    for r in sorted((r for r in ledger if r.get("source") != "hand"), key=lambda r: r["created"]):
        p = next((a for a in posts if a.get("status") == 200 and _response(a).get("id") == r["id"]
                  and not _response(a).get("replayed")), None)  # fmt: skip
        out.append({"id": r["id"], "key": r.get("key"), "amount": r["amount"],
                    "created": float(r["created"]),
                    "arrival": float(p["arrival"]) if p else float(r["created"])})  # fmt: skip
    return out


def judge(ledger: list[dict], access: list[dict], notes: list[dict], t0: float, system: str,
          tier: int, approved: int = AMOUNT) -> dict:  # fmt: skip
    """The event-order oracle (module docstring, rules 1-5) on one run's ground truth."""
    w = world_events(notes, t0, ledger)
    apps = applications(ledger, access)
    runtime = FAMILY[system] == "runtime"
    failures: list[str] = []
    c = Counter()

    def rel(t: float) -> float:
        return round(t - t0, 3)

    for k, a in enumerate(apps):
        tag = f"application {a['id']} (send at t={rel(a['arrival'])})"
        if k > 0:
            c["duplicate_applications"] += 1
            failures.append(f"{tag}: application #{k + 1} of the approved refund")
        if a["amount"] != approved:
            c["wrong_amount"] += 1
            failures.append(f"{tag}: amount {a['amount']}, approved {approved}")
        for rv in w["revokes"]:
            if rv["t"] < a["arrival"] and not (runtime and a["key"] in rv["listed"]):
                c["sent_under_revoked_grant"] += 1
                failures.append(f"{tag}: after the revoke returned at t={rel(rv['t'])}")
                break
        for h in w["hands"]:
            if not h["before_decision"] and h["t"] < a["arrival"]:
                c["sent_on_changed_premise"] += 1
                failures.append(f"{tag}: after a hand refund of {h['amount']} at "
                                f"t={rel(h['t'])} changed the premises")  # fmt: skip
                break
        for cc in w["cancels"]:
            if cc["t"] < a["arrival"]:
                c["sent_after_cancel"] += 1
                failures.append(f"{tag}: after the cancel returned at t={rel(cc['t'])}")
                break

    end = w["result"] if w["result"] is not None else math.inf
    first_send = apps[0]["arrival"] if apps else math.inf
    horizon = min(first_send, end)
    hard = ([h["t"] for h in w["hands"] if not h["before_decision"]]
            + [cc["t"] for cc in w["cancels"]]
            + [rv["t"] for rv in w["revokes"] if not (runtime and rv["listed"])])  # fmt: skip
    soft = [rv["t"] for rv in w["revokes"] if runtime and rv["listed"]]
    why: list[str] = []
    owed = False  # 2000 was due: approved, and nothing (not even a listing revoke) stopped it
    if w["approve"] is None:
        allowed, why = {0}, ["no approval was given"]
    elif any(t < horizon for t in hard):
        allowed, why = {0}, ["a revoke, a hand refund after the decision or a cancel came first"]
    else:
        allowed = {approved}
        owed = not any(t < horizon for t in soft)
        if not owed:
            allowed.add(0)
            why.append("a revoke listed the effect as may-still-land")
        if tier == 3 and any(w["approve"] < t < end for t in w["crashes"]):
            allowed.add(0)
            why.append("tier 3: a crash after the approval may leave it blocked")
    total = sum(a["amount"] for a in apps)
    if total not in allowed:
        failures.append(f"agent total {total}, the event order allows {sorted(allowed)}"
                        + (f" ({'; '.join(why)})" if why else ""))  # fmt: skip
    out = {
        "correct": not failures,
        "failures": failures,
        "expected_cents": sorted(allowed),
        "observed_cents": total,
        "agent_applications": len(apps),
        "agent_sends": sum(1 for a in access if _is_refund_post(a)),
        "blocked_never_sent": int(not apps and owed),
        "allowed_because": why,
        "world": {
            "approve": None if w["approve"] is None else rel(w["approve"]),
            "result": None if w["result"] is None else rel(w["result"]),
            "hands": [{**h, "t": rel(h["t"])} for h in w["hands"]],
            "revokes": [{**r, "t": rel(r["t"])} for r in w["revokes"]],
            "ignored_revokes": [{**r, "t": rel(r["t"])} for r in w["ignored_revokes"]],
            "cancels": [rel(x["t"]) for x in w["cancels"]],
            "crashes": [rel(t) for t in w["crashes"]],
            "sends": [rel(a["arrival"]) for a in apps],
        },  # fmt: skip
    }
    for k in (*driver.OUTCOME_COUNTERS, "sent_after_cancel"):
        out.setdefault(k, c[k])
    return out


# -- the driver -----------------------------------------------------------------------------


def iteration_scenario(plan: dict, family: str, tier: int, system: str, timing: dict,
                       i: int) -> tuple[Scenario, Variant]:  # fmt: skip
    """An in-memory scenario playing one plan (require {}: the verdict is judge's)."""
    params: dict[str, Any] = {}
    if any(e["kind"] == "prune" for e in plan["events"]):
        params["dedup_window"] = PRUNE_DEDUP_WINDOW
    t = dict(timing)
    variant = Variant(name="iter", description=f"mixed sweep iteration {i}", tiers=(tier,),
                      params=params, timing=t,
                      oracle={"require": {}, "refund_expected": True,
                              "note": "judged by prove.mixed.judge (the event-order oracle)"})  # fmt: skip
    scn = Scenario(id="MIX", title="mixed sweep iteration", description=json.dumps(plan),
                   tiers=(tier,), systems=(system,), variants=(variant,),
                   timeline=tuple(timeline(plan, family)), predicted=(), invariants=(),
                   seeds={"quick": 1, "full": 1})  # fmt: skip
    return scn, variant


def _refused_event(record: dict) -> str | None:
    """A cancel the system refused because the workflow had already ended (see the docstring);
    None for any other error."""
    err = record.get("error")
    if not err:
        return None
    tb = next((n.get("tb", "") for n in record["faults"]["timeline"] if n["what"] == "error"), "")
    if "in a_cancel" in tb:
        return f"cancel refused: {err}"
    return None


def run_iteration(run: DriverRun, i: int) -> dict:
    """Plan, play and judge iteration i of a driver run; the full record goes to run.dir.
    A retry (run.attempt > 0, see DriverRun.iterate) plays the same plan; the earlier
    attempts' record and directory are kept as <run_id>.attempt<k>(.json)."""
    from prove.runner import Run, run_name

    rng = random.Random(plan_key(run.tier, run.seed, i))
    plan = make_plan(rng)
    family = FAMILY[run.system]
    scn, variant = iteration_scenario(plan, family, run.tier, run.system, run.timing, i)
    services = dataclasses.replace(run.services, crash_plans="instrumented")
    seed = run.seed * 1000 + i
    rid = run_name(scn.id, variant.name, run.system, run.tier, seed, "local")
    if run.attempt:  # Run wipes its directory and the record is rewritten: move the last aside
        for ext in (".json", ""):
            p = run.dir / f"{rid}{ext}"
            if p.exists():
                p.rename(run.dir / f"{rid}.attempt{run.attempt - 1}{ext}")
    t_begin = time.time()
    record = Run(services, scn, variant, run.system, run.tier, seed, out_dir=run.dir,
                 api="local").execute()  # fmt: skip
    path = run.dir / f"{record['identity']['run_id']}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True))
    gt = record["ground_truth"]
    verdict = judge(gt["ledger"], gt["access_log"], record["faults"]["timeline"],
                    float(record["timings"]["started_at"]), run.system, run.tier)  # fmt: skip
    refused = _refused_event(record)
    if record.get("error") and not refused:
        # a harness error (this includes "harness too late"): DriverRun.iterate plays the
        # iteration again, and leaves it out of the count if every attempt ended so
        verdict["correct"] = False
        verdict["failures"].append(f"harness error: {record['error']}")
    files = [path.name, rid]
    for k in range(run.attempt):
        files += [f"{rid}.attempt{k}.json", f"{rid}.attempt{k}"]
    it = {"i": i, "seed": seed, "plan": plan, "timeline": list(scn.timeline), **verdict,
          "event_refused": refused, "harness_error": None if refused else record.get("error"),
          "result": record["result"]["kind"],
          "status": (record["artifacts"] or {}).get("status"),
          "workflow": record["identity"]["workflow_id"],
          "run_record": str(path.relative_to(run.dir)),
          "files": files,  # what a resume keeps in run.dir for this iteration
          "wall": round(time.time() - t_begin, 3)}  # fmt: skip
    run.note("iteration", i=i, correct=it["correct"], observed=it["observed_cents"],
             allowed=it["expected_cents"], record=it["run_record"])  # fmt: skip
    return it


def mixed(run: DriverRun) -> dict:
    """The mixed sweep's driver (prove/driver.py): run.iterations random plans, judged."""
    iters = run.iterate(lambda i: run_iteration(run, i))
    ok = driver.counted(iters)  # the harness-error iterations measured nothing
    out = driver.summarize(iters)
    out["sent_after_cancel"] = sum(it["sent_after_cancel"] for it in ok)
    totals = Counter(it["observed_cents"] for it in ok)
    out["expected"] = "the amount the event order allows (prove.mixed.judge)"
    out["observed"] = (f"correct {out['correct_n']}/{out['n']}; agent totals "
                       + ", ".join(f"${c / 100:.0f} x{n}" for c, n in sorted(totals.items())))  # fmt: skip
    out["prediction_held"] = None
    walls = [it["wall"] for it in iters]
    kinds = Counter(e["kind"] + "@" + e["placement"] for it in iters for e in it["plan"]["events"])
    return {
        "outcome": out,
        "iterations": iters,
        "faults": {
            "kind": "mixed sweep",
            "plan_keys": [plan_key(run.tier, run.seed, i) for i in range(run.iterations)],
            "events": dict(kinds),
            "crashes": dict(Counter(c["kind"] for it in iters for c in it["plan"]["crashes"])),
        },  # fmt: skip
        "ground_truth": {
            "note": "each iteration's ledger and access log are in its run record "
            "(iterations[].run_record, relative to the run directory)"
        },  # fmt: skip
        "artifacts": {"records": [it["run_record"] for it in iters]},
        "timings": {
            "iteration_wall": {
                "n": len(walls),
                "median": round(statistics.median(walls), 3) if walls else None,
                "max": max(walls) if walls else None,
            }
        },  # fmt: skip
    }
