"""Aggregate Prove runs into cells and write results/runtime_prove.md and .json (docs/design.md#prove, docs/results.md#runtime-prove).

Per cell (scenario, variant, system, tier): n, correct count and rate with a 95% Wilson
interval, outcome counters summed and per 1,000 runs, end-to-end p50/p99, failing run ids, the
observed outcomes beside the prediction of docs/design.md#scenarios (and whether it held), and for the runtime
the catalog invariants whose code checks failed in any run. Verdicts against (a) and (b)
separately (docs/design.md#prove): better when the runtime's interval lies wholly above, worse when wholly
below, else equal; "better (duplicates), worse (availability)" when that is the trade.

Every number in the report comes from the run files under .data/prove/runs/. The Markdown's
layout and prose live in the Jinja2 template prove/templates/runtime_prove.md.j2; this module
computes the values (cells, rows, verdicts, the audit's scores) and the plots.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from prove import claims, prove_raw
from prove.scenario import DEFAULT_TIMING, PREDICTED_AS, SYSTEMS, Scenario
from prove.scrub import scrub

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
COUNTERS = ("duplicate_applications", "wrong_amount", "sent_under_revoked_grant",
            "sent_on_changed_premise", "blocked_never_sent")  # fmt: skip
LABEL = {"runtime": "runtime", "runtime_async": "runtime (async)",
         "temporal_idem": "(a) temporal_idem", "temporal_check": "(b) temporal_check"}  # fmt: skip
# The systems of the Stripe table (runtime_async runs the local target only).
STRIPE_SYSTEMS = tuple(m for m in SYSTEMS if m != "runtime_async")

EMULATED = [
    "EMULATED model variance: world/model_stub.py serves the Anthropic Messages API shape; both "
    "systems call it through the official anthropic SDK with base_url pointed at it (2000 on a "
    "case's first call, 3000 on later calls when re-decision is on). Claude cannot be reached.",
    "EMULATED key expiry (S04 only): POST /admin/prune_keys on the local target forgets stored "
    "idempotency keys at once, standing in for Stripe's 24 h pruning.",
    "EMULATED payment provider: the local target (world/target.py, SQLite ledger, tiers 1/2/3) "
    "stands in for Stripe; Stripe live mode cannot be reached, so no Stripe-live table is run.",
    "EMULATED Stripe (section 3 only): the official stripe SDK (world/stripe_target.py "
    "StripeRefunds; in both Temporal activities the same StripeRefunds calls) pointed at the "
    "local target's Stripe-compatible /v1 subset (form-encoded POST /v1/refunds with "
    "Idempotency-Key, GET /v1/refunds filtered by metadata, GET /v1/payment_intents).",
]
DEVIATIONS = [
    "The workflow's long sleep is shortened to `sleep_seconds` (0.5 s) in both systems.",
    "Temporal workers run with sticky_queue_schedule_to_start_timeout shortened from the SDK's "
    "10 s default (see each cell's timing constants): after a worker dies its workflow's next "
    "task waits that long on the dead worker's sticky queue. It changes resume latency only.",
    "Crash plans: the default sweep crashes every seed at the scenario's instrumented kill "
    "point, so that each cell measures one fault and its n can decide; random crashes are "
    "MIX's (crash 1 may be an external SIGKILL at a random time). The full sweep follows "
    "docs/design.md#prove (the `crash plans` column of section 2c says which a cell ran): for half of "
    "the seeds of a crash scenario (the odd seeds) the instrumented kill point is replaced by an "
    "external SIGKILL of the armed workers at a seeded uniform time in [0, 2 s) after the "
    "approval (the spec says up to the cell's no-fault p99, which this sweep does not measure); "
    "each run file records the plan, the time and the pids. Predictions are for the "
    "instrumented point, so `held` counts instrumented runs only; the oracle judges every run. "
    "S05b (crash before the approval) and S08 (no crash) keep their plan. An external kill "
    "that struck after the refund was applied makes the timeline's world event follow the "
    "effect: such a run is judged by the event order (at most one application, of the approved "
    "amount, none after the world changed), as MIX judges every run. `down` is a real external "
    "SIGKILL of every other worker subprocess.",
    "One laptop (2 cores, shared by the sweep's parallel runs); Temporal is the dev server "
    "with SQLite, not a production deployment.",
    "Worker processes of both systems are forked from one process per sweep that imported "
    "their code once (prove/zygote.py), instead of starting a fresh interpreter each: the same "
    "code in a process of its own (own pid, signals, kill points); no measured time ever "
    "included the interpreter start, so latencies are unchanged by it.",
]
CONCESSIONS = [
    (
        "A1",
        "No process pause (GC, SIGSTOP, VM freeze) across the local send deadline: the send "
        "watchdog acts only while the process runs. A pause longer than send_timeout + "
        "settle_margin duplicates at tier 2 like Temporal (S13 long).",
    ),
    (
        "A2",
        "Settle: the target finishes any request within settle_margin after the send "
        "deadline. A target slower than that duplicates at tier 2 in all three systems (S08c).",
    ),
    (
        "A3",
        "External premises (the target's refunded total) are true as of their read; only "
        "premises inside this Postgres are atomic with the dispatch.",
    ),
    (
        "tier 3",
        "At tier 3 (no dedupe, no lookup) the runtime never resends an effect whose "
        "outcome is unknown: it surfaces AMBIGUOUS for a person to reconcile, and an unsent refund "
        "is blocked until then (blocked_never_sent, the availability cost).",
    ),
    (
        "scale",
        "One Postgres primary, polling plus LISTEN, O(steps) replay, no parallel steps in "
        "one workflow, Python only: Temporal scales further.",
    ),
]


# Why a measured cell contradicts its prediction, keyed (scenario, system, tier or None for
# every tier, variant). Printed only beside a contradiction the runs actually show; the numbers
# always come from the run files. Written after diagnosing the runs.
S13_T3_RUNTIME = (
    "the frozen sender's stopwatch starts before its dispatch; after the pause less than "
    "MIN_SEND_BUDGET (1 s) of its 3 s send budget is left, so it does not write its bytes "
    "(the effect is left open). At tier 3 the successor cannot look the send up and "
    "surfaces AMBIGUOUS without resending: $0, blocked_never_sent (the tier-3 availability "
    "cost), never a duplicate. The prediction assumed the paused sender would still send."
)
S13_LONG_TEMPORAL = (
    "timing decides it: on SIGCONT the Python SDK cancels the activity whose "
    "start-to-close expired during the pause (CancelledError in the attempt log), racing "
    "the frozen attempt's own POST; and the server may have handed a retry attempt to the "
    "frozen worker's open poll (as in S08a), which runs at once on SIGCONT. So the long "
    "pause gives one, two or three POSTs ($20-$60) run to run at tiers without dedupe; "
    "with a lookup (b at tier 2) a late attempt finds the first refund."
)
REASONS: dict[tuple, str] = {
    ("S13", "runtime", 3, "short"): S13_T3_RUNTIME,
    ("S13", "runtime", 3, "long"): S13_T3_RUNTIME,
    ("S13", "temporal_idem", None, "long"): S13_LONG_TEMPORAL,
    ("S13", "temporal_check", None, "long"): S13_LONG_TEMPORAL,
    ("S13", "runtime", 2, "long"): (
        "the spec concedes $40 for a pause past the send deadline (A1), but this pause sits at "
        "effect_after_dispatch, before the sender's last local check: on SIGCONT the sender's "
        "stopwatch (started before dispatch) shows the send deadline passed, so it does not "
        "write its bytes, and its lease is gone; the successor resolved the open send after "
        "send_deadline + settle_margin by a lookup (nothing there) and sent once. A1's "
        "concession remains for a pause inside the write itself, after that check (TLC's "
        "Pause_t2 configuration), which a stop point cannot reach."
    ),
    ("S05", "temporal_idem", None, "base"): (
        "the spec's $50 counts the reset alone ($20 + the reset run's $30 under a new run id, "
        "so a new key). At tiers 2 and 3 the crash before the reset already duplicated, as in "
        "S01 ((a) t2/t3 $40: the retry re-POSTs and the target does not dedupe), so the reset's "
        "$30 comes on top of $40: $70. Same mechanism, composed."
    ),
    ("S05", "temporal_check", 3, "base"): (
        "the reset run's 3000 is refused (amount differs from the approval), as predicted; the "
        "$40 comes from the crash before the reset: at tier 3 (b) has no lookup, so its retry "
        "re-POSTs (S01 (b) t3 predicts exactly that $40)."
    ),
    ("S05b", "runtime", None, "base"): (
        "the prediction's $20 presumes the first decision (2000) stands, but the crash at "
        "decide_after_response comes before it is recorded, so the re-call decides 3000. The "
        "approval binds the grant to the 2000 payload's hash, so the 3000 effect is refused "
        "(REFUSED:authority: the grant does not cover this payload) and nothing is sent: $0, the "
        "refusal surfaced, counted as blocked_never_sent. The spec's S05b row does not fit its "
        "own setup; the measurement stands."
    ),
    ("S05b", "temporal_check", None, "base"): (
        "as for the runtime: the re-call decided 3000, the approval was for 2000; (b)'s grant "
        "check (3000 > the grant's amount bound 2000) raises `not authorized` before anything is "
        "sent: $0, not $20."
    ),
    ("S08a", "temporal_idem", 2, "base"): (
        "the prediction counts one retry. The server handed a retry attempt to the partitioned "
        "worker's long poll that was already open, and the reply sat in the partition; when it "
        "healed (12 s) that worker ran the attempt at once, though its start-to-close had long "
        "expired, while another attempt had already run on the other worker: three POSTs under "
        "the same run-id key at a tier that does not dedupe (the attempt log shows attempts 1 "
        "and 2 on the cut-off worker, 3 on the other). How many stale attempts land depends on "
        "the timing of the polls, so (a) at tier 2 duplicates at least once and sometimes more."
    ),
    ("S08a", "runtime", 1, "base"): (
        "at tier 1 the successor resolves the open send by resending under the same key inside "
        "the dedup window: the target replays the stored refund, so the status is "
        "COMMITTED_BY_RETRY (as in S01 at tier 1), not COMMITTED_ON_QUERY; one application, "
        "and the late response is kept as the effect's late_result."
    ),
}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # exact at the ends: k = n has upper bound 1 and k = 0 lower bound 0 (not 1 - 1e-16)
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def aggregate(scns: list[Scenario], results: list[dict]) -> list[dict]:
    by_cell: dict[tuple, list[dict]] = defaultdict(list)
    errored: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        i = r["identity"]
        key = (i.get("api", "local"), i["scenario"], i["variant"], i["system"], i["tier"])
        # a harness error (a service failed, the harness was late) is not a measurement: kept
        # aside, out of n, and listed among the cell's drops
        (errored if r.get("error") else by_cell)[key].append(r)
    from prove import audit

    cells = []
    scn_by_id = {s.id: s for s in scns}
    for (api, sid, variant, system, tier), runs in sorted(by_cell.items()):
        failed_runs = errored.get((api, sid, variant, system, tier), [])
        scn = scn_by_id.get(sid)
        runs.sort(key=lambda r: r["identity"]["seed"])
        ocs = [r["outcome"] for r in runs]
        # a loop scenario's run (prove/driver.py) carries n iterations; each counts as one run
        n = sum(int(o.get("n", 1)) for o in ocs)
        k = sum(int(o["correct_n"]) if "correct_n" in o else int(bool(o.get("correct")))
                for o in ocs)  # fmt: skip
        lo, hi = wilson(k, n)
        sums = {c: sum(int(o.get(c) or 0) for o in ocs) for c in COUNTERS}
        audits = [audit.audit_run(r) for r in runs if not r["identity"].get("driver")]
        proof = audit.cell_summary(audits) if audits else {
            "can_prove_mean": None, "false_claims": 0, "false_claims_per_1000": None,
            "n_audited": 0}  # fmt: skip
        size = {"runs": len(runs),
                "iterations_per_run": sorted({int(o.get("n", 1)) for o in ocs})}  # fmt: skip
        loop_timings = [{k2: v for k2, v in (r.get("timings") or {}).items()
                         if k2 not in ("started_at", "wall")}
                        for r in runs if r["identity"].get("driver")]  # fmt: skip
        # one number per timeline run; a loop's driver may summarize its own (a dict): skipped
        e2e = [v for r in runs
               if isinstance(v := (r.get("timings") or {}).get("end_to_end"), (int, float))]  # fmt: skip
        pred = scn.prediction(system, tier, variant) if scn else None
        held = [o.get("prediction_held") for o in ocs]
        inv_fail: Counter[str] = Counter()
        for r in runs:
            for name, v in (r.get("artifacts") or {}).get("invariants", {}).items():
                if isinstance(v, list) and v:
                    inv_fail[name] += 1
        plans = Counter(((r.get("faults") or {}).get("crash_plan") or {}).get("kind", "?")
                        for r in runs)  # fmt: skip
        cells.append({
            "api": api, "crash_plans": dict(plans),
            "refund_ids": [x["id"] for r in runs
                           for x in (r.get("ground_truth") or {}).get("ledger", [])],
            "scenario": sid, "variant": variant, "system": system, "tier": tier, "n": n,
            "correct": k, "correct_rate": k / n if n else None, "wilson95": [lo, hi],
            "counters": sums,
            "per_1000": {c: round(1000 * v / n, 1) for c, v in sums.items()} if n else {},
            "observed": dict(Counter(o.get("observed", "error") for o in ocs)),
            "statuses": dict(Counter(str((r.get("result") or {}).get("kind")) for r in runs)),
            "predicted": (pred or {}).get("total_cents") is not None and {
                "total_cents": pred["total_cents"], "status": pred.get("status"),
                "note": pred.get("note")} or None,
            "expected": ocs[0].get("expected") if ocs else None,
            "prediction_held": sum(1 for h in held if h), "prediction_checked": sum(
                1 for h in held if h is not None),
            "end_to_end_p50": percentile(e2e, 50), "end_to_end_p99": percentile(e2e, 99),
            "e2e_values": e2e,
            "failing_runs": [r["identity"]["run_id"] for r in runs
                             if not r["outcome"].get("correct")],
            "failing_shown": [r["identity"]["run_id"] + (
                f" (iterations {r['outcome'].get('failing_iterations')})"
                if r["identity"].get("driver") else "")
                for r in runs if not r["outcome"].get("correct")],
            "can_prove": proof, "size": size, "loop_timings": loop_timings,
            "audit_false_claims": [a.get("run_id") for a in audits if a.get("false_claims")],
            "timers": [t for r in runs for t in (r.get("timings") or {}).get("timers") or []
                       if t.get("timer") not in ("sleep", "0.5s")],
            "timer_to_send": [d for d in (_timer_to_send(r) for r in runs) if d is not None],
            "wake_after_restart": [w for w in (_wake_after_restart(r) for r in runs)
                                   if w is not None],
            "resume_after_restart": [r["timings"]["resume_after_restart"] for r in runs
                                     if (r.get("timings") or {}).get("resume_after_restart")
                                     is not None],
            "approve_to_send": [d for d in (_approve_to_send(r) for r in runs) if d is not None],
            "harness_errors": [r["identity"]["run_id"] for r in failed_runs],
            "dropped": cell_drops(runs, failed_runs),
            "invariant_failures": dict(inv_fail),
            "invariants_checked": scn.invariants if scn else [],
            "timing_constants": runs[0].get("timing_constants") if runs else None,
        })  # fmt: skip
    return cells


def _drop_kind(error: object) -> str:
    return "lateness" if "too late" in str(error) else "service"


def cell_drops(runs: list[dict], failed_runs: list[dict]) -> list[dict]:
    """What a cell measured nothing in, with why: whole runs that ended in a harness error
    (each standing for as many units as it planned: one, or a loop's iterations) and a loop
    run's dropped iterations (prove/driver.py: lateness, a service failure, a missed aim)."""
    out = []
    for r in failed_runs:
        ident = r["identity"]
        out.append({"run_id": ident["run_id"], "i": None, "kind": _drop_kind(r["error"]),
                    "reason": str(r["error"])[:200],
                    "units": int(ident.get("iterations_planned") or 1)})  # fmt: skip
    for r in runs:
        for d in (r.get("outcome") or {}).get("dropped_iterations") or []:
            out.append({"run_id": r["identity"]["run_id"], "i": d["i"], "kind": d["kind"],
                        "reason": d["reason"], "units": 1})  # fmt: skip
    return out


def _t0(r: dict) -> float | None:
    return (r.get("timings") or {}).get("started_at")


def _first_post(r: dict) -> float | None:
    posts = [a["arrival"] for a in (r.get("ground_truth") or {}).get("access_log") or []
             if a.get("method") == "POST" and a.get("path", "").rstrip("/")
             in ("/refunds", "/v1/refunds")]  # fmt: skip
    return min(posts) if posts else None


def _approve_to_send(r: dict) -> float | None:
    """Seconds from the approval (harness timeline) to the refund POST's arrival at the target."""
    t0, post = _t0(r), _first_post(r)
    approve = next((e["t"] for e in (r.get("faults") or {}).get("timeline") or []
                    if e.get("what") == "approve"), None)  # fmt: skip
    if t0 is None or post is None or approve is None:
        return None
    return round(post - (t0 + approve), 3)


def _timer_to_send(r: dict) -> float | None:
    """S10: seconds from the moment the effect could go (the timer due and the fresh workers
    ready, whichever is later) to the refund's arrival at the target. Comparable across the
    systems: Temporal's server fires its timer while no worker runs, the runtime's worker
    fires its own on return."""
    timers = [t for t in (r.get("timings") or {}).get("timers") or []
              if t.get("timer") not in ("sleep", "0.5s")]  # fmt: skip
    ready = (r.get("timings") or {}).get("workers_ready_at")
    post = _first_post(r)
    if not timers or ready is None or post is None:
        return None
    return round(post - max(timers[0]["due"], ready), 3)


def _wake_after_restart(r: dict) -> float | None:
    """S11: seconds from the fresh workers being ready to the refund POST (the approval arrived
    while every worker was down: how fast the kept signal wakes the workflow)."""
    post = _first_post(r)
    back = (r.get("timings") or {}).get("workers_ready_at")
    if r["identity"].get("scenario") != "S11" or post is None or back is None:
        return None
    return round(post - back, 3)


def compare(k1: int, n1: int, k2: int, n2: int) -> str:
    """The rule of section 0b on two counts: better, worse or equal."""
    (lo1, hi1), (lo2, hi2) = wilson(k1, n1), wilson(k2, n2)
    return "better" if lo1 > hi2 else "worse" if hi1 < lo2 else "equal"


def verdict(rt: dict | None, other: dict | None) -> str:
    if not rt or not other:
        return "n/a"
    v = compare(rt["correct"], rt["n"], other["correct"], other["n"])
    dup_r, dup_o = (c["counters"]["duplicate_applications"] for c in (rt, other))
    blk_r, blk_o = (c["counters"]["blocked_never_sent"] for c in (rt, other))
    # availability is judged by the same rule, on the blocked-never-sent counts; where the
    # intervals overlap the difference is only a point estimate, and labelled so
    blocked = compare(blk_r, rt["n"], blk_o, other["n"])
    more_blocked = blk_r / max(rt["n"], 1) > blk_o / max(other["n"], 1)
    fewer_dups = dup_r / max(rt["n"], 1) < dup_o / max(other["n"], 1)
    if v == "better" and more_blocked:
        return ("better (duplicates), worse (availability)" if blocked == "better"
                else "better (duplicates); more blocked (point estimate)")  # fmt: skip
    if v == "equal" and fewer_dups and more_blocked:
        return "equal (fewer duplicates, more blocked: point estimates)"
    if v == "equal" and rt["correct_rate"] != other["correct_rate"]:
        return f"equal (intervals overlap at n={rt['n']}/{other['n']})"
    return v


def drop_sensitive(rt: dict | None, other: dict | None) -> str | None:
    """Why a verdict would change had the dropped units (section 2d) gone the other way, or
    None: the verdict again with every drop counted correct for one side and incorrect for
    the other, both ways."""
    if not rt or not other:
        return None
    d_r, d_o = (sum(x["units"] for x in c["dropped"]) for c in (rt, other))
    if not d_r and not d_o:
        return None
    now = compare(rt["correct"], rt["n"], other["correct"], other["n"])
    best = compare(rt["correct"] + d_r, rt["n"] + d_r, other["correct"], other["n"] + d_o)
    worst = compare(rt["correct"], rt["n"] + d_r, other["correct"] + d_o, other["n"] + d_o)
    changed = sorted({v for v in (best, worst) if v != now})
    if not changed:
        return None
    return (f"{now} would be {' or '.join(changed)} had the dropped units gone the other way "
            f"(runtime {d_r} dropped, baseline {d_o})")  # fmt: skip


def _pct(c: dict) -> str:
    lo, hi = c["wilson95"]
    return f"{100 * c['correct_rate']:.0f}% ({c['n']}) [{100 * lo:.0f}-{100 * hi:.0f}]"


def _cellstr(c: dict | None) -> str:
    if not c:
        return "-"
    p = c["per_1000"]
    cp = c["can_prove"]["can_prove_mean"]
    return (f"{_pct(c)}; dup {p['duplicate_applications']:.0f}; "
            f"blocked {p['blocked_never_sent']:.0f}; "
            f"can-prove {'n/a' if cp is None else f'{cp:.1f}/5'}")  # fmt: skip


def _note(c: dict) -> str:
    """The prediction's note from the scenario file, as one table cell."""
    note = str((c["predicted"] or {}).get("note") or "-")
    return " ".join(note.split()).replace("|", "\\|")


def _observed(c: dict) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(c["observed"].items()))


