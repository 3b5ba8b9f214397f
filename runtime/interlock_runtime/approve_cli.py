"""`interlock approve WF --amount N --by WHO`: a person approves the refund a workflow decided.

    interlock approve WF --amount N --by WHO [--payment ID] [--payload JSON] [--decision NAME]
                         [--expires-in SECONDS] [--dsn DSN]

The approval is ``Runtime.approve``: in one transaction, a grant bound to exactly this payload
(its hash) and to the facts the approver saw, plus the ``approve`` signal that wakes the
workflow. The facts are the premises recorded with the workflow's decision (the latest
``ctx.decide`` step, or the one named by ``--decision``): what the model saw is what the person
approves against. The payload is ``{"payment", "amount"}`` (the refund workflows' shape; the
payment defaults to the one in those premises, else the workflow input's), or ``--payload``
verbatim for other shapes. A payload other than the one the workflow then offers is refused at
the effect (the grant covers exactly one payload hash), so a wrong guess here fails closed.

Exit status: 0 approved, 1 refused by the runtime (e.g. the workflow already ended), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .errors import InterlockError


def decided(wf: dict, name: str | None = None) -> dict:
    """The latest recorded decision of a described workflow (optionally by step name)."""
    steps = [s for s in wf.get("steps") or [] if s.get("kind") == "decide"
             and (name is None or s.get("name") == name) and s.get("output") is not None]  # fmt: skip
    if not steps:
        which = f" named {name!r}" if name else ""
        raise ValueError(f"workflow {wf.get('id')!r} has no recorded decision{which} yet: "
                         "approve after the model has decided (interlock describe shows steps)")  # fmt: skip
    return steps[-1]["output"]


def approval_payload(wf: dict, decision: dict, amount: int, payment: str | None) -> dict:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise ValueError(f"--amount must be a positive integer (cents), not {amount!r}")
    premises = decision.get("premises") if isinstance(decision.get("premises"), dict) else {}
    inp = wf.get("input") if isinstance(wf.get("input"), dict) else {}
    payment = payment or premises.get("payment") or inp.get("payment")
    if not payment:
        raise ValueError("no payment in the decision's premises or the input: pass --payment")
    return {"payment": payment, "amount": amount}


def approve(rt: Any, wf_id: str, *, by: str, amount: int | None = None,
            payment: str | None = None, payload: Any = None, decision: str | None = None,
            expires_in: float | None = None) -> tuple[str, Any, Any]:  # fmt: skip
    """Approve what a workflow decided. Returns (grant id, payload, facts seen)."""
    wf = rt.describe(wf_id)
    d = decided(wf, decision)
    if payload is None:
        if amount is None:
            raise ValueError("give --amount (or --payload)")
        payload = approval_payload(wf, d, amount, payment)
    facts = d.get("premises")
    grant = rt.approve(wf_id, payload, facts, by=by, expires_in=expires_in)
    return grant, payload, facts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="interlock approve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("workflow_id")
    p.add_argument("--amount", type=int, help="the approved amount in cents")
    p.add_argument("--by", required=True, help="who approves (recorded in the grant)")
    p.add_argument("--payment", help="default: the payment in the decision's premises")
    p.add_argument("--payload", help="the exact payload as JSON (instead of --amount)")
    p.add_argument("--decision", help="the decide step's name (default: the latest)")
    p.add_argument("--expires-in", type=float, help="the grant expires after this many seconds")
    p.add_argument(
        "--dsn", default=None, help="Postgres DSN (default: ILR_DSN or the local cluster)"
    )
    p.add_argument("--json", action="store_true", help="print the grant, payload and facts as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        payload = None if args.payload is None else json.loads(args.payload)
    except json.JSONDecodeError as exc:
        print(f"interlock approve: --payload is not JSON ({exc}); nothing was approved",
              file=sys.stderr)  # fmt: skip
        return 2
    from . import local_postgres
    from .runtime import Runtime

    try:
        with Runtime(args.dsn or local_postgres.dsn()) as rt:
            grant, payload, facts = approve(
                rt, args.workflow_id, by=args.by, amount=args.amount, payment=args.payment,
                payload=payload, decision=args.decision, expires_in=args.expires_in,
            )  # fmt: skip
    except ValueError as exc:  # bad input, InvalidInput included
        print(f"interlock approve: {exc}; nothing was approved", file=sys.stderr)
        return 2
    except InterlockError as exc:
        print(f"interlock approve: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"grant_id": grant, "payload": payload, "facts_seen": facts},
                         indent=2, default=str))  # fmt: skip
    else:
        print(f"approved {json.dumps(payload)} for {args.workflow_id} by {args.by}: "
              f"grant {grant}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
