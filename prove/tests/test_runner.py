"""Harness smoke tests: one real cell end to end per system (S01 at tier 1, one seed), the same
cell through the Stripe-compatible subset (EMULATED), the runtime's async mode (`runtime_async`:
S01 and the S07 recovery race at tier 1, one seed each), a seeded external SIGKILL, and bad
input.

Real worker subprocesses, a real SIGKILL (at the kill point, or from the runner at a seeded
time), a real target and Temporal dev server; the run file must hold what docs/design.md#prove asks for,
and the oracle must agree with the ledger. The runs of one test go in parallel (the runner's
own pool).
"""

from __future__ import annotations

import dataclasses
import json
import socket

import pytest

from interlock_runtime.testing import admin_dsn, template_database
from prove import report, runner
from prove.lateness import LatenessMonitor
from prove.scenario import load_all
from prove.zygote import Zygote
from world.temporal_server import TemporalDevServer


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    admin = admin_dsn()
    with template_database(admin) as tpl:
        server = TemporalDevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
        try:
            # the smoke cells check the instrumented kill point; the external plan has its test.
            # Workers are forked by a zygote as in `make prove` (the external test uses exec).
            with Zygote(cwd=runner.REPO, env=runner.child_env()) as zygote, \
                    LatenessMonitor() as monitor:  # fmt: skip
                yield runner.Services(admin, tpl, server, versions=runner.versions(admin),
                                      crash_plans="instrumented", zygote=zygote,
                                      lateness=monitor)  # fmt: skip
        finally:
            server.kill()


def _check_common(rec: dict, tmp_path) -> None:
    assert rec["error"] is None, rec["faults"]["timeline"]
    assert json.loads((tmp_path / f"{rec['identity']['run_id']}.json").read_text()) == rec
    assert rec["versions"]["git_commit"] and rec["timings"]["end_to_end"] > 0
    assert rec["model_calls"] and rec["model_calls"][0]["emulated"]
    refunds = rec["ground_truth"]["ledger"]
    assert [r["amount"] for r in refunds] == [2000]
    oc = rec["outcome"]
    assert oc["correct"] and oc["duplicate_applications"] == 0 and oc["prediction_held"]


def test_one_cell_per_system_and_the_stripe_cell(services, tmp_path) -> None:
    (s01,) = load_all(["S01"])
    runs = runner.plan([s01], 1, "quick", ["runtime", "temporal_idem", "temporal_check"], [1])
    runs += runner.plan([s01], 1, "quick", ["runtime"], [1], apis=("stripe",))
    assert [(r[2], r[3], r[4], r[5]) for r in runs] == [
        ("runtime", 1, 0, "local"),
        ("temporal_idem", 1, 0, "local"),
        ("temporal_check", 1, 0, "local"),
        ("runtime", 1, 0, "stripe"),
    ]
    forked = services.zygote.forked
    results = runner.sweep(services, runs, tmp_path, jobs=2, progress=lambda _: None)
    # 4 runs: 3+3 runtime workers twice, 1+1 Temporal workers twice (more if a run was
    # run again after a harness error), all forked
    assert services.zygote.forked - forked >= 16 and services.zygote.fallbacks == 0
    by = {(r["identity"]["system"], r["identity"]["api"]): r for r in results}
    assert len(by) == 4
    for rec in by.values():
        _check_common(rec, tmp_path)
        assert rec["faults"]["crash_plan"]["kind"] == "instrumented"
        assert rec["faults"]["crashed_by_kill_point"] is True  # a real SIGKILL (-9)
        assert any(e["what"] == "crashed" for e in rec["faults"]["timeline"])
        if rec["identity"]["system"] == "runtime":  # `down` SIGKILLs the two other workers
            assert sum(e["what"] == "sigkill" for e in rec["faults"]["timeline"]) == 2
        # the send and the deduped resend; (b)'s retry finds its refund and sends nothing
        sends = 1 if rec["identity"]["system"] == "temporal_check" else 2
        assert rec["outcome"]["quantities"]["agent_sends"] == sends

    rt = by[("runtime", "local")]
    assert rt["outcome"]["observed"] == "$20 COMMITTED_BY_RETRY"
    assert rt["artifacts"]["receipt_verify"]["valid"]
    assert rt["artifacts"]["invariants"] == {}  # every catalog code check held
    assert len(rt["artifacts"]["claim_history"]) >= 2
    for mode in ("temporal_idem", "temporal_check"):
        tm = by[(mode, "local")]
        refunds = [a for a in tm["artifacts"]["attempts"] if a["activity"] == "refund"]
        assert [a["attempt"] for a in refunds] == [1, 2]
        assert refunds[0]["outcome"] == "incomplete"  # its worker died at effect_after_send
    # (b) looked its refund up on the retry and returned it without a second POST
    check = [a for a in by[("temporal_check", "local")]["artifacts"]["attempts"]
             if a["activity"] == "refund"]  # fmt: skip
    assert check[1]["checks"]["lookup"]["found"]

    # The Stripe cell: every send went to POST /v1/refunds with the SDK's Idempotency-Key; the
    # oracle must count them (it once counted /refunds only, and saw 0 sends).
    st = by[("runtime", "stripe")]
    assert st["outcome"]["observed"] == "$20 COMMITTED_BY_RETRY"
    posts = [a for a in st["ground_truth"]["access_log"] if a["method"] == "POST"
             and a["path"] == "/v1/refunds"]  # fmt: skip
    assert len(posts) == 2 and len({a["key"] for a in posts}) == 1 and posts[0]["key"]
    assert st["ground_truth"]["ledger"][0]["id"].startswith("re_")
    assert any("stripe" in e for e in st["faults"]["emulated"])

    cells = report.aggregate([s01], results)
    assert {(c["system"], c["api"], c["n"], c["correct"]) for c in cells} == {
        ("runtime", "local", 1, 1),
        ("temporal_idem", "local", 1, 1),
        ("temporal_check", "local", 1, 1),
        ("runtime", "stripe", 1, 1),
    }
    md, js = report.write([s01], results, services.versions, 1.0, out_dir=tmp_path / "results")
    text = md.read_text()
    assert '<a id="cell-s01-t1-base"></a>S01 | 1 | base |' in text
    assert "EMULATED" in text and "A1" in text
    # rendered from the pack it wrote, so the pack recomputes it; a hand edit does not
    assert report.verify(tmp_path / "results") == []
    md.write_text(text.replace("| 100% (1)", "| 90% (1)", 1))
    assert "runtime_prove.md differs" in report.verify(tmp_path / "results")[0]
    assert 'key = f"{info.workflow_run_id}-{info.activity_id}"' in text
    stripe_section = text.split("## 3. Stripe-compatible (EMULATED)")[1].split("## 4.")[0]
    assert "| S01 | 1 | 100% (1)" in stripe_section and "runtime: 1 in 1 run(s)" in stripe_section
    assert json.loads(js.read_text())["cells"]


