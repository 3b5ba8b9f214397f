"""Loop runs resume per iteration and judge each iteration's harness lateness (prove/driver.py).

End to end: `python -m prove --full --resume` on a small copy of S12 (runtime, tier 1, 6
iterations) is SIGKILLed once its checkpoint holds 2 finished iterations, then run again with
the same flags. The second sweep must reuse the finished iterations as recorded (the same
workflow ids and times: a replay would start new workflows) and play only the rest. The unit
tests feed the checkpoint reader a line a crash cut short, and `DriverRun.iterate` a harness
that was late (LatenessMonitor.record) or a play that reported a harness error.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
import yaml

from prove import driver
from prove.lateness import LatenessMonitor
from prove.runner import REPO

RUN_ID = "S12-base-runtime-t1-s0"
N = 6


def _run(tmp_path: Path, services: object, timing: dict | None = None, n: int = 3,
         resume: bool = False) -> driver.DriverRun:  # fmt: skip
    return driver.DriverRun(services=services, scn=None, variant=None, system="runtime",
                            tier=1, seed=0, iterations=n, run_id="X-base-runtime-t1-s0",
                            dir=tmp_path, stack=ExitStack(), timing=timing or {},
                            resume=resume)  # fmt: skip


# -- the checkpoint ---------------------------------------------------------------------------


def test_a_line_cut_by_a_crash_is_ignored_and_overwritten(tmp_path: Path) -> None:
    dr = _run(tmp_path, SimpleNamespace(lateness=None))
    dr.iterate(lambda i: {"i": i, "correct": True, "v": f"first-{i}"}, n=2)
    path = tmp_path / driver.CHECKPOINT
    whole = path.read_bytes()
    torn = json.dumps({"i": 2, "run_id": dr.run_id, "record": {"i": 2, "v": "torn"}})
    path.write_bytes(whole + torn[:-7].encode())  # the append of iteration 2 never finished
    lines, end = driver.read_checkpoint(path)
    assert sorted(lines) == [0, 1] and end == len(whole)

    played: list[int] = []
    again = _run(tmp_path, SimpleNamespace(lateness=None), resume=True)
    recs = again.iterate(lambda i: played.append(i) or {"i": i, "correct": True, "v": "new"}, n=3)
    assert played == [2] and again.resumed == 2
    assert [r["v"] for r in recs] == ["first-0", "first-1", "new"]
    # the torn text is gone: every line of the file parses, and a third reader agrees
    assert [json.loads(x)["i"] for x in path.read_text().splitlines()] == [0, 1, 2]
    assert sorted(driver.read_checkpoint(path)[0]) == [0, 1, 2]


# -- harness lateness per iteration -----------------------------------------------------------


def test_a_late_iteration_is_played_again_then_left_out(tmp_path: Path) -> None:
    mon = LatenessMonitor()  # not started: only the observations fed below
    calls: list[tuple[int, int]] = []

    def play(i: int) -> dict:
        calls.append((i, dr.attempt))
        # iteration 0 is late on its first attempt only; iteration 2 on every attempt
        if (i == 0 and dr.attempt == 0) or i == 2:
            mon.record(0.5)
        return {"i": i, "correct": True, "workflow": f"wf-{i}-{dr.attempt}"}

    dr = _run(tmp_path, SimpleNamespace(lateness=mon), {"max_harness_lateness": 0.1})
    lines: list[str] = []
    dr.progress = lines.append
    recs = dr.iterate(play)
    assert calls == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    assert recs[0]["harness_error"] is None and recs[0]["workflow"] == "wf-0-1"
    assert [r["attempt"] for r in recs[0]["harness_retries"]] == [0]
    assert "harness too late" in recs[0]["harness_retries"][0]["harness_error"]
    assert recs[1]["harness_error"] is None and recs[1]["harness_retries"] == []
    assert "harness too late" in recs[2]["harness_error"]
    assert recs[2]["harness_lateness"]["max"] == 0.5 and len(recs[2]["harness_retries"]) == 2
    out = driver.summarize(recs)
    assert (out["n"], out["correct_n"], out["harness_error_iterations"]) == (2, 2, [2])
    assert [(d["i"], d["kind"]) for d in out["dropped_iterations"]] == [(2, "lateness")]
    assert out["correct"] and out["failing_iterations"] == []
    assert len(lines) == 3 and lines[-1].startswith(f"{dr.run_id}: iteration 3/3 HARNESS ERROR")


def test_a_play_that_reports_a_harness_error_is_retried(tmp_path: Path) -> None:
    """MIX: a timeline Run that ended in a harness error comes back as harness_error."""
    dr = _run(tmp_path, SimpleNamespace(lateness=None), n=1)
    recs = dr.iterate(lambda i: {"i": i, "correct": False,
                                 "harness_error": "Postgres restarted" if not dr.attempt else None})  # fmt: skip
    assert recs[0]["harness_error"] is None and len(recs[0]["harness_retries"]) == 1
    assert driver.summarize(recs)["n"] == 1


def test_a_missed_aim_is_played_again_with_its_plan_then_dropped_and_listed(tmp_path) -> None:
    """S12: an iteration whose revoke fired outside its side of the window measured nothing.
    It is played again (the same i, so the same planned offset); one that misses every time
    is left out of n and listed with its kind and reason."""
    dr = _run(tmp_path, SimpleNamespace(lateness=None), n=3)
    calls: list[tuple[int, int]] = []

    def play(i: int) -> dict:
        calls.append((i, dr.attempt))
        miss = (i == 0 and dr.attempt == 0) or i == 2
        return {"i": i, "correct": i != 1, **({"drop": f"missed {i}"} if miss else {})}

    lines: list[str] = []
    dr.progress = lines.append
    recs = dr.iterate(play)
    assert calls[:3] == [(0, 0), (0, 1), (1, 0)]
    assert calls[3:] == [(2, a) for a in range(1 + driver.AIM_RETRIES)]
    assert recs[0].get("drop") is None and recs[0]["harness_retries"][0]["drop"] == "missed 0"
    out = driver.summarize(recs)
    assert (out["n"], out["correct_n"], out["failing_iterations"]) == (2, 1, [1])
    assert out["dropped_iterations"] == [{"i": 2, "kind": "missed aim", "reason": "missed 2"}]
    assert out["harness_error_iterations"] == []
    assert lines[-1].startswith(f"{dr.run_id}: iteration 3/3 MISSED AIM")


def test_a_resume_plays_the_harness_error_iterations_again(tmp_path: Path) -> None:
    mon = LatenessMonitor()
    late = {1}

    def play(i: int) -> dict:
        if i in late:
            mon.record(0.5)
        return {"i": i, "correct": True, "attempt_of": dr.t0}

    dr = _run(tmp_path, SimpleNamespace(lateness=mon), {"max_harness_lateness": 0.1}, n=2)
    first = dr.iterate(play)
    assert first[1]["harness_error"] and driver.summarize(first)["n"] == 1
    late.clear()  # the machine is quieter now
    time.sleep(0.01)  # a later t0 tells the attempts apart
    dr = _run(tmp_path, SimpleNamespace(lateness=mon), {"max_harness_lateness": 0.1}, n=2,
              resume=True)  # fmt: skip
    again = dr.iterate(play)
    assert dr.resumed == 1 and again[0] == first[0]  # measured: kept as recorded
    assert again[1]["harness_error"] is None and again[1]["attempt_of"] == dr.t0
    assert driver.summarize(again)["n"] == 2
    # the replay's line comes after the harness error's, and wins
    assert driver.read_checkpoint(tmp_path / driver.CHECKPOINT)[0][1]["record"] == again[1]


@pytest.mark.pg
def test_a_run_whose_every_iteration_was_late_is_a_harness_error(tmp_path, monkeypatch) -> None:
    from interlock_runtime.testing import admin_dsn
    from prove import runner

    mon = LatenessMonitor()

    def all_late(dr: driver.DriverRun) -> dict:
        return {"iterations": dr.iterate(lambda i: mon.record(0.5) or {"i": i, "correct": True})}

    monkeypatch.setattr(driver, "load", lambda spec: all_late)
    services = runner.Services(admin_dsn(), "unused", lateness=mon)
    scn = SimpleNamespace(id="X", driver="x:all_late", emulated=(), iterations={"quick": 2})
    variant = SimpleNamespace(name="base", params={}, timing={"max_harness_lateness": 0.1})
    rec = runner.run_driver(services, scn, variant, "runtime", 1, 0, tmp_path)
    oc = rec["outcome"]
    assert (oc["n"], oc["harness_error_iterations"], oc["correct"]) == (0, [0, 1], False)
    assert rec["error"].startswith("every iteration was a harness error"), rec["error"]


# -- end to end: a real sweep, SIGKILLed in the middle of a loop cell --------------------------


def _scenario_dir(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO / "scenarios" / "S12.yaml").read_text())
    data.update(tiers=[1], systems=["runtime"], iterations={"quick": 2, "full": N})
    data["predicted"] = [p for p in data["predicted"]
                         if p["system"] == "runtime" and p["tier"] == 1]  # fmt: skip
    d = tmp_path / "scenarios"
    d.mkdir()
    (d / "S12.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return d


def _databases(admin: str) -> set[str]:
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute(r"select datname from pg_database where datname like 'ilr\_%'")
        return {r[0] for r in rows}


def _leftovers(admin: str, pid: int, new: set[str], workflows: list[str]) -> set[str]:
    """The databases the SIGKILLed sweep `pid` left: its template (named by its pid) and the
    run's own database, told from others made meanwhile (another test's) by its workflows.
    Its worker processes are forked by the zygote, so their command lines do not say."""
    from interlock_runtime.testing import with_dbname

    out = {n for n in new if n.startswith(f"ilr_tpl_{pid}_")}
    for name in sorted(n for n in new if n.startswith("ilr_t_")):
        try:
            with psycopg.connect(with_dbname(admin, name), connect_timeout=5) as conn:
                if conn.execute("select 1 from ilr.workflows where id = any(%s)",
                                (workflows,)).fetchone():  # fmt: skip
                    out.add(name)
        except psycopg.Error:  # dropped meanwhile, or not a runtime database
            continue
    return out


@pytest.mark.pg
@pytest.mark.slow
def test_a_killed_full_sweep_resumes_inside_the_loop_run(tmp_path: Path) -> None:
    from interlock_runtime.testing import admin_dsn

    scn_dir, runs = _scenario_dir(tmp_path), tmp_path / "runs"
    cmd = [sys.executable, "-m", "prove", "--full", "--resume", "--runs-dir", str(runs),
           "--scenarios", "S12", "--systems", "runtime", "--tiers", "1", "--no-report",
           "--no-stripe", "--scenario-dir", str(scn_dir)]  # fmt: skip
    ckpt = runs / RUN_ID / driver.CHECKPOINT
    admin = admin_dsn()
    dbs_before = _databases(admin)
    with open(tmp_path / "first.log", "wb") as log:
        # its own process group: the SIGKILL takes the zygote and the workers with it
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                if ckpt.exists() and len(driver.read_checkpoint(ckpt)[0]) >= 2:
                    break
                time.sleep(0.003)
            with contextlib.suppress(ProcessLookupError):  # unless it already ended
                os.killpg(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    before = {i: line["record"] for i, line in driver.read_checkpoint(ckpt)[0].items()}
    # what its exit did not drop
    left = _leftovers(admin, proc.pid, _databases(admin) - dbs_before,
                      [r["workflow"] for r in before.values()])  # fmt: skip
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in left:
            conn.execute(f'drop database if exists "{name}" with (force)')
    assert any(n.startswith("ilr_t_") for n in left), left  # the run's database was found
    log_text = (tmp_path / "first.log").read_text()
    assert 2 <= len(before) < N, (sorted(before), log_text[-2000:])
    assert not (runs / f"{RUN_ID}.json").exists()  # the run itself did not finish

    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    rec = json.loads((runs / f"{RUN_ID}.json").read_text())
    its = rec["iterations"]
    assert rec["error"] is None, rec["faults"]["timeline"][-3:]
    assert [it["i"] for it in its] == list(range(N))
    # a dropped iteration (harness error, missed aim) measured nothing: it is played again
    measured = {i: r for i, r in before.items() if not driver.dropped(r)}
    assert rec["timings"]["resumed_iterations"] == len(measured)
    for i, old in measured.items():  # reused as recorded, not played again
        assert rec["ground_truth"]["iterations"][i] == old.pop("ground_truth")
        assert its[i] == old
        assert (its[i]["workflow"], its[i]["end_to_end"]) == (old["workflow"], old["end_to_end"])
    assert len({it["workflow"] for it in its}) == N  # the others are new workflows
    oc = rec["outcome"]
    assert oc["n"] + len(oc["dropped_iterations"]) == N
    assert oc["sent_under_revoked_grant"] == 0 and not oc["failing_iterations"]
    # one checkpoint line per iteration; the interrupted attempt's files were set aside
    assert sorted(json.loads(x)["i"] for x in ckpt.read_text().splitlines()) == list(range(N))
    assert (runs / RUN_ID / "interrupted-0" / "ledger.sqlite").exists()
