"""What the gate reads from a target object: TargetSpec, checked by check_target before
anything is written (the contract itself is documented in interlock_runtime.effects.targets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

DEFAULT_DEDUP_MARGIN = 600.0  # seconds; tier 1 is safe only with margin > timeout + settle (C2)
TARGET_DEFAULTS = {"send_timeout": 35.0, "settle_margin": 10.0, "premise_max_age": 5.0,
                   "dedup_window": float("inf"), "dedup_margin": DEFAULT_DEDUP_MARGIN,
                   "breaker_cooldown": 60.0}  # fmt: skip


def timing_values(given: dict[str, float | None], prefix: str = "") -> dict[str, float]:
    """A target constructor's timing attributes: each given value, or the runtime's default
    where None, as a float; InvalidInput (its message after `prefix`) for anything but a
    number of seconds >= 0."""
    out = {}
    for key, value in given.items():
        value = TARGET_DEFAULTS[key] if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InvalidInput(f"{prefix}{key} must be a number of seconds >= 0, got {value!r}")
        out[key] = float(value)
    return out


@dataclass(frozen=True)
class TargetSpec:
    """What the runtime reads from a target object (attributes with the spec's defaults)."""

    name: str
    tier: int
    queryable: bool
    send_timeout: float
    settle_margin: float
    premise_max_age: float
    dedup_window: float
    dedup_margin: float
    breaker_cooldown: float
    breaker_threshold: int | None = None  # None: no circuit breaker for this target


def check_target(target: Any) -> TargetSpec:
    """Validate a target before anything is written; includes the C2 dedup-margin check."""
    missing = [m for m in ("apply", "validate_premises") if not callable(getattr(target, m, None))]
    if missing or not isinstance(getattr(target, "name", None), str):
        raise InvalidInput(
            f"{target!r} is not an effect target: it needs a `name` and callable "
            f"{', '.join(missing) or 'apply/validate_premises'} (see interlock_runtime.effects)"
        )
    tier = getattr(target, "tier", None)
    if tier not in (1, 2, 3):
        raise InvalidInput(f"target {target.name!r} has tier {tier!r}; a tier is 1, 2 or 3")
    vals = {k: float(getattr(target, k, v)) for k, v in TARGET_DEFAULTS.items()}
    queryable = bool(getattr(target, "queryable", tier == 2))
    if tier == 2 and not queryable:
        raise InvalidInput(
            f"target {target.name!r}: tier 2 means the target answers lookups (query) but does "
            "not dedupe; a target that does neither is tier 3 (recovery cannot tell whether a "
            "send landed, so it must not resend)"
        )
    if queryable and not callable(getattr(target, "query", None)):
        raise InvalidInput(f"target {target.name!r} is queryable but has no query() method")
    if tier == 1 and vals["dedup_margin"] <= vals["send_timeout"] + vals["settle_margin"]:
        raise InvalidInput(
            f"target {target.name!r}: tier 1 is safe only when DEDUP_MARGIN > send_timeout + "
            f"settle_margin, but {vals['dedup_margin']} <= {vals['send_timeout']} + "
            f"{vals['settle_margin']}; raise dedup_margin or lower the timeouts (docs/design.md#model-findings C2)"
        )
    threshold = getattr(target, "breaker_threshold", None)
    if threshold is not None and (not isinstance(threshold, int) or threshold < 1):
        raise InvalidInput(f"target {target.name!r}: breaker_threshold must be an integer >= 1 "
                           f"(or None for no breaker), got {threshold!r}")  # fmt: skip
    return TargetSpec(target.name, tier, queryable, **vals, breaker_threshold=threshold)


def target_action(target: Any, spec: TargetSpec) -> str:
    """The action an effect on `target` performs unless ctx.effect names one: the target's
    `action` attribute, else its name (a grant must allow that action)."""
    action = getattr(target, "action", None)
    return action if isinstance(action, str) and action else spec.name