def test_runtime_async_cells_run_the_async_workflow_on_asyncio_workers(services, tmp_path) -> None:
    """runtime_async: the same scenarios on the `async def` twin of the refund workflow. S01 (a
    kill after the send, then every worker down) and S07 (two fresh workers race the recovery)
    at tier 1: judged by the same oracle and predicted as the runtime; the workers registered
    only the async workflow (a plain worker refuses it), and the report gives it a column."""
    s01, s07 = load_all(["S01", "S07"])
    assert "runtime_async" in s01.systems and "runtime_async" in s07.systems
    assert s01.prediction("runtime_async", 1, "base") == s01.prediction("runtime", 1, "base")
    runs = runner.plan([s01, s07], 1, "quick", ["runtime_async"], [1], stripe=True)
    assert [(r[0].id, r[2], r[5]) for r in runs] == [("S01", "runtime_async", "local"),
                                                     ("S07", "runtime_async", "local")]  # fmt: skip
    results = runner.sweep(services, runs, tmp_path, jobs=2, progress=lambda _: None)
    by = {r["identity"]["scenario"]: r for r in results}
    for sid, rec in by.items():
        _check_common(rec, tmp_path)
        assert rec["identity"]["system"] == "runtime_async"
        assert rec["faults"]["crashed_by_kill_point"] is True
        assert rec["outcome"]["observed"] == "$20 COMMITTED_BY_RETRY", sid
        assert rec["artifacts"]["invariants"] == {}, sid  # every catalog code check held
        assert rec["artifacts"]["receipt_verify"]["valid"]
        logs = sorted((tmp_path / rec["identity"]["run_id"]).glob("W*.events.jsonl"))
        registered = [json.loads(line)["workflows"] for p in logs
                      for line in p.read_text().splitlines() if '"registered"' in line]  # fmt: skip
        assert registered and all(w == ["prove_refund_async@1"] for w in registered), registered
    md, _ = report.write([s01, s07], results, services.versions, 1.0,
                         out_dir=tmp_path / "results")  # fmt: skip
    row = next(line for line in md.read_text().splitlines() if "S01 | 1 |" in line)
    cols = [c.strip() for c in row.split("|")]
    assert cols[4] == "-" and cols[5].startswith("100% (1)"), row  # runtime -, runtime (async)
    assert "can-prove 5.0/5" in cols[5], row  # the audit reads an async run's records too


