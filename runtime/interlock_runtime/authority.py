"""Authority: what a grant allows, and why a send was refused.

A grant names a principal, an action (or none: an approval binds a payload, whatever the
action), optional constraints on the payload, and optionally one exact payload (an approval
binds the hash of the payload a person saw). The runtime knows no domain: the application
declares its constraints as bounds on named payload fields, for example

    rt.grant("support-bot", "refund", constraints={"amount": {"max": 5000},
                                                   "currency": {"in": ["usd", "eur"]}}, by="ops")

A field is a dotted path into the payload ("customer.tier"). The bounds are

    min, max     numbers: the field must be a number within them (inclusive)
    in           a list: the field must equal one of its values
    equals       any JSON value: the field must equal it

The dispatch transaction checks the grant (authorize) and records what it read; a receipt's
verifier re-derives the same verdict from that record (receipts/ calls
constraint_violations too). Every refusal names its reasons, each starting with a code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import InvalidInput

OPERATORS = ("min", "max", "in", "equals")
_MISSING = object()


class Refusal:
    """Reason codes: the first word of every refusal reason."""

    NO_GRANT = "no_grant"
    REVOKED = "revoked"
    EXPIRED = "expired"
    ACTION = "action_mismatch"
    CONSTRAINT = "constraint"
    PAYLOAD = "payload_not_approved"
    PRINCIPAL = "principal_mismatch"


WORKFLOW_PRINCIPAL = "workflow:"  # an approval's principal: "workflow:<id>", that run alone


def validate_constraints(constraints: Any) -> dict[str, dict[str, Any]] | None:
    """The constraints as stored, or InvalidInput saying what is wrong with them."""
    if constraints is None:
        return None
    if not isinstance(constraints, Mapping) or not constraints:
        raise InvalidInput("constraints must be a non-empty object {field: {bound: value}}, "
                           f"not {type(constraints).__name__}")  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for field, bounds in constraints.items():
        if not isinstance(field, str) or not field or any(not p for p in field.split(".")):
            raise InvalidInput(f"constraint field {field!r}: give a payload field name or a "
                               "dotted path like 'customer.id'")  # fmt: skip
        if not isinstance(bounds, Mapping) or not bounds:
            raise InvalidInput(f"constraint on {field!r}: give bounds such as {{'max': 5000}}")
        unknown = sorted(set(bounds) - set(OPERATORS))
        if unknown:
            raise InvalidInput(f"constraint on {field!r}: unknown bound(s) {unknown}; "
                               f"use {', '.join(OPERATORS)}")  # fmt: skip
        for op in ("min", "max"):
            if op in bounds and not _finite_number(bounds[op]):
                raise InvalidInput(f"constraint on {field!r}: {op} must be a finite number, "
                                   f"not {bounds[op]!r}")  # fmt: skip
        if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
            raise InvalidInput(f"constraint on {field!r}: min {bounds['min']} is above "
                               f"max {bounds['max']}: nothing could pass")  # fmt: skip
        if "in" in bounds and (not isinstance(bounds["in"], list) or not bounds["in"]):
            raise InvalidInput(f"constraint on {field!r}: 'in' must be a non-empty list")
        out[field] = dict(bounds)
    return out


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def field_value(payload: Any, path: str) -> Any:
    """The payload's value at a dotted path, or _MISSING."""
    value = payload
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def constraint_violations(constraints: Any, payload: Any) -> list[str]:
    """One reason per bound the payload breaks (empty: it satisfies every constraint)."""
    out: list[str] = []
    for field, bounds in (constraints or {}).items():
        value = field_value(payload, field)
        if value is _MISSING:
            out.append(
                f"{Refusal.CONSTRAINT}: the payload has no {field!r}, which the grant bounds"
            )
            continue
        for op in ("min", "max"):
            if op not in bounds:
                continue
            if not _finite_number(value):
                out.append(f"{Refusal.CONSTRAINT}: {field} is {value!r}, not a number to compare "
                           f"with {op} {bounds[op]}")  # fmt: skip
            elif (op == "min" and value < bounds[op]) or (op == "max" and value > bounds[op]):
                word = "below the grant's min" if op == "min" else "above the grant's max"
                out.append(f"{Refusal.CONSTRAINT}: {field} {value} is {word} {bounds[op]}")
        if "in" in bounds and value not in bounds["in"]:
            out.append(f"{Refusal.CONSTRAINT}: {field} {value!r} is not one of {bounds['in']!r}")
        if "equals" in bounds and value != bounds["equals"]:
            out.append(f"{Refusal.CONSTRAINT}: {field} {value!r} is not {bounds['equals']!r}")
    return out


def principal_reason(principal: Any, grant_id: str, workflow_id: str | None) -> list[str]:
    """A grant given to one workflow ("workflow:<id>", what an approval is) covers sends by
    that workflow only; a policy grant's principal is the application's name for who may act,
    which the runtime does not interpret."""
    if workflow_id is None or not isinstance(principal, str):
        return []
    if principal.startswith(WORKFLOW_PRINCIPAL) and principal != WORKFLOW_PRINCIPAL + workflow_id:
        return [f"{Refusal.PRINCIPAL}: grant {grant_id!r} was given to {principal}, and this "
                f"send is by workflow {workflow_id!r} (approve this workflow's own proposal)"]  # fmt: skip
    return []


def refusal_reasons(grant: Mapping[str, Any] | None, grant_id: str, action: str,
                    payload: Any, payload_hash: str,
                    workflow_id: str | None = None) -> list[str]:  # fmt: skip
    """Why `grant` (as ilr.lock_grant_for_share returns it in the dispatch transaction, with
    `live` judged by the database clock) does not cover this send by `workflow_id`; empty
    when it does."""
    if grant is None:
        return [f"{Refusal.NO_GRANT}: there is no grant {grant_id!r}"]
    out = principal_reason(grant.get("principal"), grant_id, workflow_id)
    if grant["revoked_at"] is not None:
        out.append(f"{Refusal.REVOKED}: grant {grant_id!r} was revoked at "
                   f"{grant['revoked_at'].isoformat()}")  # fmt: skip
    elif not grant["live"]:
        expiry = grant["expires_at"].isoformat() if grant["expires_at"] else "?"
        out.append(f"{Refusal.EXPIRED}: grant {grant_id!r} expired at {expiry}")
    if grant["action"] is not None and grant["action"] != action:
        out.append(f"{Refusal.ACTION}: grant {grant_id!r} allows action {grant['action']!r}, "
                   f"this effect is {action!r} (pass action= to ctx.effect, or grant that action)")  # fmt: skip
    out += constraint_violations(grant.get("constraints"), payload)
    if grant["payload_hash"] is not None and grant["payload_hash"] != payload_hash:
        out.append(f"{Refusal.PAYLOAD}: grant {grant_id!r} approves one exact payload and this "
                   "is another (approve the payload the workflow offers)")  # fmt: skip
    return out
