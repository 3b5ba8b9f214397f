"""End to end: an agent refunds a customer, a person approves, the worker dies after the send.

    python runtime/examples/refund_agent.py [--dsn DSN] [--workdir DIR]

The workflow is runtime/examples/refund_flows.py (``refund_agent``): its refund goes through the
library's own ``interlock_runtime.HttpTarget``. The world it talks to is the repository's test
world: the local payment target (world/target.py, standing in for Stripe: EMULATED) and the
model stub (world/model_stub.py, standing in for Claude: EMULATED). What it does, with real
processes and real signals:

1. starts the local payment target (tier 1: it dedupes Idempotency-Key like Stripe) with payment
   pay_881 of 10000 cents, and the model stub (EMULATED: Claude cannot be reached from here, so
   the official anthropic SDK talks to a scripted stub in the Messages API shape);
2. starts worker W1 (``interlock worker --module refund_flows``, runtime/examples on
   PYTHONPATH) with ILR_KILL_AT=effect_after_send: it will SIGKILL itself right after the
   target answered the refund, before the runtime journaled COMMITTED;
3. starts the refund workflow; the model decides the amount (2000) through the anthropic SDK;
4. a person approves: ``interlock approve WF --by alice`` (run here as
   ``python -m interlock_runtime.cli.approve``), which calls the Runtime client's
   ``approve(..., by="alice")``: a grant bound to exactly that payload and to the facts the
   approver saw (the premises recorded with the model's decision);
5. W1 sends the refund and dies (exit -9); worker W2 takes over after the lease expires, waits
   out send_deadline + settle_margin, resends with the same idempotency key, and the target
   replays the stored refund: COMMITTED_BY_RETRY;
6. ``interlock receipt`` writes the effect's signed receipt and ``interlock verify`` checks it:
   one refund, happened once, authorized when fired, premises held.

The same case through the Stripe adapter (EMULATED: the official stripe SDK against the local
target's Stripe-compatible subset) belongs to the Prove harness, not to this example:
prove/stripe_flows.py and prove/tests/test_stripe_s01.py. Without ``--dsn`` the example creates a throwaway database
on the project's own Postgres (or the server ILR_DSN names) and drops it at the end; with
``--dsn`` it uses that database. Exit status 0 when every check held. It imports nothing from
prove/.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import refund_flows  # this folder's workflow module (the script's folder is on sys.path)

from interlock_runtime import Runtime, testing
from world.model_stub import ModelStub
from world.target import Target
from world.target_client import TargetAdmin

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

PAYMENT = "pay_881"
WF = "refund-case-4471"
KEY_ENV = "ILR_EXAMPLE_RECEIPT_KEY"


def say(text: str = "") -> None:
    print(text, flush=True)


def interlock(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run the `interlock` CLI (as `python -m interlock_runtime.cli`, the same entry point)."""
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


