"""`interlock approve WF --by WHO`: a person approves what a workflow proposes.

    interlock approve WF --by WHO [--payload JSON] [--action A] [--decision NAME]
                         [--expires-in SECONDS] [--dsn DSN] [--json]

The approval is ``Runtime.approve``: in one transaction, a grant bound to exactly this payload
(its hash) and to the facts the approver saw, plus the ``approve`` signal that wakes the
workflow. The payload is ``--payload`` verbatim, else the one the workflow proposes while it
waits (``ctx.wait_approval(proposal)``), else the ``payload`` of its latest decision's answer.
The facts are the premises recorded with the workflow's latest ``ctx.decide`` step (or the one
named by ``--decision``): what the model saw is what the person approves against; a workflow
that made no decision is approved against no recorded facts. ``--action`` narrows the grant to
one action; without it the grant covers this exact payload whatever the effect's action. A
payload other than the one the workflow then offers is refused at the effect (the grant covers
exactly one payload hash), so a wrong guess here fails closed.

Exit status: 0 approved, 1 refused by the runtime (e.g. the workflow already ended), 2 bad input
or the database unreachable (docs/errors.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import validate
from ..cli_parsing import Parser, checked
from ..errors import ENVIRONMENT_ERRORS, InterlockError
from ..views import decided, proposed_payload


def approve(rt: Any, wf_id: str, *, by: str, payload: Any = None, action: str | None = None,
            decision: str | None = None,
            expires_in: float | None = None) -> tuple[str, Any, Any]:  # fmt: skip
    """Approve what a workflow proposes (or `payload`). Returns (grant id, payload, facts)."""
    wf = rt.describe(wf_id)
    d = decided(wf, decision)
    if payload is None:
        payload = proposed_payload(wf, d)
    facts = d.get("premises") if d else None
    grant = rt.approve(wf_id, payload, facts, by=by, expires_in=expires_in, action=action)
    return grant, payload, facts


def _expires(text: str) -> float | None:
    return validate.seconds(text, "the value", allow_zero=False, from_text=True)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="interlock approve", description=__doc__)
    p.add_argument("workflow_id", help="the workflow that waits for approval")
    p.add_argument("--by", required=True, help="who approves (recorded in the grant)")
    p.add_argument("--payload", help="the exact payload as JSON (default: what the workflow "
                   "proposes)")  # fmt: skip
    p.add_argument("--action", help="allow only this action (default: any action, this payload)")
    p.add_argument("--decision", help="the decide step's name (default: the latest)")
    p.add_argument("--expires-in", type=checked(_expires), metavar="SECONDS",
                   help="the grant expires after this many seconds (default: until revoked)")  # fmt: skip
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
    from .. import local_postgres
    from ..runtime import Runtime

    try:
        payload = None if args.payload is None else validate.parse_json(args.payload, "--payload")
        validate.identifier(args.workflow_id, "workflow id")
        validate.name(args.by, "--by")
        validate.optional_name(args.action, "--action")
        validate.optional_name(args.decision, "--decision")
        with Runtime(args.dsn or local_postgres.dsn()) as rt:
            grant, payload, facts = approve(
                rt, args.workflow_id, by=args.by, payload=payload, action=args.action,
                decision=args.decision, expires_in=args.expires_in,
            )  # fmt: skip
    except ValueError as exc:  # bad input, InvalidInput included
        print(f"interlock approve: {exc}; nothing was approved", file=sys.stderr)
        return 2
    except ENVIRONMENT_ERRORS as exc:  # no database, a role without the privilege, a conflict
        print(f"interlock approve: {' '.join(str(exc).split())}", file=sys.stderr)
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