def write(scns: list[Scenario], results: list[dict], versions: dict, wall: float,
          size: str = "quick", argv: list[str] | None = None,
          out_dir: Path = RESULTS) -> tuple[Path, Path]:  # fmt: skip
    """Pack the sweep's run files into out_dir's raw data (prove/prove_raw.py), then render the
    report from that pack alone, as `--verify` will."""
    from baselines.refund import activity_source

    # a working sweep may read working TLC runs; the published one reads results/ alone
    published = out_dir.resolve() == RESULTS.resolve()
    working = None if published else _working_tlc()
    meta = {
        "sweep": {"generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "size": size,
                  "argv": argv or [], "wall_seconds": wall, "versions": versions,
                  "published": published},
        "scenarios": prove_raw.scenario_texts(scns),
        "inputs": {
            "tlc": [[m, inv, o] for (m, inv), o in
                    sorted(tlc_outcomes(REPO / "results" / "runtime_tlc.json", working).items())],
            "bench": bench_lines(REPO / "results" / "bench.json"),
            "activity_bodies": {m: activity_source(m) for m in ("temporal_idem", "temporal_check")},
        },
    }  # fmt: skip
    prove_raw.pack(out_dir / prove_raw.DIRNAME, results, meta)
    return render_from_raw(out_dir)


