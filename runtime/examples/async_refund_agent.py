"""The refund agent with `async def`: the model decides, a person approves, the worker dies
after the send, another finishes the run.

    python runtime/examples/async_refund_agent.py [--dsn DSN] [--workdir DIR]

runtime/examples/refund_agent.py, with its workflow written as a coroutine
(runtime/examples/async_refund_flows.py, ``async_refund_agent``) and served by the asyncio
worker (docs/async.md): ``await ctx.step`` twice at once under ``asyncio.gather``, ``await
ctx.decide`` with ``anthropic.AsyncAnthropic``, ``await ctx.wait_approval``, ``await
ctx.effect``, ``await ctx.sleep``. The world is the repository's test world: the local payment
target (world/target.py, standing in for Stripe: EMULATED) and the model stub
(world/model_stub.py, standing in for Claude: EMULATED). What it does, with real processes and
real signals:

1. starts the payment target (tier 1: it dedupes Idempotency-Key like Stripe) with payment
   pay_881 of 10000 cents, and the model stub;
2. starts worker W1 (``interlock worker --module async_refund_flows``: every workflow there is
   ``async def``, so it is the asyncio worker) with ILR_KILL_AT=effect_after_send: it SIGKILLs
   itself right after the target answered the refund, before the runtime journaled COMMITTED;
3. starts the workflow: it reads the payment and its refunds at once, and the model decides the
   amount (2000);
4. a person approves: ``interlock approve WF --by alice``;
5. W1 sends the refund and dies (exit -9); W2 takes over after the lease expires, waits out
   send_deadline + settle_margin, resends with the same idempotency key, and the target replays
   the stored refund: COMMITTED_BY_RETRY;
6. ``interlock receipt`` and ``interlock verify``: one refund, happened once, authorized when
   fired, premises held; and the target's own ledger (not the runtime's rows) holds one refund.

Without ``--dsn`` it creates a throwaway database on the project's Postgres (or the server
ILR_DSN names) and drops it at the end. Exit status 0 when every check held.
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
from pathlib import Path

import async_refund_flows  # this folder's modules (the script's folder is on sys.path)
from refund_agent import KEY_ENV, PAYMENT, Workers, interlock, say, wait_for

from interlock_runtime import Runtime, testing
from world.model_stub import ModelStub
from world.target import Target
from world.target_client import TargetAdmin

WF = "async-refund-case-4471"


def run(dsn: str, workdir: Path) -> int:
    workflow, module = async_refund_flows.async_refund_agent, "async_refund_flows"
    key_env = dict(os.environ, **{KEY_ENV: secrets.token_hex(16)})  # the receipt's HMAC key
    workers = Workers(dsn, module, workdir)
    with Target(1, db=str(workdir / "ledger.sqlite")) as target, ModelStub() as stub:
        admin = TargetAdmin(target.url)
        admin.create_payment(PAYMENT, 10000)
        say(f"target: {target.url} (tier 1, dedupes Idempotency-Key), payment {PAYMENT} of 10000")
        say(f"model:  {stub.url} (EMULATED: scripted stub in the Anthropic Messages shape, "
            "called with anthropic.AsyncAnthropic)")  # fmt: skip
        http = async_refund_flows.refund_target({"target_url": target.url, "payment": PAYMENT})
        say(f"refund: through {http!r}")
        case = {"id": "case-4471", "target_url": target.url, "payment": PAYMENT,
                "model_url": stub.url, "send_timeout": 1.5, "settle_margin": 0.5,
                "sleep_seconds": 0.1}  # fmt: skip
        try:
            with Runtime(dsn) as rt:
                say("\n# 1. an asyncio worker that will die right after the refund is sent")
                w1 = workers.start("W1", kill_at="effect_after_send")
                say("\n# 2. the agent's workflow: two reads at once, then the model decides")
                rt.start(workflow, WF, case)
                say(f"$ interlock start {workflow.__name__} {WF} --input '{{...}}'")
                wait_for(lambda: (rt.describe(WF)["waiting"] or {}).get("signal") == "approve",
                         60, "the model's decision", dying=w1)  # fmt: skip
                steps = {s["name"]: s for s in rt.describe(WF)["steps"]}
                say(f"read at once: payment paid {steps['payment']['output']['paid']}, "
                    f"{len(steps['refunds']['output'])} earlier refund(s) "
                    f"(steps {steps['payment']['seq']} and {steps['refunds']['seq']})")  # fmt: skip
                decided = steps["pick_amount"]["output"]
                amount = decided["response"]["amount"]
                say(f"model decided: refund {amount} cents (model {decided['model']}, "
                    f"EMULATED); premises seen: {json.dumps(decided['premises'])}")  # fmt: skip

                say("\n# 3. a person approves exactly that refund")
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

                say("\n# 5. another asyncio worker takes over")
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
        refunds = admin.ledger()["refunds"]  # the target's own ledger: ground truth
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
        + f"; sends seen by the target: {', '.join(str(p['worker']) for p in posts)}")  # fmt: skip
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
