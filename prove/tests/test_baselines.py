"""The Temporal baselines end to end: a real dev server, a real target, real worker subprocesses.

One dev server, one model stub (EMULATED model variance) and one grants database for the module;
a target and a task queue per test. Crashes are real SIGKILLs at the instrumented kill points of
docs/design.md#kill-points (ILR_KILL_AT in the worker's environment).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import queue
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from baselines import MODES, refund
from baselines.client import BaselineClient, reset_to_before_decision_cli
from baselines.refund import activity_source, read_attempts, refund_temporal_check
from interlock_runtime import db, local_postgres, migrations
from prove import runner
from world.model_stub import ModelStub
from world.targets_for_tests import TargetFactory
from world.temporal_server import TemporalDevServer

REPO = Path(__file__).resolve().parents[2]

PAY = "pay_881"
GRANT = "grant-4471"
REVOKED = "grant-revoked"
NO_CAP = "grant-no-cap"


# -- module-wide services


@pytest.fixture(scope="module")
def temporal(tmp_path_factory):
    server = TemporalDevServer(tmp_path_factory.mktemp("temporal") / "temporal.db")
    server.start()
    yield server
    server.kill()  # throwaway state: no need for the few seconds of a clean shutdown


@pytest.fixture(scope="module")
def client(temporal):
    c = BaselineClient(temporal.address)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub():
    s = ModelStub().start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def grants_dsn():
    """A database of our own with the runtime's schema and one grant (approved: 2000 cents)."""
    admin = local_postgres.external_dsn() or (
        local_postgres.start() and local_postgres.dsn("postgres")
    )
    name = f"ilr_bl_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    dsn = make_conninfo(**{**conninfo_to_dict(admin), "dbname": name})
    try:
        with db.connect(dsn) as conn:
            migrations.ensure(conn)
            conn.execute(
                "insert into ilr.grants (id, principal, action, constraints, granted_by, revoked_at)"
                " values (%s, 'refund-agent', 'refund', '{\"amount\": {\"max\": 2000}}', 'test', null),"
                " (%s, 'refund-agent', 'refund', '{\"amount\": {\"max\": 2000}}', 'test', now()),"
                " (%s, 'refund-agent', 'refund', null, 'test', null)",
                (GRANT, REVOKED, NO_CAP),
            )
        yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def target(tmp_path):
    factory = TargetFactory(tmp_path, PAY)
    yield factory.make
    factory.close()


class Worker:
    def __init__(self, proc: subprocess.Popen[str], ready: dict, stderr_path: Path) -> None:
        self.proc, self.ready, self.stderr_path = proc, ready, stderr_path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]


@pytest.fixture
def workers(tmp_path, temporal, stub, grants_dsn):
    started: list[Worker] = []

    def spawn(mode: str, tier: int, target_url: str, task_queue: str, wid: str,
              kill_at: str = "", extra: tuple[str, ...] = ()) -> Worker:  # fmt: skip
        env = dict(runner.child_env(), ILR_KILL_AT=kill_at)
        stderr_path = tmp_path / f"{wid}.stderr"
        cmd = [sys.executable, "-m", "baselines.worker", "--address", temporal.address,
               "--task-queue", task_queue, "--mode", mode, "--target-url", target_url,
               "--payment", PAY, "--tier", str(tier), "--model-url", stub.url,
               "--grants-dsn", grants_dsn, "--attempt-log", str(tmp_path / "attempts.jsonl"),
               "--id", wid, *extra]  # fmt: skip
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                    cwd=REPO)  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        try:
            ready = json.loads(lines.get(timeout=60))
        except (queue.Empty, ValueError):
            proc.kill()
            proc.wait(timeout=10)
            msg = f"worker {wid} never got ready:\n{stderr_path.read_text()}"
            raise AssertionError(msg) from None
        assert ready["event"] == "ready" and ready["kill_at"] == kill_at
        w = Worker(proc, ready, stderr_path)
        started.append(w)
        return w

    yield spawn
    for w in started:
        if w.proc.poll() is None:
            w.proc.terminate()
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait(timeout=10)