def _working_tlc() -> dict | None:
    from models import tlc_pending

    return tlc_pending.read_working()


def _scenarios_from(index: dict) -> list[Scenario]:
    """The scenario objects as they were run, from the texts the pack keeps."""
    import tempfile

    from prove.scenario import load_all

    with tempfile.TemporaryDirectory() as d:
        for name, text in index["scenarios"].items():
            (Path(d) / name).write_text(text)
        return load_all(directory=d, as_run=True)


def render_from_raw(out_dir: Path = RESULTS) -> tuple[Path, Path]:
    """Render runtime_prove.md/.json, the plots and the failing runs from out_dir's pack."""
    results, index = prove_raw.load(out_dir / prove_raw.DIRNAME)
    md, js, cells = texts(_scenarios_from(index), results, index, out_dir, draw=True)
    md_path, js_path = out_dir / "runtime_prove.md", out_dir / "runtime_prove.json"
    md_path.write_text(md)
    js_path.write_text(js)
    copy_failures(cells, results, out_dir / "runtime_prove_failures")
    return md_path, js_path


def verify(out_dir: Path = RESULTS) -> list[str]:
    """The differences between the committed report and the one its committed raw data
    renders (an empty list: every number recomputes). Plots are not compared."""
    from world.verify_common import compare

    try:
        results, index = prove_raw.load(out_dir / prove_raw.DIRNAME)
    except prove_raw.RawDataError as e:
        return [str(e)]
    md, js, _ = texts(_scenarios_from(index), results, index, out_dir, draw=False)
    problems = []
    for name, want in (("runtime_prove.md", md), ("runtime_prove.json", js)):
        path = out_dir / name
        have = path.read_text() if path.exists() else ""
        name = str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
        diff = compare(name, have, want)
        if diff:
            problems += [f"{name} differs from what its raw data renders:", *diff]
    return problems