class Workers:
    """Worker subprocesses (`python -m interlock_runtime.cli.worker`), killed at the end."""

    def __init__(self, dsn: str, module: str, log_dir: Path) -> None:
        self.dsn, self.module, self.log_dir = dsn, module, log_dir
        self.procs: list[subprocess.Popen] = []

    def start(self, worker_id: str, kill_at: str | None = None) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k not in ("ILR_KILL_AT", "ILR_STOP_AT")}
        paths = (str(HERE), str(REPO), env.get("PYTHONPATH"))  # refund_flows; world/
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        if kill_at:
            env["ILR_KILL_AT"] = kill_at
        flags = ["--module", self.module, "--id", worker_id, "--lease-ttl", "1.5", "--poll", "0.2"]
        prefix = f"ILR_KILL_AT={kill_at} " if kill_at else ""
        say(f"$ {prefix}interlock worker {' '.join(flags)} &")
        log = open(self.log_dir / f"{worker_id}.events.jsonl", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "interlock_runtime.cli.worker", "--dsn", self.dsn, *flags],
            env=env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def wait_for(pred, timeout: float, what: str, dying: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if dying is not None and dying.poll() is not None:
            raise SystemExit(f"worker exited ({dying.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout}s waiting for {what}")


def run(dsn: str, workdir: Path) -> int:
    workflow, module = refund_flows.refund_agent, "refund_flows"
    key_env = dict(os.environ, **{KEY_ENV: secrets.token_hex(16)})  # the receipt's HMAC key
    workers = Workers(dsn, module, workdir)
    with Target(1, db=str(workdir / "ledger.sqlite")) as target, ModelStub() as stub:
        admin = TargetAdmin(target.url)
        admin.create_payment(PAYMENT, 10000)
        say(f"target: {target.url} (tier 1, dedupes Idempotency-Key), payment {PAYMENT} of 10000")
        say(f"model:  {stub.url} (EMULATED: scripted stub in the Anthropic Messages shape)")
        http = refund_flows.refund_target({"target_url": target.url, "payment": PAYMENT})
        say(f"refund: through {http!r} (Idempotency-Key, X-ILR-Worker / X-ILR-Epoch headers)")
        case = {"id": "case-4471", "target_url": target.url, "payment": PAYMENT,
                "model_url": stub.url, "send_timeout": 2.5, "settle_margin": 1.0,
                "sleep_seconds": 0.2}  # fmt: skip
        try:
            with Runtime(dsn) as rt:
                say("\n# 1. a worker that will die right after the refund is sent")
                w1 = workers.start("W1", kill_at="effect_after_send")
                say("\n# 2. the agent's workflow: the model decides the amount")
                rt.start(workflow, WF, case)
                say(f"$ interlock start {workflow.__name__} {WF} --input '{{...}}'")
                wait_for(lambda: (rt.describe(WF)["waiting"] or {}).get("signal") == "approve",
                         60, "the model's decision", dying=w1)  # fmt: skip
                decided = rt.describe(WF)["steps"][0]["output"]
                amount = decided["response"]["amount"]
                say(f"model decided: refund {amount} cents (model {decided['model']}, "
                    f"EMULATED); premises seen: {json.dumps(decided['premises'])}")  # fmt: skip

                say("\n# 3. a person approves exactly that refund")
                # `interlock approve` (interlock_runtime.cli.approve): Runtime.approve with the
                # decision's premises as the facts alice saw, by="alice"
                # the workflow waits in ctx.wait_approval(proposal): approving approves that
                say(f"$ interlock approve {WF} --by alice")
                got = subprocess.run([sys.executable, "-m", "interlock_runtime.cli.approve", WF,
                                      "--by", "alice", "--dsn", dsn],
                                     capture_output=True, text=True, timeout=60)  # fmt: skip
                if got.returncode != 0:
                    say(f"FAIL: interlock approve: {got.stderr}")
                    return 1
                say(got.stdout.rstrip())

                say("\n# 4. the worker sends the refund and is SIGKILLed before recording it")
                code = w1.wait(timeout=60)
                if code != -signal.SIGKILL:
                    say(f"FAIL: worker W1 exited {code}, expected SIGKILL")
                    return 1
                landed = admin.ledger()["refunds"]
                state = rt.effects(WF)[0]["state"]
                say(f"worker W1 died after the send (exit {code}); the target's ledger already "
                    f"holds {len(landed)} refund(s); the runtime's effect is still {state}")  # fmt: skip

                say("\n# 5. another worker takes over")
                workers.start("W2")
                out = rt.result(WF, timeout=120)
                eid = out["effect_id"]
                say(f"workflow {WF}: {out['status']} (effect {eid})")
        finally:
            workers.close()

        say("\n# 6. the receipt, and its verification")
        got = interlock("receipt", eid, "--dsn", dsn, "--key-env", KEY_ENV, env=key_env)
        if got.returncode != 0:
            say(f"FAIL: interlock receipt: {got.stderr}")
            return 1
        receipt = workdir / "receipt.json"
        receipt.write_text(got.stdout)
        say(f"$ interlock receipt {eid} --key-env {KEY_ENV} > {receipt.name}")
        checked = interlock("verify", str(receipt), "--key-env", KEY_ENV, env=key_env)
        say(f"$ interlock verify {receipt.name} --key-env {KEY_ENV}")
        say(checked.stdout.rstrip())
        v = json.loads(interlock("verify", str(receipt), "--key-env", KEY_ENV, "--json",
                                 env=key_env).stdout)  # fmt: skip
        refunds = admin.ledger()["refunds"]
        posts = [e for e in admin.log() if e["method"] == "POST" and "refunds" in e["path"]]

    ours = [r for r in refunds if r.get("key") == eid]  # the Idempotency-Key it was sent with
    checks = {
        "one refund": len(refunds) == 1 and len(ours) == 1 and ours[0]["amount"] == amount,
        "committed by retry": out["status"] == "COMMITTED_BY_RETRY",
        "happened once": v.get("happened") is True and v.get("happened_once") is True,
        "authorized when fired": v.get("authorized_when_fired") is True,
        "premises held": v.get("assumptions_held") is True,
        "receipt valid and signed": v.get("valid") is True and v.get("signed") is True,
    }
    say("\n# result")
    say(f"ledger: {len(refunds)} refund(s): "
        + ", ".join(f"{r['id']} {r['amount']} on {r['payment']}" for r in refunds)
        + f"; sends seen by the target: {', '.join(str(p['worker']) for p in posts)}"
        + f" (answered with {sorted({(p['response'] or {}).get('id') for p in posts} - {None})})")  # fmt: skip
    for name, ok in checks.items():
        say(f"{name + ':':<26}{'yes' if ok else 'NO'}")
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="use this database (default: a throwaway one, dropped after)")
    ap.add_argument("--workdir", help="where the ledger, worker logs and receipt go")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ilr-example-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.dsn:
            return run(args.dsn, workdir)
        admin = testing.admin_dsn()
        with testing.template_database(admin) as tpl, testing.fresh_database(admin, tpl) as dsn:
            return run(dsn, workdir)


if __name__ == "__main__":
    sys.exit(main())