def _ids(mode: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"refund-{mode}-{suffix}", f"tq-{mode}-{suffix}"


def _refund_attempts(tmp_path: Path, wf_id: str) -> list[dict]:
    return [a for a in read_attempts(tmp_path / "attempts.jsonl")
            if a["activity"] == "refund" and a["workflow_id"] == wf_id]  # fmt: skip


# -- tests


def test_activity_bodies_are_quotable_as_run():
    idem, check = activity_source("temporal_idem"), activity_source("temporal_check")
    assert '@activity.defn(name="refund")' in idem and "@activity.defn" in check
    assert 'key = f"{info.workflow_run_id}-{info.activity_id}"' in idem
    assert 'key = f"{info.workflow_id}-refund"' in check
    for line in ("existing = http_target.find_refund(key)", 'g = grants_db.fetch(req["grant_id"])',
                 'raise ApplicationError("not authorized", non_retryable=True)',
                 'raise ApplicationError("amount differs from approval", non_retryable=True)',
                 'p = http_target.get_payment(req["payment"])',
                 'raise ApplicationError("not eligible", non_retryable=True)'):  # fmt: skip
        assert line in check
    assert check == inspect.getsource(refund_temporal_check)
    assert set(MODES) == {"temporal_idem", "temporal_check"}


@pytest.fixture
def in_process(tmp_path, grants_dsn, target, stub):
    """The refund activity of a mode run in this process (temporalio's ActivityEnvironment, no
    server): the check logic and the attempt log without worker startup costs."""
    saved = {k: getattr(refund, k) for k in ("http_target", "grants_db", "model", "attempt_log")}

    def make(mode: str, tier: int, **info):
        t, admin = target(tier)
        acts = refund.configure(mode=mode, target_url=t.url, payment=PAY, tier=tier,
                                model_url=stub.url, grants_dsn=grants_dsn,
                                attempt_log_path=str(tmp_path / "attempts.jsonl"),
                                worker="w-inproc")  # fmt: skip
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, **info)

        def run(req: dict, **more):
            env.info = dataclasses.replace(env.info, **more)
            return env.run(acts[1], {"payment": PAY, **req})

        return run, admin

    yield make
    for k, v in saved.items():
        setattr(refund, k, v)


def _last_attempt(tmp_path: Path) -> dict:
    return read_attempts(tmp_path / "attempts.jsonl")[-1]


def test_check_refuses_a_revoked_grant_at_tier3(in_process, tmp_path):
    run, admin = in_process("temporal_check", 3, workflow_id="wf-revoked")
    with pytest.raises(ApplicationError, match="not authorized") as e:
        run({"amount": 2000, "approved_amount": 2000, "grant_id": REVOKED})
    assert e.value.non_retryable
    assert admin.ledger()["refunds"] == [] and admin.log(path="/refunds") == []
    a = _last_attempt(tmp_path)
    assert a["outcome"] == "raised" and a["retryable"] is False
    assert "lookup" not in a["checks"]  # tier 3 has no lookup
    assert a["checks"]["grant"]["passed"] is False and a["checks"]["grant"]["row"]["revoked_at"]


def test_check_refuses_an_amount_other_than_approved(in_process, tmp_path):
    run, admin = in_process("temporal_check", 2, workflow_id="wf-amount")
    with pytest.raises(ApplicationError, match="amount differs from approval"):
        run({"amount": 3000, "approved_amount": 2000, "grant_id": NO_CAP})
    assert admin.ledger()["refunds"] == []
    checks = _last_attempt(tmp_path)["checks"]
    assert checks["lookup"]["found"] is None and checks["grant"]["passed"] is True
    assert checks["amount"] == {"amount": 3000, "approved_amount": 2000, "passed": False}


def test_check_refuses_when_not_eligible(in_process, tmp_path):
    run, admin = in_process("temporal_check", 2, workflow_id="wf-eligible")
    admin.hand_refund(PAY, 9000)
    with pytest.raises(ApplicationError, match="not eligible"):
        run({"amount": 2000, "approved_amount": 2000, "grant_id": GRANT})
    assert [r["source"] for r in admin.ledger()["refunds"]] == ["hand"]
    checks = _last_attempt(tmp_path)["checks"]
    assert checks["amount"]["passed"] and checks["grant"]["passed"]
    assert checks["eligibility"]["passed"] is False
    assert checks["eligibility"]["payment"]["refunded_total"] == 9000