def texts(scns: list[Scenario], results: list[dict], index: dict, out_dir: Path,
          draw: bool) -> tuple[str, str, list[dict]]:  # fmt: skip
    """The report's Markdown and JSON, computed from run files and the pack's index only;
    draw=False leaves the plots as they are (their names are the same either way)."""
    sweep, inputs = index["sweep"], index["inputs"]
    versions, wall, size, argv = (
        sweep["versions"],
        sweep["wall_seconds"],
        sweep["size"],
        sweep["argv"],
    )
    cells = aggregate(scns, results)
    stripe_cells = [c for c in cells if c["api"] == "stripe"]
    idx = {(c["scenario"], c["variant"], c["system"], c["tier"]): c for c in cells
           if c["api"] == "local"}  # fmt: skip
    sidx = {(c["scenario"], c["variant"], c["system"], c["tier"]): c for c in stripe_cells}
    rows = sorted({(c["scenario"], c["tier"], c["variant"]) for c in cells
                   if c["api"] == "local"})  # fmt: skip
    table = []
    for sid, tier, variant in rows:
        rt = idx.get((sid, variant, "runtime", tier))
        a = idx.get((sid, variant, "temporal_idem", tier))
        b = idx.get((sid, variant, "temporal_check", tier))
        row = {"scenario": sid, "tier": tier, "variant": variant}
        for other, key in ((a, "a"), (b, "b")):
            flag = drop_sensitive(rt, other)
            row[f"verdict_vs_{key}"] = verdict(rt, other) + (" [drop-sensitive]" if flag else "")
            row[f"drop_sensitive_vs_{key}"] = flag
        table.append(row)
    verdicts = {(r["scenario"], r["variant"], r["tier"], base): r[key] for r in table
                for base, key in (("temporal_idem", "verdict_vs_a"),
                                  ("temporal_check", "verdict_vs_b"))}  # fmt: skip
    claim_results = [claims.judge(c, idx, verdicts) for c in claims.bind(scns)]
    share = claims.decisive_share(table, idx)
    lateness = lateness_summary(results)
    mismatches = [c for c in cells if c["prediction_checked"]
                  and c["prediction_held"] < c["prediction_checked"]]  # fmt: skip
    seeds = sorted({r["identity"]["seed"] for r in results})
    errors = [r for r in results if r.get("error")]
    generated = sweep["generated"]

    out_dir.mkdir(parents=True, exist_ok=True)
    main_rows = []
    for row in table:
        sid, t, v = row["scenario"], row["tier"], row["variant"]
        main_rows.append({**row, "anchor": cell_anchor(sid, t, v),
                          **{m: _cellstr(idx.get((sid, v, m, t))) for m in SYSTEMS}})  # fmt: skip
    pred_rows = [{
        "scenario": c["scenario"], "tier": c["tier"], "variant": c["variant"], "label": _label(c),
        "expected": c["expected"] or "-", "note": _note(c), "observed": _observed(c),
        "held": f"{c['prediction_held']}/{c['prediction_checked']}",
        "contradicts": c["prediction_held"] != c["prediction_checked"],
        "correct": f"{c['correct']}/{c['n']}", "failing": ", ".join(c["failing_shown"]) or "-",
    } for c in cells]  # fmt: skip
    mism = [{
        "scenario": c["scenario"], "tier": c["tier"], "variant": c["variant"], "label": _label(c),
        "expected": c["expected"], "observed": _observed(c), "held": c["prediction_held"],
        "checked": c["prediction_checked"],
        "reason": _reason(c),
    } for c in mismatches]  # fmt: skip
    stripe_rows = []
    for sid, tier, variant in sorted({(c["scenario"], c["tier"], c["variant"])
                                      for c in stripe_cells}):  # fmt: skip
        trio = [sidx.get((sid, variant, m, tier)) for m in STRIPE_SYSTEMS]
        pairs = [(m, c) for m, c in zip(STRIPE_SYSTEMS, trio, strict=True) if c]
        stripe_rows.append([
            sid, str(tier), *(_cellstr(c) for c in trio),
            "; ".join(f"{LABEL[m]}: {_observed(c)}" for m, c in pairs),
            "; ".join(f"{LABEL[m]}: {len(c['refund_ids'])} in {c['n']} run(s)" for m, c in pairs),
        ])  # fmt: skip
    loops = [f"{_cellname(c)} (n {c['n']}, correct {c['correct']}): "
             + "; ".join(f"{k} {_short(v)}" for k, v in sorted(lt.items()))
             for c in cells for lt in c["loop_timings"]]  # fmt: skip
    tlc = {(m, inv): o for m, inv, o in inputs["tlc"]}
    bodies = inputs["activity_bodies"]
    drops = drop_rows(cells)
    flagged = [f"{r['scenario']} t{r['tier']} {r['variant']} vs {base}: {r[key]}"
               for r in table for base, key in (("(a)", "drop_sensitive_vs_a"),
                                                ("(b)", "drop_sensitive_vs_b")) if r[key]]  # fmt: skip
    context = {
        "argv": f" {' '.join(argv)}" if argv else "", "generated": generated, "size": size,
        # packs made before "published" was kept: the published sweep passed --publish or nothing
        "made_by": "`make prove`" if sweep.get("published", not argv or "--publish" in argv)
                   else "a working run, not the published sweep,",
        "n_results": len(results), "cells": cells, "wall": wall, "span": _span(results),
        "seeds": seeds, "n_min": min((c["n"] for c in cells), default=0),
        "n_max": max((c["n"] for c in cells), default=0),
        "commits": sorted({str((r.get("versions") or {}).get("git_commit")) for r in results}),
        "versions": versions, "port": _run_ports(results) or versions.get("postgres_port"),
        "scns": scns, "emulated": EMULATED, "deviations": DEVIATIONS, "main_rows": main_rows,
        "plot_correct": plot_correct(cells, out_dir / "runtime_prove_correct.png", draw),
        "plot_tier3": plot_tier3(cells, out_dir / "runtime_prove_tier3.png", draw),
        "pred_rows": pred_rows, "mismatches": mism,
        "counter_rows": [_counter_row(c) for c in cells],
        "errors": [{"run_id": r["identity"]["run_id"], "error": str(r["error"])[:200]}
                   for r in errors],
        "drops": drops, "flagged": flagged, "aims": loop_aims(results),
        "raw": {"dir": prove_raw.DIRNAME, **index["archive"]},
        "stripe_rows": stripe_rows, "latency": latency_lines(cells),
        "bench": inputs["bench"], "loops": loops,
        "tlc_found": bool(tlc), "tlc_rows": tlc_rows(scns, cells, tlc),
        "bodies": [(LABEL[m], bodies[m].rstrip()) for m in ("temporal_idem", "temporal_check")],
        "concessions": CONCESSIONS, "claims": claim_results, "share": share,
        "lateness": lateness, "timing_rows": timing_rows(scns),
        "default_timing": ", ".join(f"{k} {v:g}" for k, v in DEFAULT_TIMING.items()),
        "sizes": sorted({(f"{s.id} {v.name}" if v.seeds else s.id, s.runs_per_cell(v, size),
                          (s.iterations or {}).get(size)) for s in scns for v in s.variants}),
    }  # fmt: skip
    md = scrub(render("runtime_prove.md.j2", context))
    js = scrub(json.dumps({
        "generated": generated, "sweep": size, "argv": argv or [], "wall_seconds": round(wall, 1),
        "versions": versions, "seeds": seeds, "emulated": EMULATED, "deviations": DEVIATIONS,
        "concessions": dict(CONCESSIONS), "systems": list(SYSTEMS),
        "scenarios": [{"id": s.id, "title": s.title, "invariants": list(s.invariants),
                       "predicted": list(s.predicted)} for s in scns],
        "cells": cells, "rows": table, "claims": claim_results, "decisive": share,
        "harness_lateness": lateness, "dropped": drops, "drop_sensitive": flagged,
        "raw_data": {"dir": prove_raw.DIRNAME, **index["archive"]},
        "harness_errors": [{"run_id": r["identity"]["run_id"], "error": r["error"]} for r in errors],
        "mismatches": [{k: c[k] for k in ("scenario", "variant", "system", "tier", "api",
                                          "expected", "observed")} for c in mismatches],
        "activity_bodies": bodies,
    }, indent=1, sort_keys=True, default=str))  # fmt: skip
    return md, js, cells


