"""TLC traces replayed on the real runtime (conformance/trace_replay.py).

- every Broken_* counterexample: the violation it shows must NOT reproduce (the evidence that
  the fix the broken config removes exists in the code), and no catalog invariant may break;
- seeded random behaviours of the correct interlock model (conformance/sim_traces): every
  catalog invariant of layer C holds;
- the TemporalIdem / TemporalPrecheck counterexamples, replayed on the runtime: no violation.

A replay must not be vacuous: workers claimed and ran a step, and where the model made a send
with every send check passing, the target saw a request. Bounded by default (every Broken_*
trace, a few simulated and Temporal ones, one two-effect simulation); ILR_LONG=1 replays every
saved and simulated trace. ILR_TLC_TRACES=<dir> reads the TLC traces from <dir> instead of
results/tlc_traces (e.g. a fresh `make tlc` run's, before they are copied there).

Every replay test takes the mode (conformance/conftest.py MODES): the model's workflow as a
plain workflow on the plain worker, or as its `async def` twin on the asyncio worker. The
bounded run replays in async mode ASYNC_BROKEN (the local lease check, the stopwatch before
the dispatch, the grant check inside the transaction) and the first
trace of each other family; ILR_LONG=1 replays every trace in both modes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance import trace_replay as tr
from conformance.conftest import MODES

LONG = os.environ.get("ILR_LONG") == "1"
ROOT = Path(__file__).resolve().parents[1]


def _pick(paths: list[Path], n: int) -> list[Path]:
    """An even spread of n of them (deterministic), or all in the long run."""
    if LONG or len(paths) <= n:
        return paths
    step = len(paths) / n
    return [paths[int(i * step)] for i in range(n)]


BROKEN = tr.trace_paths("broken")
SIMULATED = _pick(tr.trace_paths("simulated"), 2)
# the two-effect simulations (TWO_EFFECTS, with and without SHARED_GRANT): one in the bounded run
TWO_EFFECTS = [p for p in tr.trace_paths("simulated") if tr.effects_of(tr.load_trace(p)) == 2]
TWO_EFFECTS_PICK = [p for p in _pick(TWO_EFFECTS, 1) if LONG or p not in SIMULATED]
TEMPORAL = _pick(tr.trace_paths("temporal"), 1)
SERVER_SLOW = tr.TRACES / "ServerSlow_t2__EffectAtMostOnceTier12.json"
ASSUMPTION = _pick([p for p in tr.trace_paths("assumption") if p != SERVER_SLOW], 1)


def _id(p: Path) -> str:
    return p.stem


# The broken configs whose counterexamples the bounded run replays in async mode too, kept
# few for make test's budget: the local lease check before a durable call (the async context
# runs it itself), the send deadline's stopwatch against overlapping sends after a kill, the
# grant check inside T_dispatch against a revoke. The fences (a held write, an unfenced commit)
# and the lost wake-up are replayed async under ILR_LONG=1; the async database fence is also
# test_netns_workers's async mode, the async wake-ups the durable source's.
ASYNC_BROKEN = ("Broken_NoLocalLeaseCheck__NoRerunAfterComplete",
                "Broken_StopwatchAfterDispatch__NoOverlappingSends",
                "Broken_GrantCheckOutsideTxn__RevokeLinearizable")  # fmt: skip


def _moded(paths: list[Path], async_pick: list[Path]) -> list:
    """(mode, path) params: every path in sync mode; in async mode `async_pick` (all of them
    under ILR_LONG=1)."""
    out = [pytest.param("sync", p, id=f"sync-{p.stem}") for p in paths]
    for p in paths if LONG else [p for p in paths if p in async_pick]:
        out.append(pytest.param("async", p, id=f"async-{p.stem}"))
    return out


def _replay(path: Path, admin_dsn: str, template_db: str, tmp_path: Path,
            mode: str = "sync") -> tr.ReplayResult:  # fmt: skip
    assert mode in MODES
    r = tr.replay(path, admin_dsn, template_db, tmp_path, mode)
    assert r.mode == mode, r
    _assert_faults_performed(path, r)
    # not vacuous: real workers claimed the workflow and recorded steps (a step body ran; the
    # Signals workflow has only waits and a sleep)
    assert r.counts["workers"] > 0 and r.counts["claims"] > 0 and r.counts["steps"] > 0, r
    if r.config != "Broken_ThinDedupMargin":
        assert r.status != "failed", r  # the workflow ran; only C2's refusal fails it
    if r.config != "Broken_WakeOnlyIfSleeping":
        assert r.counts["step_started"] > 0, r
    else:
        assert r.status == "completed" and r.counts["signals"] >= 2, r  # no wakeup was lost
    return r


# op kind in the schedule -> the count of the real fault the driver performed for it
PERFORMED = {"revoke": "revokes", "hand_refund": "hand_refunds", "cancel": "cancels",
             "prune": "prunes", "redecide": "redecides", "local_change": "local_changes",
             "tick": "ticks"}  # fmt: skip
# Broken configs whose counterexample's key step the runtime cannot be made to take at all
# (the fix is in the claim statement): the replay must say so (Schedule.not_reproducible).
UNFORCEABLE = {"Broken_EarlyTakeover": "early takeover", "Broken_SkewPastAllowance": "clock"}


def _assert_faults_performed(path: Path, r: tr.ReplayResult) -> None:
    """The world events of the trace really happened, and the first planned stop was real."""
    ops = tr.translate(tr.load_trace(path)).ops
    for kind, count in PERFORMED.items():
        if any(op.kind == kind for op in ops):
            assert r.counts[count] > 0, (kind, r.counts)
    first = next((op for op in ops if op.pause), None)
    if first is not None and first.pause != "target" and r.config != "Broken_ThinDedupMargin":
        assert r.counts["sigstops"] > 0, (first, r.counts, r.divergences)


def _assert_sent_where_the_model_sends(r: tr.ReplayResult) -> None:
    if r.good_send and r.config != "Broken_ThinDedupMargin":
        assert r.sends_seen > 0, f"the model sends here, the target saw nothing: {r}"


def _catalog_counterexamples() -> set[str]:
    """The file names `make tlc` saves for the broken configs of the specs the replay plays
    (tr.REPLAYED_SPECS): <config>__<invariant>.json for each invariant a broken config is run
    to violate (models/catalog.yaml)."""
    from models import catalog

    cat = catalog.load()
    return {f"{c.name}__{p}.json" for c in cat.configs if c.broken and c.spec in tr.REPLAYED_SPECS
            for r in cat.plan(c) if r.purpose != "hold" for p in r.properties}  # fmt: skip


@pytest.mark.pg
def test_every_saved_trace_translates() -> None:
    """Every saved and simulated trace maps onto real actions (none is skipped); every broken
    config of the catalog has its counterexamples saved, and each category is represented."""
    missing = _catalog_counterexamples() - {p.name for p in sorted(tr.TRACES.glob("*.json"))}
    saved = tr.saved_traces()
    assert len(saved) < len(list(tr.TRACES.glob("*.json")))  # Queues, Schedules: left out
    assert not missing, f"no saved counterexample in {tr.TRACES}: {sorted(missing)}"
    assert tr.trace_paths("temporal") and tr.trace_paths("assumption"), tr.TRACES
    assert SERVER_SLOW.exists(), SERVER_SLOW
    sims = tr.trace_paths("simulated")
    assert len(sims) >= 30 and TWO_EFFECTS, len(sims)
    for p in saved + sims:
        s = tr.translate(tr.load_trace(p))
        assert any(op.kind == "run" for op in s.ops), p.name


def test_new_model_actions_translate() -> None:
    """Heartbeat is a no-op (the workers renew by themselves), LocalChange a real change of the
    local premise, Revoke names its grant, and an early takeover is reported as unforceable."""
    sims = [tr.load_trace(p) for p in tr.trace_paths("simulated")]
    assert any(s["action"] == "Heartbeat" for t in sims for s in t.states)
    for t in sims:
        ops = tr.translate(t).ops
        beats = [op for op in ops if op.action == "Heartbeat"]
        assert all(op.kind == "none" for op in beats), t.name
        changes = sum(s["action"] == "LocalChange" for s in t.states)
        assert changes == sum(op.kind == "local_change" for op in ops), t.name
        for op in ops:
            if op.kind == "revoke":
                assert op.arg in (1, 2), (t.name, op)
    for p in tr.trace_paths("broken"):
        t = tr.load_trace(p)
        s = tr.translate(t)
        want = UNFORCEABLE.get(t.config)
        assert (want is not None) == bool(s.not_reproducible), (t.name, s.not_reproducible)
        if want:
            assert all(want in x for x in s.not_reproducible), s.not_reproducible


def test_local_premise_check_flags_a_send_authorized_after_the_change() -> None:
    """local_premise_violations (the local half of NoSendOnStalePremise) is not vacuous: a
    dispatch or resend authorized after the local change that reached the target is flagged;
    one authorized before it, or one that never reached the target, is not."""

    class Ev:
        def __init__(self, entries, posts):
            self._entries, self._posts = entries, posts

        def effects(self):
            return {"e1": {"grant_id": "g", "payload": {}, "dispatch_workflow_id": "wf"}}

        def entries(self):
            return {"e1": self._entries}

        def posts(self):
            return {"e1": self._posts}

    dispatched = {"kind": "DISPATCHED", "ts": 10.0, "lease": "g", "effect": {}}
    resent = {"kind": "COMMITTED", "via": "recovery-reapply", "ts": 21.0,
              "rechecked": {"ts": 20.0}}  # fmt: skip
    assert tr.local_premise_violations(Ev([dispatched], [{"arrival": 10.5}]), None) == []
    assert tr.local_premise_violations(Ev([dispatched], [{"arrival": 10.5}]), 12.0) == []
    assert tr.local_premise_violations(Ev([dispatched, resent], [{"arrival": 10.5}]), 15.0) == []
    flagged = tr.local_premise_violations(
        Ev([dispatched, resent], [{"arrival": 10.5}, {"arrival": 20.2}]), 15.0
    )
    assert len(flagged) == 1 and "a resend authorized at 20.000" in flagged[0], flagged
    assert tr.local_premise_violations(Ev([dispatched], [{"arrival": 10.5}]), 9.0)


def test_an_unknown_action_raises() -> None:
    t = tr.load_trace(BROKEN[0])
    t.states = [t.states[0], {**t.states[1], "action": "Teleport"}]
    with pytest.raises(tr.UnknownAction, match="Teleport"):
        tr.translate(t)


@pytest.mark.parametrize(("mode", "path"),
                         _moded(BROKEN, [p for p in BROKEN if p.stem in ASYNC_BROKEN]))  # fmt: skip
def test_broken_config_counterexample_does_not_reproduce(mode, path, admin_dsn, template_db,
                                                         tmp_path):  # fmt: skip
    r = _replay(path, admin_dsn, template_db, tmp_path, mode)
    assert r.model_invariant not in r.violations, r.violations
    assert not r.violations, r.violations
    if r.config in UNFORCEABLE:
        # the key step is reported, not silently replaced: the claim came after the expiry
        assert r.not_reproducible, r
        assert all(UNFORCEABLE[r.config] in x for x in r.not_reproducible), r.not_reproducible
    else:
        assert not r.not_reproducible, r.not_reproducible
    if r.config == "Broken_NoLocalRecheck":
        # the local premise broke while the dispatch was open; recovery re-read it inside
        # T_resolve and refused: the stale resend the model makes never reached the target
        assert r.counts["local_changes"] == 1 and r.sends_seen == 0, r
    if r.config == "Broken_RevokeListByDeadline":
        # rt.revoke returned the effect still open past its send_deadline
        assert r.counts["revokes"] == 1 and r.counts["revoke_returned"] >= 1, r
    if r.config == "Broken_ThinDedupMargin":
        # C2 is refused before anything is sent: the workflow fails naming the three numbers
        assert r.status == "failed" and r.sends_seen == 0, r
        return
    _assert_sent_where_the_model_sends(r)


@pytest.mark.parametrize(("mode", "path"), _moded(SIMULATED, SIMULATED[:1]))
def test_simulated_behaviour_keeps_every_invariant(mode, path, admin_dsn, template_db, tmp_path):
    r = _replay(path, admin_dsn, template_db, tmp_path, mode)
    assert not r.violations, r.violations
    _assert_sent_where_the_model_sends(r)


@pytest.mark.parametrize(("mode", "path"), _moded(TWO_EFFECTS_PICK, TWO_EFFECTS_PICK[:1]))
def test_two_effect_behaviour_keeps_every_invariant(mode, path, admin_dsn, template_db, tmp_path):
    """TWO_EFFECTS: the replay flow runs both effects (the second on its own payment, under the
    second grant or, SHARED_GRANT, the same one); every invariant holds for both."""
    r = _replay(path, admin_dsn, template_db, tmp_path, mode)
    assert not r.violations, r.violations
    _assert_sent_where_the_model_sends(r)
    if r.status == "completed":  # a refused effect records its step row too
        assert r.counts["steps"] >= 3, r  # the plain step and both effects' step rows


@pytest.mark.parametrize(("mode", "path"), _moded(TEMPORAL, TEMPORAL[:1]))
def test_temporal_counterexample_does_not_reproduce_on_the_runtime(
    mode, path, admin_dsn, template_db, tmp_path
):
    r = _replay(path, admin_dsn, template_db, tmp_path, mode)
    assert not r.violations, r.violations
    _assert_sent_where_the_model_sends(r)


@pytest.mark.parametrize(("mode", "path"), _moded(ASSUMPTION, ASSUMPTION[:1]))
def test_assumption_lifted_trace(mode, path, admin_dsn, template_db, tmp_path):
    """Configs that lift A1, A2 or A3 (or shorten the clock): the runtime's code checks hold,
    except a tier-2 double application the runtime itself flags as A2 violated."""
    r = _replay(path, admin_dsn, template_db, tmp_path, mode)
    rest = {k: v for k, v in r.violations.items()
            if not (k == "EffectAtMostOnceTier12" and all("A2" in x for x in v))}  # fmt: skip
    assert not rest, r.violations


def test_server_slow_tier2_double_application_is_reported_by_the_receipt(
    admin_dsn, template_db, tmp_path, mode="sync"
):
    """A2 lifted (the target finishes the first request after send_deadline + settle_margin):
    the model predicts a double application at tier 2 (conceded, docs/design.md#concessions), and the replay
    reproduces it on the runtime. Found by this replay: verify() then said the effect happened
    once while the ledger showed two refunds (ReceiptTruthful), because the resender lost its
    claim and its late-path commit dropped `via`. Fixed in the runtime: that commit keeps
    `via: recovery-reapply`, and a lookup after the resend settles appends AUDITED
    {applications: 2, assumption_violated: A2}, so the receipt no longer claims "once"."""
    r = _replay(SERVER_SLOW, admin_dsn, template_db, tmp_path, mode)
    assert r.applied == 2 and r.sends_seen == 2, r  # the trace's double application reproduced
    assert set(r.violations) <= {"EffectAtMostOnceTier12", "NoOverlappingSends",
                                 "ReceiptTruthful"}, r.violations  # fmt: skip
    assert "ReceiptTruthful" not in r.violations, r.violations


@pytest.mark.skipif(not LONG, reason="async: ILR_LONG=1 (the bounded run replays one "
                    "assumption trace async)")  # fmt: skip
def test_server_slow_tier2_double_application_is_reported_by_the_receipt_async(
    admin_dsn, template_db, tmp_path
):
    """The same with the async def twin (a test of its own, not a parameter: the mutant
    SettleAuditSkipped names the sync test's id, which a skipped parameter would spoil)."""
    test_server_slow_tier2_double_application_is_reported_by_the_receipt(
        admin_dsn, template_db, tmp_path, mode="async")  # fmt: skip


def _replayed(category: str, violations: dict[str, list[str]]) -> tr.ReplayResult:
    return tr.ReplayResult(
        trace="T", config="C", category=category, model_invariant=None, seed=None, actions={},
        counts={}, violations=violations, checked=[], status="completed", sends_seen=1,
        applied=1, good_send=True, divergences=[], notes=[], seconds=0.1,
    )  # fmt: skip


def test_only_a_violation_where_none_may_be_is_a_finding() -> None:
    """`--all` replays assumption-lifted traces too (ServerSlow lifts A2), whose violations the
    model predicts: they are reported, not a failed run. A broken, simulated or temporal trace
    with a violation is one (the exit status says so)."""
    seen = {"EffectAtMostOnceTier12": ["applied 2 times at tier 2"]}
    assert tr.findings([_replayed("assumption", seen)]) == []
    for category in ("broken", "simulated", "temporal"):
        assert tr.findings([_replayed(category, seen)]) != []
        assert tr.findings([_replayed(category, {})]) == []