def test_idem_retry_reuses_the_key_and_tier1_replays(in_process, tmp_path):
    run, admin = in_process("temporal_idem", 1, workflow_run_id="run-1", activity_id="2")
    req = {"amount": 2000, "approved_amount": 2000, "grant_id": GRANT}
    first = run(req, attempt=1)
    second = run(req, attempt=2)
    assert first["key"] == second["key"] == "run-1-2"
    assert first["replayed"] is False and second["replayed"] is True
    assert len(admin.ledger()["refunds"]) == 1
    assert [p["epoch"] for p in admin.log(path="/refunds", method="POST")] == ["1", "2"]
    with pytest.raises(ApplicationError, match="key_reused") as e:  # same key, other amount
        run({**req, "amount": 3000}, attempt=3)
    assert e.value.type == "TargetRejected" and e.value.non_retryable


@pytest.mark.parametrize("mode", MODES)
def test_happy_path_tier1_then_reset_before_decision(mode, tmp_path, target, workers, client, stub):
    """Part 1, the happy path at tier 1: one decision (2000), the approval, exactly one refund
    of 2000 in the ledger under the mode's key, one refund attempt in the attempt log.

    Part 2 (docs/design.md#scenarios S05 shape, one seed, no kill), on the same worker: a reset to the first
    workflow task re-runs the decision, and the model (EMULATED) now answers 3000; the approve
    signal {2000} is reapplied to the new run. (a) resets through the SDK, (b) through
    `temporal workflow reset --type FirstWorkflowTask`. Measured: (a) refunds again, 3000
    under the new run's key (total $50, as docs/design.md#scenarios predicts); (b) the new run's lookup by
    `{workflow_id}-refund` finds the first refund and returns it before the amount check would
    refuse 3000 != 2000 (total $20).
    """
    t, admin = target(1)
    wf_id, tq = _ids(mode)
    workers(mode, 1, t.url, tq, f"w-{mode}")
    case = f"case-{uuid.uuid4().hex[:6]}"
    run_id = client.start_refund(wf_id, tq, case=case, sleep_seconds=0.2)
    client.approve(wf_id, 2000, GRANT)
    result = client.wait_result(wf_id, timeout=60)

    assert result["decision"]["amount"] == 2000 and result["decision"]["emulated"]
    assert result["approval"] == {"amount": 2000, "grant_id": GRANT}
    assert result["run_id"] == run_id and result["refund"]["amount"] == 2000
    refunds = admin.ledger()["refunds"]
    assert [(r["amount"], r["payment"]) for r in refunds] == [(2000, PAY)]
    expected_key = f"{run_id}-2" if mode == "temporal_idem" else f"{wf_id}-refund"
    assert refunds[0]["key"] == expected_key

    (attempt,) = _refund_attempts(tmp_path, wf_id)
    assert attempt["attempt"] == 1 and attempt["outcome"] == "returned"
    assert attempt["phases"] == ["begin", "send", "response", "end"]
    assert attempt["key"] == expected_key and attempt["mode"] == mode
    if mode == "temporal_check":
        checks = attempt["checks"]
        assert checks["lookup"]["found"] is None
        assert checks["grant"]["passed"] and checks["grant"]["row"]["constraints"] == {
            "amount": {"max": 2000}
        }
        assert checks["amount"] == {"amount": 2000, "approved_amount": 2000, "passed": True}
        assert checks["eligibility"]["passed"]
        assert checks["eligibility"]["payment"]["refunded_total"] == 0
    else:
        assert attempt["checks"] == {}

    history = client.history(wf_id)
    kinds = [e["eventType"] for e in history["events"]]
    assert kinds.count("EVENT_TYPE_ACTIVITY_TASK_COMPLETED") == 2
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED" in kinds
    assert client.describe(wf_id)["status"] == "COMPLETED"

    # Part 2: reset to before the decision, with re-decision on.
    stub.configure(redecide=True)
    try:
        if mode == "temporal_idem":
            new_run = client.reset_to_before_decision(wf_id, run_id)
        else:
            new_run = reset_to_before_decision_cli(client.address, wf_id, run_id)
        assert new_run and new_run != run_id
        result = client.wait_result(wf_id, timeout=60)
    finally:
        stub.configure(redecide=False)
    assert result["run_id"] == new_run and result["decision"]["amount"] == 3000
    assert result["approval"] == {"amount": 2000, "grant_id": GRANT}  # the reapplied signal
    assert [c["amount"] for c in stub.calls(case)] == [2000, 3000]
    retry = _refund_attempts(tmp_path, wf_id)[-1]
    assert retry["run_id"] == new_run
    if mode == "temporal_idem":
        assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000, 3000]
        assert retry["key"] == f"{new_run}-2"
    else:
        assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
        assert retry["checks"]["lookup"]["found"] and "send" not in retry["phases"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_kill_after_send_tier2(mode, tmp_path, target, workers, client):
    """SIGKILL at effect_after_send (the refund landed, the activity never returned), then a
    fresh worker, at tier 2 (no dedupe, lookup available).

    Measured: (a) temporal_idem applies twice ($40): the retry is attempt 2 of the same
    activity, so it sends the same key `{run_id}-{activity_id}`, but a tier-2 target does not
    dedupe on keys; that is the baseline's known weakness, as docs/design.md#scenarios S01 predicts.
    (b) temporal_check applies once ($20): the retry's lookup by `{workflow_id}-refund` finds
    the refund and returns it without sending.
    """
    t, admin = target(2)
    wf_id, tq = _ids(mode)
    # The dead worker's sticky queue holds the workflow's next task for its sticky timeout
    # (SDK default 10 s) before the fresh worker gets it: 2 s here only to keep the test short.
    doomed = workers(mode, 2, t.url, tq, f"w-{mode}-1", kill_at="effect_after_send",
                     extra=("--sticky-timeout", "2"))  # fmt: skip
    client.start_refund(wf_id, tq, sleep_seconds=0.2)
    client.approve(wf_id, 2000, GRANT)
    assert doomed.proc.wait(timeout=60) == -9, doomed.stderr()  # a real SIGKILL
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]

    workers(mode, 2, t.url, tq, f"w-{mode}-2")
    result = client.wait_result(wf_id, timeout=60)

    refunds = admin.ledger()["refunds"]
    posts = admin.log(path="/refunds", method="POST")
    attempts = _refund_attempts(tmp_path, wf_id)
    assert [(a["worker"], a["attempt"]) for a in attempts] == [
        (f"w-{mode}-1", 1),
        (f"w-{mode}-2", 2),
    ]
    first, retry = attempts
    assert first["outcome"] == "incomplete" and first["phases"] == ["begin", "send", "response"]
    assert first["response"]["amount"] == 2000
    assert retry["outcome"] == "returned" and retry["key"] == first["key"]
    if mode == "temporal_idem":
        assert [r["amount"] for r in refunds] == [2000, 2000]  # applied twice
        assert len(posts) == 2 and posts[0]["key"] == posts[1]["key"]
        assert [p["epoch"] for p in posts] == ["1", "2"]
        assert "send" in retry["phases"] and result["refund"]["id"] == refunds[1]["id"]
    else:
        assert [r["amount"] for r in refunds] == [2000]  # applied once
        assert len(posts) == 1
        assert "send" not in retry["phases"] and retry["returned_existing"]
        assert retry["checks"]["lookup"]["found"] == refunds[0]["id"]
        assert result["refund"]["id"] == refunds[0]["id"]
    assert admin.payment(PAY)["refunded_total"] == sum(r["amount"] for r in refunds)


def test_worker_without_a_server_exits_with_a_message(tmp_path):
    from world.temporal_server import free_port

    cmd = [sys.executable, "-m", "baselines.worker", "--address", f"127.0.0.1:{free_port()}",
           "--task-queue", "tq", "--mode", "temporal_idem", "--target-url", "http://127.0.0.1:9",
           "--payment", PAY, "--tier", "1", "--model-url", "http://127.0.0.1:9", "--id", "w",
           "--connect-timeout", "1"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 2 and "cannot reach the Temporal server" in out.stderr
    assert out.stdout == ""