def cell_anchor(scenario: str, tier: int, variant: str) -> str:
    """The id of a cell's row in section 2 (docs link to it: runtime_prove.md#cell-s12-t2-base)."""
    return f"cell-{scenario.lower()}-t{tier}-{variant}"


def drop_rows(cells: list[dict]) -> list[dict]:
    """Section 2d: per cell that dropped anything, how many units of each kind, and every
    dropped run or iteration with its reason."""
    out = []
    for c in cells:
        if not c["dropped"]:
            continue
        kinds = Counter()
        for d in c["dropped"]:
            kinds[d["kind"]] += d["units"]
        out.append({"cell": _cellname(c), "n": c["n"], "kinds": dict(sorted(kinds.items())),
                    "items": [f"{d['run_id']}" + ("" if d["i"] is None else f" i{d['i']}")
                              + f" ({d['kind']}: {d['reason']})" for d in c["dropped"]]})  # fmt: skip
    return out


def loop_aims(results: list[dict]) -> list[str]:
    """How each loop scenario aimed its races (section 4b): per iteration, or shared."""
    seen = {}
    for r in results:
        cal = ((r.get("faults") or {}).get("calibration") or {}).get("aim")
        if r["identity"].get("driver") and cal:
            seen[r["identity"]["scenario"]] = cal
    return [f"{sid}: {aim}" for sid, aim in sorted(seen.items())]


