"""Verified completion for effects: a post-condition reads the target back after a send (or
after a recovery lookup found it); a failing one makes the effect AMBIGUOUS, never success."""

from __future__ import annotations

from typing import Any

from .call import EffectCall
from .results import EffectResult
from .send import Io, target_read


def post_holds(call: EffectCall, payload: Any) -> Io[tuple[bool | None, str]]:
    """Evaluate the post-condition by reading the target back (outside any transaction).
    None when there is none; a raising post-condition fails closed."""
    if call.postcondition is None:
        return None, ""
    try:
        ok = yield from target_read(call.postcondition, call.target, call.eid, payload)
    except Exception as exc:  # noqa: BLE001 - fail closed, and say why
        return False, f"postcondition raised {type(exc).__name__}: {exc}"
    return (True, "") if ok is True else (False, f"postcondition returned {ok!r}")


def post_failed(call: EffectCall, detail: str, result: Any) -> EffectResult:
    """The target said it applied, but reading it back says otherwise: never success. The
    effect is AMBIGUOUS (a human reconciles) and the call returns POSTCONDITION_FAILED."""
    with call.port.fenced_write() as fence:
        eff = call.lock_effect()
        if eff["state"] != "dispatched":
            return call.resolved_elsewhere_in_txn(eff)
        chain = call.chain(fence["now"].timestamp())
        chain.append("AMBIGUOUS", reason=f"postcondition failed: {detail}", result=result)
        call.set_state("ambiguous")
        return call.record("POSTCONDITION_FAILED", {"detail": detail})