def test_crash_plans_are_seeded_half_external() -> None:
    (s01,) = load_all(["S01"])
    v = s01.variant("base")
    plans = [runner.crash_plan(s01, v, "runtime", 1, seed) for seed in range(10)]
    assert plans == [runner.crash_plan(s01, v, "runtime", 1, seed) for seed in range(10)]
    kinds = [p["kind"] for p in plans]
    assert kinds.count("external") == 5 and kinds.count("instrumented") == 5
    assert kinds[0] == "instrumented"  # a one-seed sweep checks every prediction
    for p in plans:
        if p["kind"] == "external":
            assert 0 <= p["at"] < p["window"] and p["replaces"] == ["effect_after_send"]
    assert runner.crash_plan(s01, v, "runtime", 1, 1, mode="instrumented")["kind"] == (
        "instrumented"
    )
    # a scenario that crashes before the approval keeps its instrumented point
    (s05b,) = load_all(["S05b"])
    for seed in range(4):
        plan = runner.crash_plan(s05b, s05b.variant("base"), "runtime", 1, seed)
        assert plan["kind"] == "instrumented"


def test_an_external_sigkill_run_is_recorded(services, tmp_path) -> None:
    (s01,) = load_all(["S01"])
    ext = runner.Services(services.admin_dsn, services.template, services.temporal,
                          versions=services.versions, crash_plans="external")  # fmt: skip
    (rec,) = runner.sweep(ext, runner.plan([s01], 1, "quick", ["runtime"], [1]), tmp_path,
                          jobs=1, progress=lambda _: None)  # fmt: skip
    assert rec["error"] is None, rec["faults"]["timeline"]
    plan = rec["faults"]["crash_plan"]
    assert plan["kind"] == "external" and plan["killed"] and "fired_at" in plan
    kills = [e for e in rec["faults"]["timeline"] if e["what"] == "external_sigkill"]
    assert kills and kills[0]["pids"] == plan["killed"]
    # every worker started unarmed: the crash came from the runner, not a kill point
    assert all(e["kill_at"] is None for e in rec["faults"]["timeline"]
               if e["what"] == "worker_start")  # fmt: skip
    oc = rec["outcome"]
    assert oc["prediction_held"] is None  # predictions are for the instrumented point
    assert oc["correct"], oc  # the oracle still judges it: one refund, at most once
    assert [r["amount"] for r in rec["ground_truth"]["ledger"]] == [2000]


# -- bad input: a clear message, exit status 2, finished runs left intact


def _finished_run(runs_dir):
    runs_dir.mkdir(parents=True, exist_ok=True)
    done = runs_dir / "S01-base-runtime-t1-s0.json"
    done.write_text('{"finished": true}')
    return done