def lateness_summary(results: list[dict]) -> dict:
    """The harness's own scheduling lateness over the sweep (prove/lateness.py): the worst
    per run, as a distribution, over the runs that were measured."""
    worst = [late["max"] for r in results
             if (late := (r.get("timings") or {}).get("harness_lateness"))
             and late.get("max") is not None]  # fmt: skip
    too_late = [r["identity"]["run_id"] for r in results
                if "harness too late" in str(r.get("error") or "")]  # fmt: skip
    return {"runs": len(worst), "p50": percentile(worst, 50), "p99": percentile(worst, 99),
            "max": max(worst) if worst else None, "too_late": too_late}  # fmt: skip


def timing_rows(scns: list[Scenario]) -> list[list[str]]:
    """Each scenario's timing constants that differ from the defaults (variants included)."""
    rows = []
    for s in scns:
        for v in s.variants:
            diff = {k: x for k, x in v.timing.items() if DEFAULT_TIMING.get(k) != x}
            name = s.id + ("" if v.name == "base" else f" {v.name}")
            rows.append([name, ", ".join(f"{k} {x:g}" for k, x in sorted(diff.items())) or "-"])
    return rows


TEMPLATES = Path(__file__).resolve().parent / "templates"


def render(name: str, context: dict) -> str:
    """Render a Jinja2 template of prove/templates/ (Markdown: no HTML escaping)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)  # fmt: skip
    return env.get_template(name).render(**context)


def _counter_row(c: dict) -> list[str]:
    """One row of section 2c: the cell's counters per 1,000 runs, latency, can-prove, checks."""
    p = c["per_1000"]
    inv = ", ".join(f"{k} x{v}" for k, v in c["invariant_failures"].items())
    if c["system"] != "runtime":
        inv = "n/a"
    cp = c["can_prove"]
    cps = "n/a" if cp["can_prove_mean"] is None else (
        f"{cp['can_prove_mean']:.2f} ({cp['false_claims']})")  # fmt: skip
    it = c["size"]["iterations_per_run"]
    sz = f"{c['size']['runs']} run(s)" + (f" x {'/'.join(map(str, it))} it." if it != [1] else "")
    return [f"{_cellname(c)}", f"{c['n']} ({sz})",
            ", ".join(f"{k} {v}" for k, v in sorted(c["crash_plans"].items())),
            *(f"{p[k]:.0f}" for k in COUNTERS),
            _num(c["end_to_end_p50"]), _num(c["end_to_end_p99"]), cps, inv or "none",
            ", ".join(c["harness_errors"]) or "-"]  # fmt: skip


