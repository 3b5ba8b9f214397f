"""The fault matrix's invariants, each recomputed from a cell's ground truth (cells.collect):
the tables with the database's own timestamps, the bodies' side log, the target's ledger.
Each returns a list of violations (empty: it holds). models/faults.yaml names them."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any

from interlock_runtime.receipts.verification import ESTABLISHED

Evidence = dict[str, Any]

# The statuses only a feature that expects them may end in: a fault never ends a run so.
FAULT_ENDINGS = ("failed", "timed_out", "cancelled", "stuck")
TERMINAL = ("completed", "failed", "cancelled", "timed_out", "stuck", "continued")
# A timeout fires within this long of its deadline once the system is back (docs/matrix.md):
# a lease to expire (1.5 s), a poll of the sweep or a claim (0.2 s), a step in flight (1 s),
# and the reconnect backoff's cap (2 s), with room for a loaded 2-core machine.
TIMEOUT_BOUND = 10.0


def _runs(ev: Evidence) -> list[dict[str, Any]]:
    return [w for w in ev["workflows"] if w["id"] in set(ev["runs"])]


def all_terminal(ev: Evidence) -> list[str]:
    found = {w["id"]: w["status"] for w in ev["workflows"]}
    return [f"{wf}: {found.get(wf, 'missing')}, not terminal" for wf in ev["runs"]
            if found.get(wf) not in TERMINAL]  # fmt: skip


def no_fault_ends_a_run(ev: Evidence) -> list[str]:
    """No run ends failed, timed_out, cancelled or stuck unless the feature expects that end
    (a database or worker fault is never a workflow's failure)."""
    expected = ev["expect"]
    return [f"{w['id']} ended {w['status']}: {w['error']}" for w in _runs(ev)
            if w["status"] in FAULT_ENDINGS and w["status"] != expected]  # fmt: skip


def expected_end(ev: Evidence) -> list[str]:
    """Every run ends as the feature expects (completed, unless it declares another end)."""
    want = ev["expect"] or "completed"
    return [f"{w['id']} ended {w['status']}, expected {want}" for w in _runs(ev)
            if w["status"] != want]  # fmt: skip


def waits_return(ev: Evidence) -> list[str]:
    """A wait on every ended run returned, from the sync client and from AsyncRuntime
    (cells.collect made them, after the fault): an answer or the run's recorded failure."""
    return [f"{wf} ({client}): {answer}" for (wf, client), answer in ev["waits"].items()
            if answer != "returned"]  # fmt: skip


def own_grants_end(ev: Evidence) -> list[str]:
    """A workflow's own grants (principal workflow:<id>) are revoked once it has ended."""
    ended = {w["id"] for w in ev["workflows"] if w["status"] in
             ("completed", "failed", "cancelled", "continued", "timed_out")}  # fmt: skip
    return [f"grant {g['id']} of ended {g['principal']} still live" for g in ev["grants"]
            if g["principal"].removeprefix("workflow:") in ended and g["revoked_at"] is None]  # fmt: skip


def machine_time(ev: Evidence, ts: datetime) -> float:
    """A database timestamp on this machine's clock: after a failover to a server whose clock
    is off (ev["db_clock"]: (since, offset) pairs, world/pg_pair.py), its offset taken out."""
    t = ts.timestamp()
    for since, offset in reversed(ev.get("db_clock") or []):
        if t - offset >= since:
            return t - offset
    return t


def recorded_steps_never_rerun(ev: Evidence) -> list[str]:
    """A step body never starts again once its record is committed: every start in the side log
    comes before the step's record (the database's created_at, read on this machine's clock)."""
    recorded = {(s["workflow_id"], s["name"]): machine_time(ev, s["created_at"])
                for s in ev["steps"] if s["kind"] == "step" and s["error"] is None}  # fmt: skip
    out = []
    for line in ev["side_log"]:
        at = recorded.get((line["wf"], line["step"]))
        if at is not None and line["t"] > at + 0.05:  # 50 ms: clock reads differ
            out.append(f"{line['wf']}.{line['step']} started at {line['t']:.3f}, after its "
                       f"record at {at:.3f}")  # fmt: skip
    return out


def results_as_recorded(ev: Evidence) -> list[str]:
    """A completed run's result is its steps' recorded outputs, in order."""
    out = []
    steps = defaultdict(list)
    for s in ev["steps"]:
        if s["kind"] == "step" and s["error"] is None:
            steps[s["workflow_id"]].append(s["output"])
    for w in _runs(ev):
        if w["status"] == "completed" and w["result"] != steps[w["id"]]:
            out.append(f"{w['id']}: result {w['result']} is not its records {steps[w['id']]}")
    return out


def timer_not_early(ev: Evidence) -> list[str]:
    """The step after a sleep is recorded at least `seconds` after the step before it, by the
    database's clock."""
    seconds = timedelta(seconds=ev["facts"]["seconds"])
    at = {(s["workflow_id"], s["name"]): s["created_at"] for s in ev["steps"]}
    out = []
    for w in _runs(ev):
        before, after = at.get((w["id"], "before")), at.get((w["id"], "after"))
        if before is None or after is None:
            out.append(f"{w['id']}: before/after not both recorded")
        elif after - before < seconds:
            out.append(f"{w['id']}: slept {(after - before).total_seconds():.3f} s < {seconds}")
    return out


def signals_exactly_once(ev: Evidence) -> list[str]:
    """Every signal sent is consumed exactly once, in the order sent, and is what the run
    returned."""
    out = []
    consumed: dict[str, list[Any]] = defaultdict(list)
    for sig in ev["signals"]:
        if sig["consumed_seq"] is not None:
            consumed[sig["workflow_id"]].append((sig["consumed_seq"], sig["payload"]))
    for w in _runs(ev):
        sent = ev["facts"]["sent"][w["id"]]
        got = [p for _, p in sorted(consumed[w["id"]], key=lambda c: c[0])]
        if got != sent:
            out.append(f"{w['id']}: consumed {got}, sent {sent}")
        if w["status"] == "completed" and w["result"] != sent:
            out.append(f"{w['id']}: returned {w['result']}, sent {sent}")
    return out


def effect_at_most_once(ev: Evidence) -> list[str]:
    """At the target (its own ledger): each refund key applied at most once; every run that says
    COMMITTED had its refund applied; at tiers 1 and 2 nothing else was applied (at tier 3 a send
    whose outcome could not be known may have landed: the run says so, AMBIGUOUS, and it is
    never sent again, which the catalog's Tier3NeverResends judges)."""
    keys = Counter(r["key"] for r in ev["ledger"])
    out = [f"key {k} applied {n} times" for k, n in keys.items() if n > 1]
    effect_of = {w["id"]: (w["result"] or {}).get("effect_id") for w in _runs(ev)}
    committed = {effect_of[w["id"]] for w in _runs(ev) if w["status"] == "completed"
                 and str((w["result"] or {}).get("status", "")).startswith("COMMITTED")}  # fmt: skip
    out += [f"{eid}: the run says COMMITTED, the target never applied it"
            for eid in sorted(committed - set(keys))]  # fmt: skip
    if ev["facts"].get("tier", 2) in (1, 2):
        out += [
            f"{k}: applied at the target, no run says COMMITTED"
            for k in sorted(set(keys) - committed)
        ]
    return out


def tick_starts_at_most_once(ev: Evidence) -> list[str]:
    """Each tick of a schedule started at most one run (the runs' own inputs), and each started
    fire names a run that exists."""
    ticks = Counter((w["input"]["schedule_id"], w["input"]["scheduled_at"]) for w in _runs(ev))
    out = [f"{sid} tick {t} started {n} runs" for (sid, t), n in ticks.items() if n > 1]
    ids = {w["id"] for w in ev["workflows"]}
    out += [f"fire {f['tick']} names {f['workflow_id']}, which does not exist"
            for f in ev["fires"] if f["outcome"] == "started" and f["workflow_id"] not in ids]  # fmt: skip
    if not ticks:
        out.append("the schedule started nothing")
    return out


def paused_starts_nothing(ev: Evidence) -> list[str]:
    """No run of the schedule was started by a transaction that committed after its pause: no
    started fire invisible in a snapshot taken after the pause, and no run created later than
    the pause by the database's clock."""
    paused = datetime.fromisoformat(ev["facts"]["paused_at"])
    out = [f"fire {f['tick']} ({f['workflow_id']}) committed after the pause"
           for f in ev["fires_after_pause"]]  # fmt: skip
    return out + [f"{w['id']} created at {w['created_at']}, after the pause at {paused}"
                  for w in _runs(ev) if w["created_at"] > paused]  # fmt: skip


def timeout_fires_in_bound(ev: Evidence) -> list[str]:
    """A timed-out run ended no later than TIMEOUT_BOUND after its deadline (its start plus the
    timeout asked for, by the database's clock) or after the fault's end, whichever is later.
    That it ended no earlier than its deadline is the catalog's ExecutionTimeoutNotEarly."""
    timeout = timedelta(seconds=ev["facts"]["timeout"])
    out = []
    fault_end = ev["fault_window"][1] if ev["fault_window"] else 0.0
    for w in _runs(ev):
        if w["status"] != "timed_out":
            continue  # no_fault_ends_a_run / expected_end judge the status
        latest = max((w["created_at"] + timeout).timestamp(), fault_end) + TIMEOUT_BOUND
        if w["updated_at"].timestamp() > latest:
            out.append(f"{w['id']} timed out {w['updated_at'].timestamp() - latest:.1f} s past "
                       f"the bound")  # fmt: skip
    return out


def children_exactly_once(ev: Evidence) -> list[str]:
    """Each parent started its two children exactly once (ids <parent>/<seq>: one row each),
    every child completed, and the parent returned their results in order."""
    out = []
    kids: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in ev["children"]:
        kids[c["parent_id"]].append(c)
    for w in _runs(ev):
        mine = sorted(kids[w["id"]], key=lambda c: int(c["id"].rsplit("/", 1)[1]))
        if len(mine) != 2:
            out.append(f"{w['id']}: {len(mine)} children, expected 2")
        out += [f"{c['id']} ended {c['status']}" for c in mine if c["status"] != "completed"]
        if w["status"] == "completed" and w["result"] != [c["result"] for c in mine]:
            out.append(
                f"{w['id']}: returned {w['result']}, its children {[c['result'] for c in mine]}"
            )
    return out


def chain_complete(ev: Evidence) -> list[str]:
    """Each chain is one run per count, linked first to last (continued_as), with no second
    successor of any run, and its last run returned the count it was to reach."""
    rows = {w["id"]: w for w in ev["workflows"]}
    out = []
    for first, last in zip(ev["facts"]["firsts"], ev["runs"], strict=True):
        chain = [w for wid, w in rows.items() if wid == first or wid.startswith(f"{first}#")]
        if len(chain) != ev["facts"]["until"]:
            out.append(f"{first}: {len(chain)} runs, expected {ev['facts']['until']}")
        links = [w["result"]["continued_as"] for w in chain if w["status"] == "continued"]
        if len(links) != len(set(links)) or any(link not in rows for link in links):
            out.append(f"{first}: successors {links}")
        if rows[last]["status"] == "completed" and rows[last]["result"] != ev["facts"]["until"]:
            out.append(f"{last}: returned {rows[last]['result']}")
    return out


def attempt_not_abandoned_early(ev: Evidence) -> list[str]:
    """A step attempt past its start_to_close is abandoned no earlier than the limit: the next
    start of the step comes at least start_to_close after the first (the side log)."""
    limit = ev["facts"]["start_to_close"]
    starts: dict[str, list[float]] = defaultdict(list)
    for line in ev["side_log"]:
        starts[line["wf"]].append(line["t"])
    out = []
    for w in _runs(ev):
        t = sorted(starts[w["id"]])
        if len(t) < 2 and w["status"] == "completed":
            out.append(
                f"{w['id']}: completed with {len(t)} start(s); its first hangs past the limit"
            )
        elif len(t) >= 2 and t[1] - t[0] < limit - 0.05:
            out.append(
                f"{w['id']}: retried {t[1] - t[0]:.3f} s after the first start, limit {limit}"
            )
    return out


def rate_and_keys_bounded(ev: Evidence) -> list[str]:
    """From the claims table: no more than `rate` first claims of the rated queue in any
    window of `period` (a run's first claim is its start, what the rate spends), and never two
    runs of one key of the keyed queue held at once; the dedup start was refused."""
    out = []
    first = _first_claims(ev)
    starts = sorted(t for wf, t in first.items() if wf.startswith("rate-"))
    period, rate = timedelta(seconds=ev["facts"]["period"]), ev["facts"]["rate"]
    slack = timedelta(seconds=0.05)  # the claim's transaction start against its statement time
    for i in range(len(starts) - rate):
        if starts[i + rate] - starts[i] < period - slack:
            out.append(
                f"{rate + 1} starts within {starts[i + rate] - starts[i]} of the rated queue"
            )
    spans = _intervals(ev)
    for key in ("a", "b"):  # key-i is of key "ab"[i % 2]
        mine = [sp for sp in spans if sp[0].startswith("key-")
                and int(sp[0].split("-")[1]) % 2 == "ab".index(key)]  # fmt: skip
        out += [f"key {key}: {v}" for v in _held_at_once(mine, 1)]
    if not ev["facts"]["dedup_refused"]:
        out.append("a start repeating a live run's dedup id was accepted")
    return out


def receipts_verify(ev: Evidence) -> list[str]:
    """Every effect sent has a receipt (each key the target's access log saw posted, and each
    its ledger applied, is an effect with one); each receipt, signed with Ed25519 and verified
    with only the public key, is sound and signed, and says the effect happened once exactly
    when the target's own ledger applied its key once (and not at all when the ledger never
    applied it)."""
    applied = Counter(r["key"] for r in ev["ledger"])
    sent = {r["key"] for r in ev.get("access_log", []) if r["method"] == "POST"
            and r["path"] == "/refunds" and r["key"] is not None}  # fmt: skip
    out = [f"{key}: sent to the target, no receipt" for key in sorted((sent | set(applied))
                                                                      - set(ev["receipts"]))]  # fmt: skip
    for eid, v in ev["receipts"].items():
        if not (v["valid"] and v["signed"] and v["integrity"] == ESTABLISHED):
            out.append(f"{eid}: valid {v['valid']}, signed {v['signed']}, integrity "
                       f"{v['integrity']}: {v['problems'][:2]}")  # fmt: skip
        n = applied.get(eid, 0)
        if n == 1 and v["happened_once"] is not True:
            out.append(f"{eid}: applied once at the target, receipt says {v['happened_once']}")
        if n == 0 and v["happened"] is True:
            out.append(f"{eid}: never applied at the target, receipt says it happened")
    if not ev["receipts"]:
        out.append("no effect, no receipt: the feature sent nothing")
    return out


def _first_claims(ev: Evidence) -> dict[str, datetime]:
    """Each run's first claim time (its start, what a rate spends), from the claims table."""
    first: dict[str, datetime] = {}
    for c in sorted(ev["claims"], key=lambda c: c["epoch"]):
        first.setdefault(c["workflow_id"], c["claimed_at"])
    return first


def _intervals(ev: Evidence) -> list[tuple[str, str, datetime, datetime]]:
    """(run, owner, from, until) of every claim of the cell's runs: a claim holds until the
    next claim of its run found its lease expired (or took the row), else until the run's end
    (the catalog's QueueConcurrencyBounded reads the claims table the same way). Computed over
    all of a run's claims, so a subset by owner keeps where each claim ended."""
    end = {w["id"]: w["updated_at"] for w in _runs(ev)}
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in ev["claims"]:
        if c["workflow_id"] in end:
            by_run[c["workflow_id"]].append(c)
    out = []
    for wf, claims in by_run.items():
        claims.sort(key=lambda c: c["epoch"])
        for i, c in enumerate(claims):
            nxt = claims[i + 1] if i + 1 < len(claims) else None
            until = min(nxt["prev_lease_expires_at"] or nxt["claimed_at"], nxt["claimed_at"]) \
                if nxt else end[wf]  # fmt: skip
            out.append((wf, c.get("owner", ""), c["claimed_at"], max(until, c["claimed_at"])))
    return out


def _held_at_once(spans: list[tuple[str, str, datetime, datetime]], limit: int) -> list[str]:
    """Claims held at once over the limit, among these spans (from _intervals)."""
    edges = [e for _, _, start, until in spans for e in ((start, 1), (until, -1))]
    held, worst = 0, 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # ends first at a tie
        held += step
        worst = max(worst, held)
    return [f"{worst} held at once, limit {limit}"] if worst > limit else []


def runs_never_overlap(ev: Evidence) -> list[str]:
    """Overlap skip: a scheduled run starts only once the previous one has ended, by the
    database's clock (each run's creation against the previous run's end)."""
    runs = sorted(_runs(ev), key=lambda w: w["created_at"])
    out = [f"{b['id']} created at {b['created_at']}, before {a['id']} ended at {a['updated_at']}"
           for a, b in zip(runs, runs[1:], strict=False) if b["created_at"] < a["updated_at"]]  # fmt: skip
    if len(runs) < 2:
        out.append(f"only {len(runs)} run(s): the schedule did not tick through the cell")
    skipped = [f for f in ev["fires"] if f["outcome"] == "skipped"]
    if not skipped:
        out.append("no tick was skipped although every run outlived the interval")
    return out


def buffered_one_and_not_made_up(ev: Evidence) -> list[str]:
    """buffer_one: runs never overlap (a buffered tick starts once the previous run ended), at
    least one tick was buffered; and no tick that fell while the schedule was paused started a
    run (a resume does not make ticks up)."""
    out = runs_never_overlap({**ev, "fires": [{"outcome": "skipped"}]})  # skips not required
    # a buffered tick is decided in one pass and started by a later one: its start comes
    # after its decision (a tick started at once is both in one transaction: the same now())
    if not any(f["outcome"] == "buffered" or (f["outcome"] == "started" and f["started_at"]
               and f["started_at"] > f["decided_at"]) for f in ev["fires"]):  # fmt: skip
        out.append("no tick was buffered although every run outlived the interval")
    low, high = (datetime.fromisoformat(t) for t in ev["facts"]["paused_window"])
    out += [f"tick {f['tick']} fell while paused ({low} to {high}) and started {f['workflow_id']}"
            for f in ev["fires"] if f["outcome"] == "started" and low < f["tick"] < high]  # fmt: skip
    return out


def worker_limit_and_priority(ev: Evidence) -> list[str]:
    """From the claims table: no worker held two of the queue's runs at once (a claim holds
    until the next found its lease expired, or the run's end); and every urgent run (priority
    0) was first claimed no later than the last non-urgent one was."""
    out = []
    spans = _intervals(ev)
    for owner in sorted({sp[1] for sp in spans}):
        out += [f"{owner}: {v}" for v in _held_at_once([sp for sp in spans if sp[1] == owner], 1)]
    first = _first_claims(ev)
    urgent = [t for wf, t in first.items() if wf.startswith("pri0-")]
    later = [t for wf, t in first.items() if wf.startswith("pri5-")]
    if urgent and later and max(urgent) > max(later):
        out.append(
            f"an urgent run first claimed at {max(urgent)}, after every other ({max(later)})"
        )
    return out


def queries_follow_history(ev: Evidence) -> list[str]:
    """Every query answer read during the runs is a status the run published (one of its
    recorded $status steps), and a completed run's last status is "done"."""
    published: dict[str, list[Any]] = defaultdict(list)
    for s in ev["steps"]:
        if s["name"] == "$status":
            published[s["workflow_id"]].append(s["output"])
    out = [f"{wf}: answered {answer}, never published" for wf, answer in ev["facts"]["answers"]
           if answer is not None and answer not in published[wf]]  # fmt: skip
    for w in _runs(ev):
        if w["status"] == "completed" and (published[w["id"]] or [None])[-1] != {"phase": "done"}:
            out.append(f"{w['id']}: last status {published[w['id']][-1:]}")
    return out


def _minutes(low: datetime, high: datetime) -> list[datetime]:
    """The whole minutes from low to high, both included: the ticks of '* * * * *' (UTC)."""
    first = math.ceil(low.timestamp() / 60) * 60
    return [datetime.fromtimestamp(t, low.tzinfo)
            for t in range(first, math.floor(high.timestamp()) + 1, 60)]  # fmt: skip


def catchup_as_documented(ev: Evidence) -> list[str]:
    """Each cron schedule back from an outage (facts: backlogs, its first undecided tick; window,
    the catch-up window) was caught up as docs/schedules.md says, from the schedules and
    schedule_fires tables: its ticks are its expression's (every minute); the first pass (the
    earliest decided_at, that transaction's now()) decided exactly the ticks no older than the
    window, and under skip started the first and skipped the others, under allow_all started
    each; no tick was decided older than the window; every tick from the outage to the last one
    decided is a fire or was dropped as older than the window at the first pass, and
    missed_ticks counts exactly those dropped."""
    window = timedelta(seconds=ev["facts"]["window"])
    rows = {r["id"]: r for r in ev["schedules"]}
    out = []
    for sid, since_text in ev["facts"]["backlogs"].items():
        since = datetime.fromisoformat(since_text)
        fires = sorted((f for f in ev["fires"] if f["schedule_id"] == sid
                        and f["source"] == "schedule"), key=lambda f: f["tick"])  # fmt: skip
        if not fires:
            out.append(f"{sid}: nothing was caught up")
            continue
        out += [f"{sid}: tick {f['tick']} is not a tick of its expression" for f in fires
                if f["tick"].timestamp() % 60]  # fmt: skip
        out += [f"{sid}: tick {f['tick']} decided at {f['decided_at']}, older than the window"
                for f in fires if f["tick"] < f["decided_at"] - window]  # fmt: skip
        first = min(f["decided_at"] for f in fires)
        cutoff = first - window
        caught = [f for f in fires if f["decided_at"] == first]
        want = _minutes(max(since, cutoff), first)
        if [f["tick"] for f in caught] != want:
            out.append(f"{sid}: the catch-up pass at {first} decided "
                       f"{[str(f['tick']) for f in caught]}, the window holds {[str(t) for t in want]}")  # fmt: skip
        outcomes = [f["outcome"] for f in caught]
        policy = rows[sid]["overlap"]
        expect = (["started"] * len(caught) if policy == "allow_all"
                  else ["started"] + ["skipped"] * (len(caught) - 1))  # fmt: skip
        if outcomes != expect:
            out.append(f"{sid} ({policy}): the catch-up pass decided {outcomes}, not {expect}")
        decided = {f["tick"] for f in fires}
        unfired = [t for t in _minutes(since, rows[sid]["last_tick"]) if t not in decided]
        out += [f"{sid}: tick {t} lost: neither decided nor older than the window at {first}"
                for t in unfired if t >= cutoff]  # fmt: skip
        if rows[sid]["missed_ticks"] != len(unfired):
            out.append(f"{sid}: missed_ticks {rows[sid]['missed_ticks']}, but {len(unfired)} "
                       "ticks were dropped")  # fmt: skip
    return out


RUN_ENDED = "$runtime"  # revoked_by of the grants a run's end revokes (migration 0003)


def console_acted_as_operator(ev: Evidence) -> list[str]:
    """What the person did at the console, from the grants, effects and operator_audit tables:
    each run was approved by one grant, the one the console reported, given by the logged-in
    operator and bound to the hash of the payload its page showed; every effect sent under it
    carries that hash; each approve and each revoke has its audit row naming the operator and
    the grant; the grant revoked at the console is revoked by that operator, unless its run's
    own end had revoked it already (revoked_by $runtime, at or before the console's revoke
    by the database clock: a workflow's grants end with it, and the revoke then finds it
    ended)."""
    from interlock_runtime.journal import payload_hash

    who, facts = ev["facts"]["operator"], ev["facts"]
    grants = {g["id"]: g for g in ev["grant_rows"]}
    out = []
    for wf in ev["runs"]:
        mine = [g for g in ev["grant_rows"] if g["principal"] == f"workflow:{wf}"
                and g["payload_hash"] is not None]  # fmt: skip
        gid = facts["grants"].get(wf)
        if [g["id"] for g in mine] != [gid]:
            out.append(f"{wf}: approval grants {[g['id'] for g in mine]}, the console said {gid}")
            continue
        g = grants[gid]
        if g["granted_by"] != who:
            out.append(f"{wf}: grant {gid} given by {g['granted_by']}, logged in as {who}")
        if g["payload_hash"] != payload_hash(facts["shown"][wf]):
            out.append(f"{wf}: grant {gid} binds a payload other than the one shown")
        out += [f"{e['effect_id']}: sent under {gid} with another payload" for e in ev["effect_rows"]
                if e["grant_id"] == gid and e["payload_hash"] != g["payload_hash"]]  # fmt: skip
        audited = [a for a in ev["audit"] if a["event"] == "approve" and a["subject"] == wf]
        if [(a["operator"], (a["detail"] or {}).get("grant_id")) for a in audited] != [(who, gid)]:
            out.append(f"{wf}: approve audit rows {audited}, expected one by {who} for {gid}")
    for r in facts["revokes"]:
        g = grants.get(r["grant"])
        done = [a for a in ev["audit"] if a["event"] == "revoke" and a["subject"] == r["grant"]
                and a["operator"] == who]  # fmt: skip
        if not done:
            out.append(f"grant {r['grant']}: no revoke audit row by {who}")
        ended_first = (g is not None and g["revoked_by"] == RUN_ENDED and bool(done)
                       and g["revoked_at"] is not None and g["revoked_at"] <= done[0]["at"])  # fmt: skip
        if g is None or g["revoked_at"] is None or (g["revoked_by"] != who and not ended_first):
            out.append(f"grant {r['grant']} revoked at the console: row {g}")
    if not facts["revokes"]:
        out.append("nothing was revoked at the console")
    return out


# A check that judges what an invariant of the catalog judges: it follows that invariant's
# prediction when a fault lifts an assumption (run.judge).
TWINS = {"effect_at_most_once": "EffectAtMostOnceTier12"}

CHECKS = {f.__name__: f for f in (
    all_terminal, no_fault_ends_a_run, expected_end, waits_return, own_grants_end,
    recorded_steps_never_rerun, results_as_recorded, timer_not_early, signals_exactly_once,
    effect_at_most_once, tick_starts_at_most_once,
    paused_starts_nothing, timeout_fires_in_bound, children_exactly_once, chain_complete,
    attempt_not_abandoned_early, rate_and_keys_bounded, runs_never_overlap,
    queries_follow_history, receipts_verify, buffered_one_and_not_made_up,
    worker_limit_and_priority, catchup_as_documented, console_acted_as_operator)}  # fmt: skip