def test_cli_yaml_error_names_the_file_and_line(tmp_path, capsys) -> None:
    from prove.__main__ import main

    (tmp_path / "S01.yaml").write_text("id: S01\ntitle: [unclosed\n")
    done = _finished_run(tmp_path / "runs")
    code = main(["--scenario-dir", str(tmp_path), "--runs-dir", str(tmp_path / "runs"),
                 "--no-report"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "S01.yaml:" in err and "not valid YAML" in err
    assert done.read_text() == '{"finished": true}'


def test_cli_unknown_scenario_id(tmp_path, capsys) -> None:
    from prove.__main__ import main

    done = _finished_run(tmp_path / "runs")
    assert main(["--scenarios", "S42", "--runs-dir", str(tmp_path / "runs"), "--no-report"]) == 2
    assert "unknown scenario id(s) ['S42']" in capsys.readouterr().err
    assert done.exists()


@pytest.mark.pg
def test_cli_temporal_missing_leaves_runs_intact(tmp_path, capsys, monkeypatch) -> None:
    from prove.__main__ import main

    monkeypatch.setenv("ILR_TEMPORAL_BIN", str(tmp_path / "no-such-temporal"))
    done = _finished_run(tmp_path / "runs")
    code = main(["--scenarios", "S01", "--systems", "temporal_idem", "--tiers", "1",
                 "--seeds", "1", "--runs-dir", str(tmp_path / "runs"), "--no-report"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot start the Temporal dev server" in err and "ILR_TEMPORAL_BIN" in err
    assert done.read_text() == '{"finished": true}'


@pytest.mark.pg
def test_cli_temporal_port_taken_leaves_runs_intact(tmp_path, capsys) -> None:
    from prove.__main__ import main

    done = _finished_run(tmp_path / "runs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        code = main(["--scenarios", "S01", "--systems", "temporal_check", "--tiers", "1",
                     "--seeds", "1", "--runs-dir", str(tmp_path / "runs"), "--no-report",
                     "--temporal-port", str(s.getsockname()[1])])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot start the Temporal dev server" in err and "already taken" in err
    assert done.read_text() == '{"finished": true}'


def test_a_run_run_again_starts_from_an_empty_directory(tmp_path) -> None:
    # Found while re-running runs after a harness error: the old run's SQLite ledger was
    # reopened by the new target and its refunds counted as the new run's ground truth.
    (s01,) = load_all(["S01"])
    old = tmp_path / runner.run_name("S01", "base", "runtime", 1, 0)
    old.mkdir()
    (old / "ledger.sqlite").write_text("the previous run's ledger")
    svc = runner.Services("unused", "unused")
    run = runner.Run(svc, s01, s01.variant("base"), "runtime", 1, 0, tmp_path)
    assert run.dir == old and list(old.iterdir()) == []


def test_the_ground_truth_waits_for_a_refund_still_in_flight(tmp_path) -> None:
    # Found in S08c: the workflow ended (the resend applied) while the first, slow POST was
    # still being processed, and the ledger read then missed the duplicate it made.
    import threading

    from world.target import Target
    from world.target_client import LocalRefunds, TargetAdmin

    (s08c,) = load_all(["S08c"])
    run = runner.Run(runner.Services("unused", "unused"), s08c, s08c.variant("base"),
                     "runtime", 2, 0, tmp_path)  # fmt: skip
    with Target(2, db=str(tmp_path / "l.sqlite")) as target:
        run.admin = TargetAdmin(target.url)
        run.admin.create_payment("pay_881", 10000)
        run.admin.set_delay(500, count=1)
        slow = threading.Thread(target=LocalRefunds(target.url, "pay_881", 2).apply,
                                args=("eff-1", {"amount": 2000}))  # fmt: skip
        slow.start()
        # the POST has arrived (it is in the access log) and has not finished
        while not [a for a in run.admin.log() if a["path"] == "/refunds"]:
            pass
        run._wait_inflight()
        assert [r["amount"] for r in run.admin.ledger()["refunds"]] == [2000]
        slow.join()


TWO_CRASHES = """
id: S99
title: two instrumented crashes, then world events after the end
description: the second wait_crash must wait for the second armed worker, not the first corpse
tiers: [1]
systems: [runtime]
seeds: {quick: 1, full: 1}
timeline:
  - workers: {kill_at: effect_before_dispatch, count: 1}
  - start:
  - approve: {amount: 2000}
  - wait_crash:
  - down:
  - workers: {kill_at: effect_after_send, count: 1}
  - wait_crash:
  - down:
  - restart:
  - wait_result:
  - reapprove:
  - cancel:
oracle:
  require: {agent_applications: {eq: 1}}
  refund_expected: true
predicted:
  - {system: runtime, tier: 1, total_cents: 2000}
invariants: [EffectAtMostOnceTier12]
claims: []
"""


def test_two_crashes_and_events_after_the_end_are_recorded(services, tmp_path) -> None:
    """Two instrumented crashes in one run (each wait_crash sees its own worker die at its own
    point); a re-approve and a cancel after the workflow ended are refused and recorded, and
    the run is not a harness error."""
    scn_dir = tmp_path / "scenarios"
    scn_dir.mkdir()
    (scn_dir / "S99.yaml").write_text(TWO_CRASHES)
    (scn,) = load_all(directory=scn_dir)
    (rec,) = runner.sweep(services, runner.plan([scn], 1, "quick", None, None), tmp_path / "runs",
                          jobs=1, progress=lambda _: None, retries=0)  # fmt: skip
    assert rec["error"] is None, rec["faults"]["timeline"]
    crashed = [e for e in rec["faults"]["timeline"] if e["what"] == "crashed"]
    assert [e["kill_at"] for e in crashed] == ["effect_before_dispatch", "effect_after_send"]
    assert len({e["pid"] for e in crashed}) == 2 and all(e["real_sigkill"] for e in crashed)
    whats = [e["what"] for e in rec["faults"]["timeline"]]
    assert "reapprove_refused" in whats and "cancel_refused" in whats
    assert [r["amount"] for r in rec["ground_truth"]["ledger"]] == [2000]
    assert rec["outcome"]["correct"]


class _LateOnce:
    """A lateness monitor whose first window reports a 1 s stall, then none."""

    def __init__(self) -> None:
        self.calls = 0

    def window(self, t0: float, t1: float | None = None) -> dict:
        self.calls += 1
        late = 1.0 if self.calls == 1 else 0.001
        return {"samples": 10, "max": late, "p99": late}


def test_a_run_the_harness_was_too_late_for_is_a_harness_error_and_run_again(
    services, tmp_path
) -> None:
    (s00,) = load_all(["S00"])
    svc = dataclasses.replace(services, lateness=_LateOnce())
    lines: list[str] = []
    (rec,) = runner.sweep(svc, runner.plan([s00], 1, "quick", ["runtime"], [1]), tmp_path,
                          jobs=1, progress=lines.append)  # fmt: skip
    assert any("harness too late" in line for line in lines), lines  # the first attempt
    assert any(line.startswith("re-running 1 run(s)") for line in lines)
    assert rec["error"] is None and rec["outcome"]["correct"]  # the second attempt measured
    assert rec["timings"]["harness_lateness"]["max"] == 0.001
    # a run that stays too late is left out of every n and listed
    bad = dataclasses.replace(
        services,
        lateness=type(
            "Late", (), {"window": lambda self, t0, t1=None: {"samples": 1, "max": 2.0, "p99": 2.0}}
        )(),
    )
    (rec,) = runner.sweep(bad, runner.plan([s00], 1, "quick", ["runtime"], [1]), tmp_path,
                          jobs=1, progress=lambda _: None, retries=0)  # fmt: skip
    assert "harness too late" in rec["error"] and rec["outcome"]["harness_error"]
    assert report.aggregate([s00], [rec]) == []
    assert report.lateness_summary([rec])["too_late"] == [rec["identity"]["run_id"]]


def test_a_partition_run_records_its_timing_and_judges_its_lateness(services, tmp_path) -> None:
    # Found in a sweep: the partition's timer threads were joined in a loop over `t`, which
    # shadowed the timing constants: every S08a run ended in an AttributeError (and the
    # timing constants of its record were a Thread's repr).
    (s08a,) = load_all(["S08a"])
    (rec,) = runner.sweep(services, runner.plan([s08a], 1, "quick", ["runtime"], [1]), tmp_path,
                          jobs=1, progress=lambda _: None, retries=0)  # fmt: skip
    assert rec["error"] is None, rec["faults"]["timeline"]
    assert rec["timing_constants"] == s08a.variant("base").timing
    assert rec["timings"]["harness_lateness"]["samples"] > 0
    assert any(e["what"] == "partition_over" for e in rec["faults"]["timeline"])


def test_an_external_kill_after_the_effect_is_judged_by_the_event_order() -> None:
    # S02's oracle (total $20, no agent refund) assumes the hand refund came during an
    # outage before the send. A random external SIGKILL may strike after the refund was
    # applied; the hand refund then follows the effect, which is correct, not a failure.
    (s02,) = load_all(["S02"])
    v = s02.variant("base")
    post = {"method": "POST", "path": "/refunds", "arrival": 10.0, "status": 200, "response": {}}
    agent = {"source": "agent", "amount": 2000}
    hand = {"source": "hand", "amount": 2000}

    def judge(external: bool, arrivals: list[float], rows: list[dict]) -> dict:
        posts = [dict(post, arrival=t) for t in arrivals]
        return runner.evaluate(s02, v, "runtime", 1, rows, posts, {"hand_refund": 11.0}, 2000,
                               None, None, external_crash=external)  # fmt: skip

    after = judge(True, [10.0], [agent, hand])
    assert after["correct"] and after["oracle_basis"].startswith("event order")
    assert not judge(False, [10.0], [agent, hand])["correct"]  # instrumented: the oracle's
    late = judge(True, [10.0, 12.0], [agent, agent, hand])  # a second send after the change
    assert not late["correct"] and len(late["oracle_failures"]) == 2
    before = judge(True, [12.0], [agent, hand])  # the send came after the hand refund
    assert not before["correct"] and before["oracle_basis"] == "scenario oracle"


def test_a_runtime_async_contradiction_takes_the_runtimes_diagnosis() -> None:
    """runtime_async is predicted as the runtime, so a contradiction both show (S13 tier 2 long:
    the runtime's stopwatch refuses the late send) carries the runtime's diagnosed reason,
    marked as such; a cell nobody diagnosed says so."""
    cell = {"scenario": "S13", "system": "runtime_async", "tier": 2, "variant": "long"}
    reason = report._reason(cell)
    assert reason == report.REASONS[("S13", "runtime", 2, "long")] + " (diagnosed for runtime)"
    assert report._reason({**cell, "system": "runtime"}) == report.REASONS[
        ("S13", "runtime", 2, "long")]  # fmt: skip
    assert report._reason({**cell, "scenario": "S01"}) == "not diagnosed yet"