def tlc_rows(scns: list[Scenario], cells: list[dict], tlc: dict) -> list[list[str]]:
    """Section 5: per scenario and catalog invariant, TLC's outcome beside the runtime's runs."""
    rows = []
    for s in scns:
        rt_cells = [c for c in cells if c["scenario"] == s.id and c["system"] == "runtime"]
        n = sum(c["n"] for c in rt_cells)
        for inv in s.invariants:
            bad = sum(c["invariant_failures"].get(inv, 0) for c in rt_cells)
            model = tlc.get(("interlock", inv))
            outcome = (model or "").removesuffix(f" ({WORKING_TLC})")
            if model is None:
                agree = "n/a (not in the model)"
            elif model.startswith(NOT_YET_CHECKED):
                model, agree = NOT_YET_CHECKED, model
            elif outcome == "hold":
                agree = "yes" if bad == 0 else "**no**"
            else:
                agree = "yes" if bad > 0 else "model only (no run hit it)"
            rows.append([s.id, inv, model or "n/a", str(n), str(bad), agree,
                         tlc.get(("temporal_idem", inv), "n/a"),
                         tlc.get(("temporal_precheck", inv), "n/a")])  # fmt: skip
    return rows


FAILURES_PER_CELL = 20  # docs/design.md#prove: up to 20 failing runs per cell are kept in results/


def _short(v: object) -> str:
    text = json.dumps(v, default=str) if not isinstance(v, str) else v
    return text if len(text) <= 160 else text[:157] + "..."


def _p(values: list[float], q: float) -> str:
    v = percentile(values, q)
    return "-" if v is None else f"{v:.3f}"


def latency_lines(cells: list[dict]) -> list[str]:
    """No-fault latency (S00) and the fault-run latencies: resume after restart, timer
    lateness (S10), signal wake after an outage (S11), per system."""
    out = [
        "| measure | " + " | ".join(LABEL[m] for m in SYSTEMS) + " |",
        "|---|" + "---|" * len(SYSTEMS),
    ]

    def row(label: str, pick) -> None:  # noqa: ANN001 - a small local helper
        vals = []
        for m in SYSTEMS:
            xs = [x for c in cells if c["system"] == m and c["api"] == "local" for x in pick(c)]
            vals.append(f"p50 {_p(xs, 50)} / p99 {_p(xs, 99)} (n {len(xs)})" if xs else "-")
        out.append(f"| {label} | {' | '.join(vals)} |")

    row("no-fault end to end, S00 (start to result: decision, approval, 20 ms refund, 0.5 s sleep)",
        lambda c: c["e2e_values"] if c["scenario"] == "S00" else [])  # fmt: skip
    row("no-fault approval to refund arrival, S00",
        lambda c: c["approve_to_send"] if c["scenario"] == "S00" else [])  # fmt: skip
    row(
        "resume after restart (fresh workers to result), crash scenarios",
        lambda c: c["resume_after_restart"] if c["scenario"] not in ("S00", "S10") else [],
    )
    row(
        "timer lateness, S10 (fired - due; workers down until after due)",
        lambda c: [t["late_s"] for t in c["timers"]] if c["scenario"] == "S10" else [],
    )
    row(
        "S10: refund arrival after the timer is due and the fresh workers are ready",
        lambda c: c["timer_to_send"],
    )
    row(
        "signal wake after outage, S11 (fresh workers ready to refund arrival)",
        lambda c: c["wake_after_restart"],
    )
    return out


