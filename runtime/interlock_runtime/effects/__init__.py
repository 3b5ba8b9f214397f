"""Gated effects (docs/design.md#send-deadline, 5.7): T_dispatch, the watched send, T_commit, recovery by tier.

An effect is sent at most once per effect_id at tiers 1 and 2 (assuming A1, A2), only under a
live grant, only while its premises hold, and every decision is journaled in a hash chain:

    submit:   premises read -> T_dispatch (fenced: bind payload, cancel, grant FOR SHARE, local
              premises, AUTHORIZED + DISPATCHED, send_deadline) -> watched send -> T_commit
              (fenced: COMMITTED + the step row) | late result (unfenced CAS) on a lost fence
    recovery: nothing before send_deadline + settle_margin; then by effective tier: re-check
              grant and premises, query when the tier allows, and resend, commit, refuse or
              mark AMBIGUOUS in T_resolve (fenced).

Assumptions (stated here, in the model and in every result file):
A1 no process pause across the local send deadline (the watchdog acts only while we run);
A2 the target settles any request within settle_margin after send_deadline;
A3 external premises are true as of their read; only local SQL premises are atomic with dispatch;
A4 durable commits; A5 database and worker clocks differ in rate by less than settle_margin.

This package's entry is ctx.effect's (run_effect, or gate for a shell that drives it) and
orphan recovery's (resolve_orphan); it re-exports the gate's public names. The gate, one
concern per module:

    results         EffectResult, EffectRefused: what ctx.effect returns
    spec            TargetSpec, check_target, target_action: what a target declares
    call            EffectCall (one call's state), its hash chain and step row
    authority       the grant and local premise checks as the journal records them
    dispatch        the submit path: T_dispatch
    send            the watched send (the watchdog) and the drivers of the gate's requests
    commit          T_commit, the late result, definite failure, the settle audit
    recovery        T_resolve: the recovery table
    breaker         the circuit breaker
    postconditions  verified completion
    ../run_port     RunPort: all the gate uses of a workflow run (from the run engine)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import db, journal, stored
from ..errors import InvalidInput
from ..run_port import RunPort
from ..telemetry import effect_span
from .call import EffectCall
from .dispatch import submit
from .recovery import recover
from .results import STATUSES, EffectRefused, EffectResult
from .send import MIN_SEND_BUDGET, WATCHDOG_EXIT, Io, drive
from .spec import (
    DEFAULT_DEDUP_MARGIN,
    TARGET_DEFAULTS,
    TargetSpec,
    check_target,
    target_action,
)

__all__ = [
    "DEFAULT_DEDUP_MARGIN",
    "MIN_SEND_BUDGET",
    "STATUSES",
    "TARGET_DEFAULTS",
    "WATCHDOG_EXIT",
    "EffectCall",
    "EffectRefused",
    "EffectResult",
    "TargetSpec",
    "check_target",
    "gate",
    "Prepared",
    "prepare",
    "resolve_orphan",
    "run_effect",
    "run_prepared",
    "target_action",
]

_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def run_effect(port: RunPort, target: Any, key: str, payload: Any, premises: Any,
               grant: str, name: str | None = None, local_premises: Any = (),
               compensation: bool = False, raise_on_refusal: bool = False,
               action: str | None = None, decision: Any = None,
               postcondition: Any = None) -> EffectResult:  # fmt: skip
    """ctx.effect: validate, replay, or run the call at the frontier."""
    call = prepare(target, key, payload, premises, grant, name=name,
                   local_premises=local_premises, action=action,
                   postcondition=postcondition)  # fmt: skip
    seq, row = port.next_call("effect", call.name, call.fingerprint)
    return run_prepared(port, call, seq, row, compensation=compensation,
                        raise_on_refusal=raise_on_refusal, decision=decision)  # fmt: skip


@dataclass(frozen=True)
class Prepared:
    """One ctx.effect call checked and identified, before it takes its place in the replay
    (the async context takes the place when the call is made: docs/async.md)."""

    target: Any
    spec: TargetSpec
    name: str
    eid: str
    payload: Any
    ph: str
    fingerprint: str
    premises: Any
    grant: str
    action: str
    local_premises: list[tuple[Any, Any]]
    postcondition: Any


def prepare(target: Any, key: str, payload: Any, premises: Any, grant: str,
            name: str | None = None, local_premises: Any = (), action: str | None = None,
            postcondition: Any = None) -> Prepared:  # fmt: skip
    """Check an effect call's arguments (InvalidInput before anything is written) and compute
    its identity: the step name, the effect id and the fingerprint."""
    spec = check_target(target)
    if postcondition is not None and not callable(postcondition):
        raise InvalidInput(f"postcondition {postcondition!r} is not callable: pass a function "
                           "(target, effect_id, payload) -> bool that reads the target back")  # fmt: skip
    if not isinstance(key, str) or not key or len(key) > 500:
        raise InvalidInput(f"effect key {key!r}: use a non-empty string of at most 500 characters")
    try:
        stored.to_json_text(payload, "the effect payload")
        stored.to_json_text(premises, "the effect premises")
    except TypeError as exc:
        raise InvalidInput(str(exc)) from None
    local_premises = [(fn, args) for fn, args in local_premises]
    for fn, _ in local_premises:
        if not isinstance(fn, str) or not _FUNCTION.match(fn):
            raise InvalidInput(f"local premise {fn!r} is not a SQL function name (schema.name)")
    eid = journal.effect_id_for(key)  # the key is hashed here only
    ph = journal.payload_hash(payload)
    return Prepared(target, spec, name or f"effect:{key}", eid, payload, ph,
                    journal.fingerprint(eid, ph), premises, grant,
                    action or target_action(target, spec), local_premises, postcondition)  # fmt: skip


def run_prepared(port: RunPort, p: Prepared, seq: int, row: db.Row | None, *,
                 compensation: bool = False, raise_on_refusal: bool = False,
                 decision: Any = None) -> EffectResult:  # fmt: skip
    """A prepared call at its place `seq`: the recorded result (row), or the gate at the
    frontier, its requests served in this thread (effects.send.drive)."""
    return drive(gate(port, p, seq, row, compensation=compensation,
                      raise_on_refusal=raise_on_refusal, decision=decision))  # fmt: skip


def gate(port: RunPort, p: Prepared, seq: int, row: db.Row | None, *,
         compensation: bool = False, raise_on_refusal: bool = False,
         decision: Any = None) -> Io[EffectResult]:  # fmt: skip
    """run_prepared without a driver: the asyncio worker drives it (effects.send.drive_async)."""
    if row is not None:
        out = EffectResult(**row["output"])
    else:
        port.frontier()
        if port.conn.execute(db.query("get_grant"), {"grant": p.grant}).fetchone() is None:
            raise InvalidInput(
                f"unknown grant {p.grant!r}: create it with rt.grant() or rt.approve()"
            )
        call = EffectCall(port, seq, p.name, p.target, p.spec, eid=p.eid, payload=p.payload,
                          ph=p.ph, fingerprint=p.fingerprint, premises=p.premises,
                          grant=p.grant, action=p.action, local_premises=p.local_premises,
                          compensation=compensation, decision=decision,
                          postcondition=p.postcondition)  # fmt: skip
        out = yield from _run(call)
    if raise_on_refusal and out.refused:
        raise EffectRefused(out)
    return out


@effect_span  # interlock.effect, counted by outcome (docs/observability.md)
def _run(call: EffectCall) -> Io[EffectResult]:
    """The call at the frontier: recover its effect's open send, else submit."""
    while True:
        row = call.conn.execute(db.query("get_effect"), {"eid": call.eid}).fetchone()
        if row is not None and row["state"] == "dispatched":
            outcome = yield from recover(call, row)
        else:
            outcome = yield from submit(call)
        if outcome is not None:
            return outcome
        # None: an open send was resolved for a caller offering another payload (B13):
        # go round again and be refused as conflicting_payload.


def resolve_orphan(port: RunPort, target: Any, effect_row: db.Row) -> EffectResult | None:
    """rt.recover_orphans: run the recovery path for an effect whose workflow will never run
    again, under a synthetic claim; writes the journal and the effects row only."""
    spec = check_target(target)
    call = EffectCall(port, 0, "$orphan", target, spec, eid=effect_row["effect_id"],
                      payload=effect_row["payload"], ph=effect_row["payload_hash"],
                      fingerprint=None, premises=None, grant=effect_row["grant_id"],
                      action=target_action(target, spec), records_step=False)  # fmt: skip
    return drive(recover(call, effect_row))