def plot_tier3(cells: list[dict], path: Path, draw: bool = True) -> str | None:
    """Duplicates vs blocked-never-sent per 1,000 runs over the tier-3 cells, per system."""
    t3 = [c for c in cells if c["tier"] == 3 and c["api"] == "local"]
    if not t3:
        return None
    if not draw:
        return path.name
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2))
    xs = range(len(SYSTEMS))
    for off, key, label in ((-0.2, "duplicate_applications", "duplicate applications"),
                            (0.2, "blocked_never_sent", "blocked, never sent")):  # fmt: skip
        vals = []
        for m in SYSTEMS:
            n = sum(c["n"] for c in t3 if c["system"] == m)
            k = sum(c["counters"][key] for c in t3 if c["system"] == m)
            vals.append(1000 * k / n if n else 0)
        ax.bar([x + off for x in xs], vals, width=0.4, label=label)
    ax.set_xticks(list(xs), [LABEL[m] for m in SYSTEMS])
    ax.set_ylabel("per 1,000 tier-3 runs")
    ax.legend(fontsize=8)
    ax.set_title("tier 3 (no lookup): duplicates against availability", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path.name


def bench_lines(path: Path) -> list[str]:
    """A short table of the benchmark's medians (results/bench.json), or a note when absent."""
    try:
        b = json.loads(path.read_text())
    except (OSError, ValueError):
        return ["results/bench.json is missing: run `make bench`."]

    def med(d: dict, k: str) -> str:
        v = (d.get(k) or {}).get("median")
        return "n/a" if v is None else f"{v:,.1f}"

    out = [f"Bench run {b.get('date', '?')} at git {str(b.get('git', {}).get('commit', '?'))[:12]}.",
           "", "| shape | system | p50 ms | p99 ms | workflows/s |", "|---|---|---|---|---|"]  # fmt: skip
    for system, r in ((b.get("shape1") or {}).get("summary") or {}).items():
        out.append(f"| one step (sequential latency; throughput of 1,000 at once) | {system} | "
                   f"{med(r, 'seq_p50_ms')} | {med(r, 'seq_p99_ms')} | {med(r, 'tput_wf_s')} |")  # fmt: skip
    for key, r in ((b.get("shape2") or {}).get("summary") or {}).items():
        out.append(f"| refund, closed loop | {key} workers | {med(r, 'p50_ms')} | "
                   f"{med(r, 'p99_ms')} | {med(r, 'wf_per_s')} |")  # fmt: skip
    return out


def plot_correct(cells: list[dict], path: Path, draw: bool = True) -> str | None:
    """Correct rate with its Wilson interval for every local cell, one marker per system."""
    local = [c for c in cells if c["api"] == "local" and c["n"]]
    if not local:
        return None
    if not draw:
        return path.name
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted({(c["scenario"], c["tier"], c["variant"]) for c in local})
    ypos = {r: i for i, r in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(rows) + 1.5))
    colors = {"runtime": "#1f6f43", "runtime_async": "#6fbf73", "temporal_idem": "#2a5d9f",
              "temporal_check": "#c07a16"}  # fmt: skip
    for j, system in enumerate(SYSTEMS):
        pts = [c for c in local if c["system"] == system]
        ys = [ypos[(c["scenario"], c["tier"], c["variant"])] + (j - 1) * 0.25 for c in pts]
        xs = [100 * c["correct_rate"] for c in pts]
        # max(0, ...): a bound may sit a rounding error inside its point estimate
        err = [[max(0.0, 100 * (c["correct_rate"] - c["wilson95"][0])) for c in pts],
               [max(0.0, 100 * (c["wilson95"][1] - c["correct_rate"])) for c in pts]]  # fmt: skip
        ax.errorbar(xs, ys, xerr=err, fmt="o", ms=4, capsize=2, color=colors.get(system),
                    label=LABEL.get(system, system))  # fmt: skip
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{s} t{t}" + ("" if v == "base" else f" {v}") for s, t, v in rows],
                       fontsize=7)  # fmt: skip
    ax.invert_yaxis()
    ax.set_xlim(-5, 105)
    ax.set_xlabel("correct runs, % (95% Wilson interval)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _run_ports(results: list[dict]) -> str:
    """The Postgres port(s) the runs themselves recorded (a --resume may render elsewhere)."""
    ports = {str((r.get("versions") or {}).get("postgres_port")) for r in results}
    return ", ".join(sorted(ports - {"None"}))


NOT_YET_CHECKED = "not yet checked"


def tlc_outcomes(path: Path, working: dict | None = None) -> dict[tuple[str, str], str]:
    """(mode, invariant) -> "hold", or "violated at t2, t3": TLC's outcome over the configs
    with every assumption in force (no broken variant, no toggles).  A catalog row the model
    checks but the results predate (a new invariant) -> "not yet checked: run `...`", the
    quick TLC run that checks it (models/tlc_pending.py), never "not in the model".  A working
    sweep passes `working`, the outcomes of working TLC runs on the models as they are now: a
    pending row found there reads "hold (working TLC run)"; a published sweep never does."""
    try:
        doc = json.loads(path.read_text())
        configs = doc["configs"]
    except (OSError, ValueError, KeyError):
        return {}
    from models import catalog, tlc_pending

    try:
        cat = catalog.load()
    except catalog.CatalogError:
        pending: list[str] = []  # the generator and the tests say what is wrong with it
    else:
        pending = tlc_pending.unchecked(cat, doc)
    out = _outcomes(configs)
    if pending:
        extra = _outcomes((working or {}).get("configs", []))
        run = tlc_pending.command(cat, pending, doc)
        for inv in pending:
            got = extra.get(("interlock", inv))
            out[("interlock", inv)] = (f"{got} ({WORKING_TLC})" if got else
                                       f"{NOT_YET_CHECKED}: run `{run}`")  # fmt: skip
    return out


WORKING_TLC = "working TLC run"


def _outcomes(configs: list[dict]) -> dict[tuple[str, str], str]:
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for c in configs:
        if c.get("broken") or c.get("toggles") or c.get("kind") != "safety":
            continue
        for inv, r in (c.get("invariants") or {}).items():
            tiers = seen[(c["mode"], inv)]
            if r.get("outcome") == "V":
                tiers.add(c.get("tier") or "-")
    return {key: "hold" if not tiers else "violated at " + ", ".join(sorted(tiers))
            for key, tiers in seen.items()}  # fmt: skip


def copy_failures(cells: list[dict], results: list[dict], dest: Path) -> list[Path]:
    """The run files of failing runs (incorrect by the oracle), up to FAILURES_PER_CELL per
    cell, scrubbed of machine paths; the directory holds this sweep's failures only."""
    by_id = {r["identity"]["run_id"]: r for r in results}
    if dest.exists():
        for old in dest.glob("*.json"):
            old.unlink()
    out = []
    for c in cells:
        for run_id in c["failing_runs"][:FAILURES_PER_CELL]:
            dest.mkdir(parents=True, exist_ok=True)
            path = dest / f"{run_id}.json"
            path.write_text(scrub(json.dumps(by_id[run_id], indent=1, sort_keys=True)))
            out.append(path)
    return out


def _span(results: list[dict]) -> str:
    """First run start to last run end, from the run files (a --resume report keeps it)."""
    t = [(r["timings"]["started_at"], r["timings"]["started_at"] + r["timings"]["wall"])
         for r in results if (r.get("timings") or {}).get("started_at")]  # fmt: skip
    if not t:
        return "n/a"
    span = max(e for _, e in t) - min(s for s, _ in t)
    return f"{span:.0f} s ({span / 60:.1f} min)"


def _reason(c: dict) -> str:
    """The diagnosed reason of a contradicted prediction: the system's own, else that of the
    system it is predicted as (runtime_async: the runtime's, the same code path diagnosed)."""
    for system in (c["system"], PREDICTED_AS.get(c["system"])):
        for tier in (c["tier"], None):
            reason = REASONS.get((c["scenario"], system, tier, c["variant"]))
            if reason:
                return reason + ("" if system == c["system"] else f" (diagnosed for {system})")
    return "not diagnosed yet"


def _label(c: dict) -> str:
    return LABEL[c["system"]] + (" via Stripe (EMULATED)" if c.get("api") == "stripe" else "")


def _cellname(c: dict) -> str:
    api = "/stripe" if c.get("api") == "stripe" else ""
    return f"{c['scenario']}/{c['variant']}/t{c['tier']}/{c['system']}{api}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    """`python -m prove.report --verify | --render [--results-dir DIR]`."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m prove.report", description=main.__doc__)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--verify", action="store_true",
                      help="recompute the report from its committed raw data and compare; "
                           "exit 1 on any difference")  # fmt: skip
    what.add_argument("--render", action="store_true",
                      help="rewrite the report from its committed raw data (after a change "
                           "to the template or prose; runs nothing)")  # fmt: skip
    ap.add_argument("--results-dir", default=str(RESULTS), help="default: results/")
    args = ap.parse_args(argv)
    out = Path(args.results_dir)
    if args.render:
        try:
            md, js = render_from_raw(out)
        except prove_raw.RawDataError as e:
            print(f"prove.report: {e}; run `make prove` to make it", file=sys.stderr)
            return 2
        print(f"prove.report: wrote {md} and {js} from {out / prove_raw.DIRNAME}")
        return 0
    problems = verify(out)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print("prove.report: the report does not follow from its raw data. If only the "
              "template or prose changed, run `python -m prove.report --render`; if the "
              "numbers differ, the report or its data was changed by hand.", file=sys.stderr)  # fmt: skip
        return 1
    print(f"prove.report: {out / 'runtime_prove.md'} and .json recompute from "
          f"{out / prove_raw.DIRNAME} (verified)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
